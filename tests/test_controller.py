"""The control loop shared by the strategy and the simulator: pure Python, and one test
that puts the real strategy and the simulator on the same speeds."""

import numpy as np
import pytest

import ksync
from ksync import Measurement, RuleController
from predictor.allocator import BatchAllocator
from predictor.schedule import AllocationSchedule


def measure(version, live=(0, 1, 2), times=(0.1, 0.1, 0.1), running=(None,) * 3,
            hist=(0,), samples=(0, 0, 0), busy=(0.0, 0.0, 0.0), blocked=None):
    return Measurement(version=version, live_workers=tuple(live), iteration_times=times,
                       running_times=running, staleness_hist=hist, worker_samples=samples,
                       busy_s=busy, blocked_workers=blocked)


def test_k_follows_the_live_workers_and_comes_back_with_a_reason():
    controller = RuleController(ksync.BSP(), 3)
    assert controller.refresh(measure(0)).changed is False
    decision = controller.refresh(measure(5, live=(0, 2)))
    assert decision.changed and decision.rule.k == 2
    assert "2 live worker" in controller.explain()
    decision = controller.refresh(measure(9))
    assert decision.changed and decision.rule.k == 3
    assert controller.explain().endswith("policy rule restored with all its workers live")
    assert [v for v, _, _ in controller.policy.history] == [0, 5, 9]


def test_k_drops_to_the_blocked_workers_only_when_they_are_all_that_can_push():
    controller = RuleController(ksync.KSync(k=3), 3)
    controller.refresh(measure(0))
    decision = controller.refresh(measure(4, blocked=(1,)))
    assert decision.rule.k == 1 and controller.capped_for_work
    assert "with steps left" in controller.explain()
    assert controller.refresh(measure(5)).rule.k == 3 and not controller.capped_for_work


def test_a_rule_without_waiting_is_not_capped_at_the_live_workers():
    """Rennala's B gradients at the current version may all come from one worker: a
    cap at the live workers (or at those with steps left) would change the method, not
    unblock a round, so only waiting rules are capped."""
    controller = RuleController(ksync.Rennala(batch=8), 3)
    assert controller.refresh(measure(0)).rule.k == 8
    decision = controller.refresh(measure(4, live=(1,), blocked=(1,)))
    assert decision.rule.k == 8 and not decision.changed and not controller.capped_for_work
    assert controller.explain().endswith("initial rule")
    # K-async likewise: workers push again without waiting, so K > live completes.
    kasync = RuleController(ksync.KAsync(k=3), 3)
    kasync.refresh(measure(0))
    assert kasync.refresh(measure(2, live=(0,))).rule.k == 3


def test_a_waiting_rule_is_still_capped_at_the_live_workers():
    controller = RuleController(ksync.AdaSync(k0=3), 3)
    controller.refresh(measure(0))
    assert controller.refresh(measure(2, live=(0, 1))).rule.k == 2


def test_the_measured_loss_reaches_the_policy():
    seen = []

    class Recording(ksync.ASP):
        refresh_every = 1

        def observe(self, observation):
            seen.append(observation.loss)

    controller = RuleController(Recording(), 3)
    controller.refresh(Measurement(version=0, live_workers=(0, 1, 2)))
    controller.refresh(Measurement(version=1, live_workers=(0, 1, 2), loss=0.75))
    controller.refresh(Measurement(version=2, live_workers=(0, 1, 2)))
    assert seen == [0.75, None]


def test_the_policy_sees_the_staleness_of_its_window_only():
    seen = []

    class Recording(ksync.ASP):
        refresh_every = 10

        def observe(self, observation):
            seen.append(observation)

    controller = RuleController(Recording(), 3)
    controller.refresh(measure(0, hist=(100, 100)))            # the window starts here
    controller.refresh(measure(5, hist=(200, 100)))            # not due: 5 < 10 versions
    controller.refresh(measure(10, hist=(100, 100, 0, 50)))   # histogram grew longer
    assert len(seen) == 1
    # window: bins (0, 0, 0, 50): every push in it was 3 stale
    assert seen[0].staleness_p95 == 3 and seen[0].version == 10


def test_a_stalled_worker_makes_the_policy_observe_before_its_time():
    policy = ksync.Adaptive(refresh_every=100)
    controller = RuleController(policy, 3)
    controller.refresh(measure(0))
    decision = controller.refresh(measure(2, running=(None, None, 5.0)))
    assert decision.changed and (not decision.rule.wait or decision.rule.k < 3)
    assert len(policy.history) == 2


