"""The control loop shared by the strategy and the simulator: pure Python, and one test
that puts the real strategy and the simulator on the same speeds."""

import json

import numpy as np
import pytest

import ksync
from ksync import Measurement, Rule, RuleController
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
    assert [v for v, _, _ in controller.history] == [0, 5, 9]


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

        def observe(self, observation, context):
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

        def observe(self, observation, context):
            seen.append(observation)

    controller = RuleController(Recording(), 3)
    controller.refresh(measure(0, hist=(100, 100)))            # the window starts here
    controller.refresh(measure(5, hist=(200, 100)))            # not due: 5 < 10 versions
    controller.refresh(measure(10, hist=(100, 100, 0, 50)))   # histogram grew longer
    assert len(seen) == 1
    # window: bins (0, 0, 0, 50): every push in it was 3 stale
    assert seen[0].staleness_p95 == 3 and seen[0].version == 10


def test_a_stalled_worker_makes_the_policy_observe_before_its_time():
    seen = []

    class Recording(ksync.Adaptive):
        def observe(self, observation, context):
            seen.append(observation.version)
            return super().observe(observation, context)

    controller = RuleController(Recording(refresh_every=100), 3)
    controller.refresh(measure(0))
    decision = controller.refresh(measure(2, running=(None, None, 5.0)))
    assert seen == [2]     # before first_refresh and refresh_every: the stall forced it
    assert not decision.rule.wait or decision.rule.k < 3


def test_one_policy_instance_serves_two_controllers_independently():
    """A policy holds parameters only: two runs sharing one instance each keep their own
    history, losses and decisions, whatever the other saw."""
    policy = ksync.AdaSync(k0=1, refresh_every=5)
    a, b = RuleController(policy, 4), RuleController(policy, 4)
    for controller in (a, b):
        controller.refresh(Measurement(0, live_workers=(0, 1, 2, 3)))
    a.refresh(Measurement(5, live_workers=(0, 1, 2, 3), loss=4.0))
    b.refresh(Measurement(5, live_workers=(0, 1, 2, 3), loss=1.0))
    assert a.refresh(Measurement(10, live_workers=(0, 1, 2, 3), loss=1.0)).rule.k == 2
    assert b.refresh(Measurement(10, live_workers=(0, 1, 2, 3), loss=1.0)).rule.k == 1
    assert [r.k for _, r, _ in a.history] == [1, 2] and [r.k for _, r, _ in b.history] == [1]
    assert a.first_loss == (5, 4.0) and b.first_loss == (5, 1.0)
    assert "from F0=4" in a.explain() and "from F0=1" in b.explain()
    # A third run starts afresh: nothing of the first two carried over in the policy.
    c = RuleController(policy, 4)
    assert c.history == [(0, Rule(k=1, wait=True, max_staleness=0), "initial rule")]
    assert "no training loss reported yet" in c.explain()

    staged = ksync.SyncSwitch(switch_after=10)
    early, late = RuleController(staged, 3), RuleController(staged, 3)
    for controller in (early, late):
        controller.refresh(measure(0))
    assert early.refresh(measure(10)).rule == ksync.ASP().rule(3)
    assert late.refresh(measure(5)).rule == ksync.BSP().rule(3)   # its own stage


def test_a_policy_has_no_history_and_says_where_it_went():
    with pytest.raises(AttributeError, match="controller keeps the history"):
        ksync.BSP().history  # noqa: B018 (the attribute access is the test)
    with pytest.raises(AttributeError, match="strategy.explain()"):
        ksync.Adaptive().explain()


def test_a_proposal_that_is_not_rule_and_reason_is_refused_clearly():
    class Bare(ksync.ASP):
        refresh_every = 1

        def observe(self, observation, context):
            return ksync.BSP().rule(context.num_workers)   # the rule alone, no reason

    controller = RuleController(Bare(), 3)
    controller.refresh(measure(0))
    with pytest.raises(TypeError, match=r"must return \(rule, reason\) or None"):
        controller.refresh(measure(1))


