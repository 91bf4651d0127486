"""The fixed cost per step taken out of measured speeds: pure numpy, no cluster."""

import json

import numpy as np
import pytest

import ksync
from ksync import Measurement, RuleController
from predictor.allocator import BatchAllocator
from predictor.baselines import ChangePointSmoothing, LastValue
from predictor.regime import measured, true_speeds
from predictor.regret import allocation_regret
from predictor.schedule import AllocationSchedule
from predictor.step_cost import StepCostEstimate

COST = 0.025


def window(est, batches, per_sample, steps=10, noise=0.0, rng=None):
    """One window of ``steps`` steps of ``batches`` at ``per_sample`` seconds a sample."""
    b, u = np.asarray(batches, float), np.asarray(per_sample, float)
    busy = steps * (COST + b * u)
    if noise:
        busy = busy * (1 + noise * rng.standard_normal(b.size))
    return est.speeds(samples=steps * b, busy_s=busy, steps=[steps] * b.size)


def test_the_cost_is_learned_as_batches_move_and_speeds_come_out_per_sample():
    rng = np.random.default_rng(0)
    est = StepCostEstimate()
    u = np.array([0.0025, 0.0025, 0.005, 0.01])
    for batches in ([32] * 4, [48, 48, 24, 12], [32] * 4, [40, 40, 32, 16], [32] * 4):
        speeds = window(est, batches, u, noise=0.01, rng=rng)
    assert est.cost == pytest.approx(COST, rel=0.15)
    np.testing.assert_allclose(speeds, 1 / u, rtol=0.06)
    # Samples over busy time make the fastest 3.3x the slowest where it is 4x: the
    # fixed cost weighs more on the slow worker's small steps.
    naive = 32 / (COST + 32 * u)
    assert naive[0] / naive[3] < 0.85 * (u[3] / u[0])


def test_until_enough_pairs_the_speeds_are_samples_over_busy_time():
    est = StepCostEstimate(min_pairs=3)
    speeds = window(est, [32, 32], [0.005, 0.01])
    assert est.cost == 0.0
    np.testing.assert_allclose(speeds, 32 / (COST + 32 * np.array([0.005, 0.01])))
    window(est, [40, 24], [0.005, 0.01])          # two pairs: not yet
    assert est.cost == 0.0 and len(est.pairs) == 2


def test_a_worker_whose_speed_moved_with_its_batch_is_outvoted():
    est = StepCostEstimate(min_pairs=1)
    window(est, [32, 32, 32], [0.005, 0.005, 0.005])
    # Worker 2 slows as its batch moves: its pair is wrong, the other two are right.
    window(est, [40, 40, 16], [0.005, 0.005, 0.008])
    assert len(est.pairs) == 3 and max(est.pairs) > 4 * COST
    assert est.cost == pytest.approx(COST)
    # Small moves make no pairs (timing noise would decide them).
    window(est, [41, 41, 16], [0.005, 0.005, 0.008])
    assert len(est.pairs) == 3


def test_a_wrong_cost_cannot_make_a_speed_negative_or_infinite():
    est = StepCostEstimate(min_pairs=1)
    est.pairs.extend([10.0])   # as if it had learned ten seconds a step
    speeds = window(est, [32, 32], [0.005, 0.01])
    assert all(np.isfinite(speeds)) and min(speeds) > 0
    assert window(est, [0, 32], [0.005, 0.01])[0] is None   # no samples: no speed


@pytest.mark.parametrize("kwargs", [dict(min_change=0.0), dict(min_change=1.0),
                                    dict(memory=0), dict(min_pairs=1.5)])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError, match="must be"):
        StepCostEstimate(**kwargs)


def test_the_controller_allocates_on_speeds_per_sample_and_checkpoints_the_cost():
    def run(step_cost):
        schedule = AllocationSchedule(BatchAllocator(64, min_batch=4, hysteresis=0.0),
                                      mode="last", step_cost=step_cost)
        controller = RuleController(ksync.BSP(), 2, schedule, allocate_every=10)
        u = np.array([0.001, 0.003])  # worker 1 is 3x slower per sample
        samples, busy, pushes = np.zeros(2), np.zeros(2), np.zeros(2)
        for version in (0, 10, 20):
            controller.refresh(Measurement(version=version, live_workers=(0, 1),
                                           worker_samples=tuple(samples),
                                           busy_s=tuple(busy), worker_pushes=tuple(pushes)))
            b = np.array(controller.sizes, float)
            samples, busy, pushes = samples + 10 * b, busy + 10 * (COST + b * u), pushes + 10
        return controller

    controller = run(StepCostEstimate(min_pairs=1))
    # Balanced (3:1, the speeds per sample) at the second allocation, the first to see
    # batches move; samples over busy time are one allocation away (47, 17).
    assert controller.sizes == [48, 16]
    assert run(None).sizes == [47, 17]
    assert controller.schedule.history[-1]["step_cost_s"] == pytest.approx(COST)
    state = json.loads(json.dumps(controller.get_state()))
    restored = RuleController(ksync.BSP(), 2, AllocationSchedule(
        BatchAllocator(64, min_batch=4), mode="last", step_cost=StepCostEstimate(min_pairs=1)))
    restored.set_state(state)
    assert restored.schedule.step_cost.cost == pytest.approx(COST)
    del state["allocation"]["step_cost"]   # a checkpoint from before: learns it again
    restored.set_state(state)


def colocated_speeds():
    """The benchmark's `colocated` schedule in 2.5 s windows, as the replay takes it."""
    from cluster_sim.scenarios import load_scenario
    from cluster_sim.scenarios.windows import speed_matrix
    return true_speeds(speed_matrix(load_scenario("bench/colocated"), window_s=2.5))


def test_with_a_step_cost_the_estimate_lets_a_forecast_allocate_as_fast_as_last_value():
    """The replay of the harness's `colocated` schedule, 25 ms a step (5 samples' time),
    3 % timing noise: samples over busy time leave the smoothed forecast slower than
    last value; with the cost taken out it is no slower."""
    v = colocated_speeds()[:, :240]
    forecaster = ChangePointSmoothing().fit(measured(v, 0.03, 9))
    for seed in (0, 1, 2):
        seen = measured(v, 0.03, seed)
        times = {est: [1 + allocation_regret(v, f, measured=seen, global_batch=256,
                                             step_cost=5.0, estimate_cost=est,
                                             mode=mode)["time_regret"]
                       for f, mode in ((LastValue(), "last"), (forecaster, "forecast"))]
                 for est in (False, True)}
        assert times[True][1] < times[False][1]
        assert times[True][1] <= times[True][0]


def test_the_default_forecaster_allocates_for_the_window_the_sizes_hold_for():
    """A mean over 10 windows ahead lets the GRU hedge for speeds switching back, which
    leaves a slowed worker too large a batch; the schedule's default looks one window
    ahead, and with the cost taken out allocates no slower than last value."""
    from predictor import GRUSmoothingForecaster
    v = colocated_speeds()[:, :120]
    seen = measured(v, 0.03, 0)
    gru = GRUSmoothingForecaster.default()
    last, h1, h10 = (1 + allocation_regret(v, f, measured=seen, global_batch=256,
                                           step_cost=5.0, mode=mode, **h)["time_regret"]
                     for f, mode, h in ((LastValue(), "last", {}), (gru, "forecast", {}),
                                        (gru, "forecast", dict(horizon=10))))
    assert h1 <= last < h10