def test_allocation_windows_speeds_since_the_last_allocation():
    schedule = AllocationSchedule(BatchAllocator(96, min_batch=4, hysteresis=0.0), mode="last")
    controller = RuleController(ksync.BSP(), 3, schedule, allocate_every=10)
    assert controller.sizes == [32, 32, 32]
    controller.refresh(measure(0))
    assert controller.refresh(measure(9, samples=(320, 320, 320), busy=(1, 1, 1))).sizes is None
    # Over versions 0-10 the last worker was 3x slower; over 10-20 all were alike: each
    # allocation sees its own window, not the run's averages.
    first = controller.refresh(measure(10, samples=(330, 330, 330), busy=(1.1, 1.1, 3.3)))
    assert first.sizes[0] == first.sizes[1] and first.sizes[2] < first.sizes[0] / 2
    controller.refresh(measure(20, samples=(660, 660, 660), busy=(2.2, 2.2, 4.4)))
    assert max(controller.sizes) - min(controller.sizes) <= 1


def test_allocate_every_is_checked():
    schedule = AllocationSchedule(BatchAllocator(96, min_batch=4))
    with pytest.raises(ValueError, match="allocate_every"):
        RuleController(ksync.BSP(), 3, schedule, allocate_every=0)


def test_the_simulator_runs_the_products_controller_and_allocation_schedule():
    """The simulator's allocation starts with the schedule's profiling phase, and its
    rule changes are the controller's (the same object type the strategy holds)."""
    from cluster_sim.sim import SimConfig, Simulation
    sim = Simulation(ksync.Adaptive(refresh_every=10),
                     SimConfig(num_workers=4, max_pushes=400, eval_every=200,
                               stop_at_target=False, speeds=(1.0, 1.0, 1.0, 0.2)),
                     batch_allocation=BatchAllocator(128, min_batch=4), allocate_every=10)
    result = sim.run()
    assert isinstance(sim.controller, RuleController)
    schedule = sim.controller.schedule
    assert schedule.history[0]["stage"] == "profile"
    assert schedule.history[1]["stage"] == "first allocation from profile"
    assert result["batch_sizes"][-1]["sizes"] == sim.controller.sizes
    assert np.argmin(sim.controller.sizes) == 3  # the slow worker gets the least
    assert result["k_history"] == [
        {"version": v, "k": r.k, "wait": r.wait, "rule": r.describe(), "reason": why}
        for v, r, why in sim.policy.history]


def test_strategy_and_simulator_decide_alike_on_the_same_speeds(cluster):
    """One worker 5x slower than the other two: the real strategy (delays injected in
    the graph) and the simulator (the same speeds, the same framework cost per step)
    both leave BSP for the same K-async rule at the same first observation."""
    import tf_keras as keras

    from cluster_sim.sim import SimConfig, Simulation
    from cluster_sim.slowdown import SlowdownLayer
    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy

    speeds, us_per_sample, steps = [1.0, 1.0, 0.2], 2000.0, 90
    data = digits()
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.Adaptive(refresh_every=10))
    with strategy.scope():
        slowdown = SlowdownLayer(len(speeds))
        model = compile_classifier(mlp(data.num_features, data.num_classes,
                                       slowdown=slowdown), keras.optimizers.SGD(0.05))
    slowdown.set_speeds(speeds, us_per_sample=us_per_sample)
    model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(32)), epochs=1,
              steps_per_epoch=steps, verbose=0)
    sim = Simulation(ksync.Adaptive(refresh_every=10), SimConfig(
        num_workers=len(speeds), speeds=tuple(speeds), us_per_sample=us_per_sample,
        step_overhead_s=0.04, max_pushes=steps, eval_every=steps, stop_at_target=False))
    sim.run()
    real, simulated = strategy.policy.history, sim.policy.history
    assert len(real) > 1 and len(simulated) > 1, (real, simulated)
    (_, real_rule, real_why), (_, sim_rule, sim_why) = real[1], simulated[1]
    assert (real_rule.k, real_rule.wait) == (sim_rule.k, sim_rule.wait) == (2, False)
    # "1 of 3 measured workers slower than 1.3x the fastest (...)"
    assert real_why.split(" (")[0] == sim_why.split(" (")[0]


def test_adasync_on_the_strategy_follows_the_loss_fit_reports(cluster):
    """The loss travels from `model.fit`'s epoch logs through `KSyncLossCallback` and
    `KSyncStrategy.report_loss` to the controller, and K rises on the PS as it falls."""
    import tf_keras as keras

    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy
    from strategies.callbacks import KSyncLossCallback

    data = digits()
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.AdaSync(k0=1, refresh_every=1))
    with strategy.scope():
        model = compile_classifier(mlp(data.num_features, data.num_classes),
                                   keras.optimizers.SGD(0.1))
    assert "no training loss reported yet" in strategy.policy.explain()
    history = model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(32)),
                        epochs=4, steps_per_epoch=20, verbose=0,
                        callbacks=[KSyncLossCallback(strategy)])
    losses = history.history["loss"]
    assert losses[2] < losses[0], losses        # the premise: training lowers the loss
    explained = strategy.policy.explain()
    assert f"F0={losses[0]:.4g}" in explained, explained
    assert strategy.rule.k >= 2 and strategy.telemetry()["k"] == strategy.rule.k
    assert any("loss fell from" in why for _, _, why in strategy.policy.history)
    with pytest.raises(TypeError, match="takes a number"):
        strategy.report_loss("low")