def test_state_round_trip_restores_the_history_and_the_losses():
    policy = ksync.AdaSync(k0=1, refresh_every=5)
    controller = RuleController(policy, 4)
    for version, live, loss in ((0, (0, 1, 2, 3), None), (5, (0, 1, 2, 3), 4.0),
                                (10, (0, 1, 2, 3), 1.0), (12, (0,), None)):
        controller.refresh(Measurement(version, live_workers=live, loss=loss))
    state = json.loads(json.dumps(controller.get_state()))   # as a checkpoint holds it
    restored = RuleController(policy, 4)
    restored.set_state(state)
    assert restored.history == controller.history and len(restored.history) == 3
    assert (restored.rule, restored.policy_rule) == (controller.rule, controller.policy_rule)
    assert restored.first_loss == (5, 4.0) and restored.explain() == controller.explain()
    # It goes on from F0 = 4, not from the next loss.
    restored.refresh(Measurement(13, live_workers=(0, 1, 2, 3)))
    assert restored.refresh(Measurement(18, live_workers=(0, 1, 2, 3),
                                        loss=0.25)).rule.k == 4
    # A checkpoint from before the controller kept the losses restores without them.
    del state["first_loss"], state["last_loss"]
    older = RuleController(policy, 4)
    older.set_state(state)
    assert older.history == controller.history and older.first_loss is None


def test_one_policy_instance_serves_two_simulations_independently():
    from cluster_sim.sim import SimConfig, Simulation
    policy = ksync.AdaSync(k0=1, refresh_every=10)
    config = dict(num_workers=4, max_pushes=400, eval_every=40, stop_at_target=False)
    skewed = Simulation(policy, SimConfig(speeds=(1.0, 1.0, 1.0, 0.2), **config))
    alike = Simulation(policy, SimConfig(speeds=(1.0, 1.0, 1.0, 1.0), **config))
    skewed.run(), alike.run()
    assert skewed.controller.history is not alike.controller.history
    # Each raised K as its own loss fell, at its own versions.
    assert len(skewed.controller.history) > 1 and len(alike.controller.history) > 1
    assert ([v for v, _, _ in skewed.controller.history]
            != [v for v, _, _ in alike.controller.history])
    # The same run alone decides the same: the other sharing the policy changed nothing.
    alone = Simulation(ksync.AdaSync(k0=1, refresh_every=10),
                       SimConfig(speeds=(1.0, 1.0, 1.0, 0.2), **config))
    alone.run()
    assert alone.controller.history == skewed.controller.history


def test_the_refresh_clock_says_when_a_refresh_is_due():
    """Every `refresh_every` finished steps, at a live set no refresh has seen (until a
    refresh sees it), and after `idle_s` without progress while steps are queued."""
    from ksync.controller import IDLE_S, RefreshClock
    clock = RefreshClock(RuleController(ksync.AdaSync(refresh_every=3), 3))
    live = (0, 1, 2)
    due = [clock.step_finished(now=0.1 * i, live=live) for i in range(1, 8)]
    assert due == [True] * 7  # no refresh has seen the live workers yet
    clock.refreshed(live, now=0.7)
    due = [clock.step_finished(now=0.7 + 0.1 * i, live=live) for i in range(1, 7)]
    assert due == [False, True, False, False, True, False]  # the count went on meanwhile
    assert clock.step_finished(now=1.4, live=(0, 2))  # worker 1 gone
    clock.refreshed(None, now=1.4)  # a refresh that did not see the new set ...
    assert clock.step_finished(now=1.5, live=(0, 2))  # ... leaves the change due
    clock.refreshed((0, 2), now=1.5)
    assert not clock.step_finished(now=1.6, live=(0, 2))
    assert clock.next_idle_check() == pytest.approx(1.6 + IDLE_S)
    assert not clock.idle_due(now=1.6 + IDLE_S / 2, steps_queued=True)
    assert clock.idle_due(now=1.6 + IDLE_S, steps_queued=True)
    assert not clock.idle_due(now=1.6 + 10 * IDLE_S, steps_queued=False)
    # A policy that never observes: only the live set and idle time make refreshes due.
    bsp = RefreshClock(RuleController(ksync.BSP(), 3))
    bsp.refreshed(live, now=0.0)
    assert not any(bsp.step_finished(now=t, live=live) for t in range(100))
    with pytest.raises(ValueError, match="idle_s"):
        RefreshClock(RuleController(ksync.BSP(), 3), idle_s=0)


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
                               stop_at_target=False, speeds=(1.0, 1.0, 1.0, 0.2),
                               allocate_every=10),
                     batch_allocation=BatchAllocator(128, min_batch=4))
    result = sim.run()
    assert isinstance(sim.controller, RuleController)
    schedule = sim.controller.schedule
    assert schedule.history[0]["stage"] == "profile"
    assert schedule.history[1]["stage"] == "first allocation from profile"
    assert result["batch_sizes"][-1]["sizes"] == sim.controller.sizes
    assert np.argmin(sim.controller.sizes) == 3  # the slow worker gets the least
    assert result["k_history"] == [
        {"version": v, "k": r.k, "wait": r.wait, "rule": r.describe(), "reason": why}
        for v, r, why in sim.controller.history]


class WithinTolerance(ksync.Policy):
    """From BSP to K-async over the workers within 1.9x of the fastest: a decision from
    the measured step times alone, which the strategy and the simulator measure alike.
    1.9x is about the geometric middle of the test's step times (equal, and 3.5x slower:
    5x the compute plus a framework cost that does not scale): at 1.3x a loaded
    machine's noise on the real steps (two equal workers 1.3x apart) changed the
    decision."""

    name, refresh_every = "within", 10

    def _rule(self, num_workers):
        return Rule(k=num_workers, wait=True, max_staleness=0)

    def observe(self, observation, context):
        now = observation.effective_times()
        times = [now[w] for w in observation.live_workers if now[w]]
        if not times:
            return None
        k = sum(t <= 1.9 * min(times) for t in times)
        rule = Rule(k=k, wait=False, max_staleness=4)
        if rule == context.rule:
            return None
        return rule, f"{k} of {len(times)} measured workers within 1.9x of the fastest"


def test_strategy_and_simulator_decide_alike_on_the_same_speeds(cluster):
    """One worker 5x slower than the other two: the real strategy (delays injected in
    the graph) and the simulator (the same speeds, the same framework cost per step)
    measure the same step times, so a policy deciding on them leaves BSP for the same
    K-async rule at the same first observation."""
    import tf_keras as keras

    from cluster_sim.sim import SimConfig, Simulation
    from cluster_sim.slowdown import SlowdownLayer
    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy

    speeds, us_per_sample, steps = [1.0, 1.0, 0.2], 2000.0, 90
    data = digits()
    strategy = KSyncStrategy(cluster.resolver(), policy=WithinTolerance())
    with strategy.scope():
        slowdown = SlowdownLayer(len(speeds))
        model = compile_classifier(mlp(data.num_features, data.num_classes,
                                       slowdown=slowdown), keras.optimizers.SGD(0.05))
    slowdown.set_speeds(speeds, us_per_sample=us_per_sample)
    model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(32)), epochs=1,
              steps_per_epoch=steps, verbose=0)
    sim = Simulation(WithinTolerance(), SimConfig(
        num_workers=len(speeds), speeds=tuple(speeds), us_per_sample=us_per_sample,
        step_overhead_s=0.04, max_pushes=steps, eval_every=steps, stop_at_target=False))
    sim.run()
    real, simulated = strategy.controller.history, sim.controller.history
    assert len(real) > 1 and len(simulated) > 1, (real, simulated)
    (_, real_rule, real_why), (_, sim_rule, sim_why) = real[1], simulated[1]
    assert (real_rule.k, real_rule.wait) == (sim_rule.k, sim_rule.wait) == (2, False)
    assert real_why == sim_why == "2 of 3 measured workers within 1.9x of the fastest"


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
    assert "no training loss reported yet" in strategy.explain()
    history = model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(32)),
                        epochs=4, steps_per_epoch=20, verbose=0,
                        callbacks=[KSyncLossCallback(strategy)])
    losses = history.history["loss"]
    assert losses[2] < losses[0], losses        # the premise: training lowers the loss
    explained = strategy.explain()
    assert f"F0={losses[0]:.4g}" in explained, explained
    # The policy raised K; the rule in force at the end may be capped below it (at the end
    # of the last epoch only the workers with steps left count), so judge the decision.
    raised = [rule.k for _, rule, why in strategy.controller.history if "loss fell from" in why]
    assert raised and max(raised) >= 2, strategy.controller.history
    assert strategy.telemetry()["k"] == strategy.rule.k
    assert strategy.telemetry()["explanation"] == explained
    with pytest.raises(TypeError, match="takes a number"):
        strategy.report_loss("low")
