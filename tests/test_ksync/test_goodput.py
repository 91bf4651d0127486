"""The goodput rule: the noise-scale estimate, the throughput/staleness model, the
decisions, and the same code in the controller and the simulator (no cluster)."""

import dataclasses
import heapq

import numpy as np
import pytest

import ksync
from ksync import goodput, noise
from ksync.controller import Measurement, RuleController
from ksync.rule import Rule


# -- the noise scale ---------------------------------------------------------------------

def _rounds(rng, signal, trace, batches, rounds, dim=20):
    """Sums of per-round (|G|^2, tr(S)) estimates for gradients of the given batches
    drawn around a true gradient of squared norm ``signal`` with per-sample covariance
    of trace ``trace``."""
    g = np.zeros(dim)
    g[0] = np.sqrt(signal)
    total = np.zeros(2)
    for _ in range(rounds):
        r = noise.RoundNoise()
        grads = [g + rng.normal(0.0, np.sqrt(trace / dim / b), dim) for b in batches]
        for grad, b in zip(grads, batches):
            r.add(float(grad @ grad), b)
        mean = sum(b * grad for grad, b in zip(grads, batches)) / sum(batches)
        total += r.estimate(float(mean @ mean))
    return total


@pytest.mark.parametrize("batches", [(32, 32, 32, 32), (8, 16, 32, 64, 64), (32, 32)])
def test_noise_scale_recovers_a_known_gradient_distribution(batches):
    rng = np.random.default_rng(1)
    signal_sum, trace_sum = _rounds(rng, signal=0.5, trace=200.0, batches=batches,
                                    rounds=3000)
    assert noise.noise_scale(signal_sum, trace_sum) == pytest.approx(400.0, rel=0.1)


def test_a_round_of_one_gradient_tells_nothing_and_noise_alone_gives_no_scale():
    r = noise.RoundNoise()
    r.add(4.0, 32)
    assert r.estimate(4.0) == (0.0, 0.0)
    assert noise.noise_scale(0.0, 0.0) is None
    assert noise.noise_scale(-1.0, 10.0) is None


# -- the model ---------------------------------------------------------------------------

def test_ksync_forecast_waits_for_the_kth_fastest_and_counts_only_the_k_fastest():
    f = goodput.forecast(Rule(k=2, wait=True, max_staleness=0), [0.3, 0.1, 0.2, 0.4],
                         [10, 20, 30, 40], noise_scale=50.0, tolerance=4.0)
    assert f.updates_per_s == pytest.approx(1 / 0.2)
    assert f.samples_per_update == 50 and f.staleness == 0 and f.contributors == 2
    assert f.goodput == pytest.approx(5.0 * 50 / 100)


def _simulated_kasync(times, k, bound, pushes=4000):
    """A timing-only run of K-async through the reference `UpdateState`: workers read
    at the start of each step, push at its end, never wait. Returns updates/s, the mean
    staleness of accepted pushes and the accepted workers."""
    state = ksync.UpdateState(len(times), Rule(k=k, wait=False, max_staleness=bound))
    heap = [(t, w, 0) for w, t in enumerate(times)]
    heapq.heapify(heap)
    stale, accepted, now = [], set(), 0.0
    for _ in range(pushes):
        now, w, read = heapq.heappop(heap)
        result = state.push(worker=w, version_read=read, samples=32)
        if result.accepted:
            stale.append(result.staleness)
            accepted.add(w)
        heapq.heappush(heap, (now + times[w], w, state.version))
    return state.version / now, float(np.mean(stale)), accepted


@pytest.mark.parametrize("times, k, bound", [
    ([0.1] * 8, 2, None),
    ([0.1, 0.1, 0.2, 0.4] * 2, 2, None),
    ([0.1, 0.13, 0.17, 0.2, 0.35, 0.5], 3, None),
    ([0.1, 0.1, 0.1, 2.0], 1, 4),         # the slow worker's gradients are dropped
])
def test_kasync_forecast_matches_a_timing_run_of_the_reference_state(times, k, bound):
    rule = Rule(k=k, wait=False, max_staleness=bound)
    f = goodput.forecast(rule, times, [32] * len(times), noise_scale=50.0, tolerance=4.0)
    rate, mean_stale, accepted = _simulated_kasync(times, k, bound)
    assert f.updates_per_s == pytest.approx(rate, rel=0.05)
    assert f.staleness == pytest.approx(mean_stale, rel=0.15, abs=0.2)
    assert f.contributors == len(accepted)


def test_exposure_scales_the_predicted_staleness():
    rule = Rule(k=2, wait=False)
    whole = goodput.forecast(rule, [0.1] * 8, [32] * 8, 50.0, 4.0)
    part = goodput.forecast(rule, [0.1] * 8, [32] * 8, 50.0, 4.0, exposure=0.25)
    assert part.staleness == pytest.approx(whole.staleness / 4)
    assert part.goodput > whole.goodput


# -- decisions ---------------------------------------------------------------------------

def _observe(times, noise_scale=None, rule=None, staleness_mean=None, policy=None):
    """The policy's proposal on these measurements, from BSP unless ``rule`` is given."""
    policy = policy or ksync.Adaptive()
    n = len(times)
    context = ksync.Context(num_workers=n, rule=rule or ksync.BSP().rule(n))
    observation = ksync.Observation(version=20, iteration_times=tuple(times),
                                    live_workers=tuple(range(n)), noise_scale=noise_scale,
                                    staleness_mean=staleness_mean,
                                    batch_sizes=(32.0,) * n)
    return policy.observe(observation, context)


def test_a_larger_noise_scale_never_makes_updates_smaller():
    times = [0.1, 0.1, 0.2, 0.4] * 2
    sizes = []
    for scale in (20.0, 200.0, 2000.0, 20000.0):
        proposal = _observe(times, noise_scale=scale)
        rule = proposal[0] if proposal else ksync.BSP().rule(8)
        sizes.append(rule.k)
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_the_noisier_an_update_the_less_staleness_it_tolerates():
    times, batches = [0.1, 0.1, 0.2, 0.4] * 2, [32] * 8
    rule = Rule(k=2, wait=False)
    forecasts = [goodput.forecast(rule, times, batches, scale, tolerance=10.0, momentum=0.9)
                 for scale in (0.0, 64.0, 640.0)]
    # tau = tolerance * M / (M + B), M = 64 samples an update.
    assert [f.tolerance for f in forecasts] == pytest.approx([10.0, 5.0, 10.0 / 11])
    assert forecasts[0].staleness_efficiency > forecasts[1].staleness_efficiency \
        > forecasts[2].staleness_efficiency
    # So the rule chosen moves to fresher gradients as the noise scale grows.
    stale = []
    for scale in (50.0, 300.0, 3000.0):
        proposal = _observe(times, noise_scale=scale)
        chosen = proposal[0] if proposal else ksync.BSP().rule(8)
        stale.append(goodput.forecast(chosen, times, batches, scale, 10.0).staleness)
    assert stale == sorted(stale, reverse=True) and stale[0] > stale[-1]


def test_an_update_of_many_gradients_tolerates_less_staleness():
    # 256 equal workers of 32 samples at a noise scale of 500: the M / (M + B) tolerance
    # alone is near its noise-free value for updates of 32-64 gradients and takes
    # K = 32 (each gradient about 7 updates stale); halving it at 25 gradients per
    # update takes larger, fresher updates.
    times, batches = [0.1] * 256, [32] * 256
    loose = goodput.rank(times, batches, 500.0, tolerance=14.0, momentum=0.9)[0]
    assert not loose.rule.wait and loose.rule.k == 32 and loose.staleness > 6
    chosen, _ = _observe(times, noise_scale=500.0)
    assert chosen.wait or chosen.k >= 48
    assert goodput.forecast(chosen, times, batches, 500.0, 14.0).staleness < 5
    # An update of a few gradients keeps most of its tolerance.
    few = goodput.forecast(Rule(k=2, wait=False), [0.1] * 8, [32] * 8, 64.0, 10.0,
                           halving=25.0)
    assert few.tolerance == pytest.approx(5.0 / (1 + 2 / 25))


def test_a_worker_without_a_push_in_the_window_keeps_the_others_batch():
    policy = ksync.Adaptive()
    context = ksync.Context(num_workers=4, rule=Rule(k=2, wait=False))
    observation = ksync.Observation(version=20, iteration_times=(0.1, 0.1, 0.1, 0.1),
                                    live_workers=(0, 1, 2, 3), noise_scale=300.0,
                                    batch_sizes=(32.0, 32.0, 32.0, None))
    same = dataclasses.replace(observation, batch_sizes=(32.0,) * 4)
    assert [f.goodput for f in policy.forecasts(observation, context)] == \
        pytest.approx([f.goodput for f in policy.forecasts(same, context)])


def test_a_straggler_is_not_waited_for():
    rule, reason = _observe([0.1] * 7 + [1.5], noise_scale=2000.0)
    # Either a round the seven fast workers complete, or no waiting at all.
    assert not rule.wait or rule.k <= 7
    assert "noise scale 2000 (measured" in reason and "runner-up" in reason


def test_hysteresis_keeps_a_rule_that_is_nearly_as_good():
    times = [0.1, 0.1, 0.2, 0.4] * 2
    best, _ = _observe(times, noise_scale=300.0)
    assert _observe(times, noise_scale=300.0, rule=best) is None
    policy = ksync.Adaptive(hysteresis=10.0)   # nothing is ten times better than BSP here
    assert _observe([0.1] * 8, noise_scale=300.0, policy=policy) is None


def test_measured_staleness_below_the_whole_step_prediction_is_read_as_exposure():
    policy = ksync.Adaptive()
    times = [0.1] * 8
    rule = Rule(k=2, wait=False, max_staleness=8)
    observation = ksync.Observation(version=20, iteration_times=tuple(times),
                                    live_workers=tuple(range(8)), staleness_mean=0.35,
                                    noise_scale=100.0)
    context = ksync.Context(num_workers=8, rule=rule)
    assert policy.exposure(observation, context) == pytest.approx(0.1)
    # Before the noise scale is measured (the run's first rounds, whose staleness is
    # below its steady state: every worker's first push is fresh) a whole step.
    startup = dataclasses.replace(observation, noise_scale=None)
    assert policy.exposure(startup, context) == 1.0
    context = ksync.Context(num_workers=8, rule=ksync.BSP().rule(8))
    assert policy.exposure(observation, context) == 1.0   # BSP shows no staleness


def test_adaptive_by_name_and_bad_arguments():
    assert ksync.parse("adaptive:staleness_tolerance=3").staleness_tolerance == 3.0
    assert ksync.parse("adaptive:gradients_halving=40").gradients_halving == 40.0
    for bad in (dict(momentum=1.0), dict(staleness_tolerance=0), dict(noise_scale=-1),
                dict(hysteresis=-0.1), dict(gradients_halving=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ksync.Adaptive(**bad)


# -- the controller and the simulator ----------------------------------------------------

class _Spy(ksync.Policy):
    """BSP that keeps every observation the controller gives it in ``seen``."""

    name = "spy"

    def __init__(self, refresh_every, first_refresh):
        self.refresh_every, self.first_refresh, self.seen = refresh_every, first_refresh, []

    def _rule(self, n):
        return Rule(k=n, wait=True, max_staleness=0)

    def observe(self, observation, context):
        self.seen.append(observation)
        return None


def test_controller_gives_the_policy_the_windowed_noise_scale_and_batches():
    from ksync.controller import MIN_NOISE_ROUNDS, NOISE_MEMORY, NOISE_WINDOW
    spy = _Spy(refresh_every=10, first_refresh=2)
    seen = spy.seen
    controller = RuleController(spy, num_workers=2)
    m = lambda v, sums, pushes, samples: Measurement(  # noqa: E731
        v, live_workers=(0, 1), iteration_times=(0.1, 0.1), worker_pushes=pushes,
        worker_samples=samples, noise_sums=sums, staleness_hist=(sum(pushes),))
    controller.refresh(m(0, (0.0, 0.0), (0, 0), (0, 0)))
    controller.refresh(m(1, (1.0, 100.0), (1, 1), (32, 16)))   # before first_refresh
    assert not seen
    controller.refresh(m(2, (2.0, 300.0), (2, 2), (64, 32)))
    # Two rounds are too few to act on: the policy is told nothing yet.
    assert seen[-1].noise_scale is None
    assert seen[-1].batch_sizes == (32.0, 16.0)
    assert seen[-1].staleness_mean == 0.0
    v = 2 + int(MIN_NOISE_ROUNDS)
    controller.refresh(m(v, (3.0, 600.0), (4, 4), (128, 64)))
    # The earlier rounds fade by NOISE_MEMORY every NOISE_WINDOW rounds.
    fade = NOISE_MEMORY ** ((v - 2) / NOISE_WINDOW)
    assert seen[-1].noise_scale == pytest.approx((fade * 300 + 300) / (fade * 2 + 1))


def test_adaptive_starts_with_the_models_rule_for_equal_workers():
    assert ksync.Adaptive().rule(1) == Rule(k=1, wait=True, max_staleness=0)
    rule = ksync.Adaptive().rule(8)
    assert not rule.wait and 2 <= rule.k < 8 and rule.max_staleness is not None
    # A larger staleness tolerance makes staleness cheaper: K no larger.
    assert ksync.Adaptive(staleness_tolerance=16.0).rule(64).k <= ksync.Adaptive().rule(64).k


def test_before_the_noise_scale_is_measured_a_large_cluster_starts_asynchronous():
    # The assumed noise scale is 16 workers' batches, not a BSP update's samples (8,192
    # here), which sent the first decision to K-sync on 256 workers.
    start = ksync.Adaptive().rule(256)
    assert not start.wait and 32 <= start.k <= 64
    context = ksync.Context(num_workers=256, rule=start)
    times = (0.1,) * 128 + (0.2,) * 64 + (0.4,) * 64   # static: speeds spanning 4x
    observation = ksync.Observation(version=5, iteration_times=times,
                                    live_workers=tuple(range(256)),
                                    batch_sizes=(32.0,) * 256)
    proposal = ksync.Adaptive().observe(observation, context)
    assert proposal is None or not proposal[0].wait


def test_the_simulator_measures_the_noise_scale_that_adaptive_observes():
    from cluster_sim.sim.engine import SimConfig, Simulation
    seen = []

    class Seen(ksync.Adaptive):
        def observe(self, observation, context):
            seen.append(observation.noise_scale)
            return super().observe(observation, context)

    sim = Simulation(Seen(refresh_every=10),
                     SimConfig(num_workers=4, max_pushes=600, eval_every=100,
                               stop_at_target=False))
    result = sim.run()
    assert result["applied"] + result["dropped"] + result["pending"] == result["pushed"]
    signal, trace = sim.noise_sums
    assert signal > 0 and trace > 0
    # Measured once the sums cover MIN_NOISE_ROUNDS rounds (~60 updates), then always.
    measured = [b for b in seen if b is not None]
    assert measured and all(b > 0 for b in measured)
    assert seen.index(measured[0]) + len(measured) == len(seen) and seen[-1] is not None


def test_standing_reads_bench_results_and_places_the_rule(tmp_path):
    import json
    from cluster_sim.report import standing

    def results(per_seed, oracle):
        # As `bench policies` writes them: per-seed runs, and a table whose "tta" is
        # each arm's (median, low, high), which must not be read as three seeds.
        return json.dumps({
            "policies": [{"policy": arm, "per_seed": [{"seed": s, "tta_s": t}
                                                      for s, t in enumerate(times)]}
                         for arm, times in per_seed.items()],
            "bench": {"rows": [{"arm": arm, "tta": [99.0, 1.0, 999.0]} for arm in per_seed]
                      + [{"arm": "KAsync oracle-tuned = KAsync(k=4)", "tta": [1.0, 1.0, 1.0]}],
                      "oracle": oracle}})

    per_seed = {"BSP": [10.0, 11.0, 12.0], "KAsync(k=2)": [5.0, 6.0, None],
                "KAsync(k=4)": [4.0, 5.0, 4.5], "Adaptive": [2.0, 5.5, 4.4],
                "BSP+alloc(last)": [8.0, 9.0, 10.0]}   # LB-BSP: no grid, but a "("
    for name in ("static_sim8", "trace_sim8"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(
            results(per_seed, {"kasync": "KAsync(k=4)"}))
    result = standing.standing(*standing.load([tmp_path]), "Adaptive")
    entry = result["scenarios"]["static_sim8"]
    # Paired by seed: ratios 0.5, 1.1 and 0.978, median 0.978 (the ratio of the
    # medians would be 4.4 / 4.5 too, but not the interval).
    assert entry["best"] == "KAsync(k=4)" and entry["vs_best"][0] == pytest.approx(4.4 / 4.5)
    assert entry["vs_best"][1] == pytest.approx(0.5) and entry["vs_best"][2] == pytest.approx(1.1)
    assert entry["vs_best"][3] == 3
    assert result["geomean"]["Adaptive"] == pytest.approx(4.4)
    assert "KAsync(k=2)" not in result["geomean"]        # an untuned grid value
    assert result["geomean"]["kasync (tuned)"] == pytest.approx(4.5)
    assert result["geomean"]["BSP+alloc(last)"] == pytest.approx(9.0)
    text = standing.format_standing(result, "Adaptive")
    assert "| static_sim8 | KAsync(k=4) |" in text
    # A later directory's re-run of one arm replaces that arm only.
    (tmp_path / "rerun" / "static_sim8").mkdir(parents=True)
    (tmp_path / "rerun" / "static_sim8" / "results.json").write_text(
        results({"Adaptive": [2.0, 2.0, 2.0]}, {}))
    rows, oracle = standing.load([tmp_path, tmp_path / "rerun"])
    assert rows["static_sim8"]["Adaptive"] == {0: 2.0, 1: 2.0, 2: 2.0}
    assert rows["static_sim8"]["BSP"] == {0: 10.0, 1: 11.0, 2: 12.0}
    assert oracle["static_sim8"] == {"kasync": "KAsync(k=4)"}
    with pytest.raises(ValueError, match="no arm 'Nope'.*Adaptive"):
        standing.standing(rows, oracle, "Nope")
    # --versus: the rule against another arm, paired by seed (8/10, 9/11, 10/12).
    paired = standing.standing(*standing.load([tmp_path]), "BSP+alloc(last)", "BSP")
    assert paired["scenarios"]["trace_sim8"]["vs_other"][:3] == pytest.approx((9 / 11, 0.8, 10 / 12))
    assert "BSP+alloc(last) / BSP, paired [range] |" in standing.format_standing(
        paired, "BSP+alloc(last)", "BSP")
    with pytest.raises(ValueError, match="no arm 'Nope' in these results; --versus takes one of"):
        standing.standing(rows, oracle, "Adaptive", "Nope")
    with pytest.raises(ValueError, match="no bench results.json"):
        standing.load([tmp_path / "static_sim8"])


def test_a_window_without_pushes_gives_the_policy_each_workers_run_batch():
    # A stall-forced refresh right after another sees no push in its window: the
    # batches must stay in samples (a batch of 1 against a noise scale in samples would
    # make every asynchronous rule look worthless).
    spy = _Spy(refresh_every=1, first_refresh=0)
    controller = RuleController(spy, num_workers=2)
    m = lambda v, pushes, samples: Measurement(  # noqa: E731
        v, live_workers=(0, 1), iteration_times=(0.1, 0.1), worker_pushes=pushes,
        worker_samples=samples, staleness_hist=(sum(pushes),))
    controller.refresh(m(0, (0, 0), (0, 0)))
    controller.refresh(m(4, (4, 4), (128, 64)))
    controller.refresh(m(5, (4, 4), (128, 64)))
    assert spy.seen and spy.seen[-1].batch_sizes == (32.0, 16.0)


# -- the loss stall: larger updates once the loss stops falling ---------------------------

def _run_losses(policy, losses, n=8, every=20, times=None, scaling=None):
    """Feed ``losses`` (one per observation, None: no report) through a controller on
    ``n`` equal workers with a fixed noise scale, the run's learning rate scaled by
    ``scaling``; the controller after the last one."""
    times = times or (0.1,) * n
    controller = ksync.RuleController(policy, n, lr_scaling=scaling, base_batch=32.0)
    controller.refresh(ksync.Measurement(0, live_workers=tuple(range(n))))
    for i, loss in enumerate(losses, start=1):
        observation = ksync.Observation(version=i * every, iteration_times=times,
                                        live_workers=tuple(range(n)), noise_scale=200.0,
                                        batch_sizes=(32.0,) * n, loss=loss)
        proposal = policy.observe(observation, controller.context())
        if proposal is not None:
            controller.policy_rule = proposal[0]
            controller._record(observation.version, *proposal)
    return controller


def _samples(rule, n=8):
    from ksync import goodput
    return goodput.forecast(rule, [0.1] * n, [32.0] * n, 200.0, 14.0).samples_per_update


def test_a_stalled_loss_moves_the_rule_to_larger_updates_for_good():
    falling = [2.0 * 0.97 ** i for i in range(30)]          # 3 % a report: progress
    flat = [falling[-1] * (1 + 0.002 * (-1) ** i) for i in range(30)]   # noise only
    steady = _run_losses(ksync.Adaptive(), falling)
    first = steady.policy_rule
    assert steady.context().memory.get("floor", 0.0) == 0.0
    stalled = _run_losses(ksync.Adaptive(), falling + flat)
    floor = stalled.context().memory["floor"]
    # The floor is an update size that stalled (at least the one before the stall);
    # the rule's updates grow past it.
    assert floor >= _samples(first)
    assert _samples(stalled.policy_rule) > floor > 0
    later = [rule for version, rule, _ in stalled.history if version > 30 * 20]
    assert later and _samples(later[-1]) > _samples(first)
    assert "stalled" in stalled.history[-1][2] and "stalled" in stalled.explain()
    # Progress again does not bring the smaller updates back.
    again = _run_losses(ksync.Adaptive(), falling + flat + [flat[-1] * 0.9 ** i
                                                            for i in range(1, 20)])
    sizes = [_samples(rule) for version, rule, _ in again.history if version > 30 * 20]
    assert sizes and sizes == sorted(sizes)
    assert _samples(again.policy_rule) > again.context().memory["floor"] >= floor


def test_no_loss_a_repeated_loss_or_stall_updates_none_leave_the_rule_to_the_model():
    flat = [1.0] + [1.0 + 0.001 * (-1) ** i for i in range(60)]
    unchanged = _run_losses(ksync.Adaptive(stall_updates=None), flat)
    no_loss = _run_losses(ksync.Adaptive(), [None] * 61)
    # An epoch-level loss repeated between reports is one report, not a stall.
    repeated = _run_losses(ksync.Adaptive(), [1.0] * 61)
    for controller in (unchanged, no_loss, repeated):
        assert "floor" not in controller.context().memory
        assert [r for _, r, _ in controller.history] == [
            r for _, r, _ in _run_losses(ksync.Adaptive(stall_updates=None),
                                         [None] * 61).history]
    with pytest.raises(ValueError, match="stall_updates"):
        ksync.Adaptive(stall_updates=0)
    with pytest.raises(ValueError, match="stall_margin"):
        ksync.Adaptive(stall_margin=1.5)


def test_the_stall_floor_survives_a_checkpoint():
    import json
    falling = [2.0 * 0.97 ** i for i in range(30)]
    controller = _run_losses(ksync.Adaptive(), falling + [falling[-1]] * 2 + [
        falling[-1] * (1 + 0.002 * (-1) ** i) for i in range(30)])
    state = json.loads(json.dumps(controller.get_state()))
    restored = ksync.RuleController(ksync.Adaptive(), 8)
    restored.set_state(state)
    assert restored.context().memory == controller.context().memory
    assert restored.context().memory["floor"] > 0
    del state["policy_memory"]                 # a checkpoint from before it
    older = ksync.RuleController(ksync.Adaptive(), 8)
    older.set_state(state)
    assert older.context().memory == {}


# -- the step the loss moves (``loss_step``): the rule's learning-rate gain factor --------

def test_a_rising_or_non_finite_loss_halves_the_step_once_per_rise():
    import math
    from ksync.policies import adaptive
    falling = [2.0 * 0.97 ** i for i in range(10)]
    # The smoothed loss climbs 10 % over its lowest within a few reports of a 30 % jump
    # (each report a new value: a repeated one is the same report).
    risen = falling + [falling[-1] * 1.3 * (1 + 0.001 * i) for i in range(6)]
    controller = _run_losses(ksync.Adaptive(loss_step=True), risen, scaling="power")
    assert controller.policy_rule.lr_factor == adaptive.STEP_BACKOFF
    assert "rose" in controller.history[-1][2]
    # Two non-finite reports in a row: one halving, not two.
    nan = _run_losses(ksync.Adaptive(loss_step=True), falling + [math.nan] * 2,
                      scaling="power")
    assert nan.policy_rule.lr_factor == adaptive.STEP_BACKOFF
    assert "not finite" in nan.history[-1][2]
    # The same losses move nothing without the option or without a scaling to scale.
    for controller in (_run_losses(ksync.Adaptive(loss_step=False), risen, scaling="power"),
                       _run_losses(ksync.Adaptive(), risen)):
        assert all(rule.lr_factor == 1.0 for _, rule, _ in controller.history)
    with pytest.raises(ValueError, match="loss_step must be True"):
        ksync.Adaptive(loss_step="yes")


def test_a_stall_at_the_largest_update_halves_the_step_once_per_new_best_to_its_floor():
    from ksync.policies import adaptive
    falling = [2.0 * 0.97 ** i for i in range(30)]
    flat = [falling[-1] * (1 + 0.002 * (-1) ** i) for i in range(120)]
    stalled = _run_losses(ksync.Adaptive(loss_step=True), falling + flat, scaling="power")
    rule = stalled.policy_rule
    assert rule.wait and rule.k == 8                 # the floor moved it to BSP
    # One decay: the stalls after it saw no new best loss (a step too small, not a floor).
    assert rule.lr_factor == adaptive.STALL_DECAY
    assert "stalled with no larger update left" in stalled.history[-1][2]
    # A staircase (a new best, then a stall, again and again) decays to the floor only.
    stairs = falling[:]
    for _ in range(8):
        stairs += [stairs[-1] * 0.95] + [stairs[-1] * 0.95 * (1 + 0.002 * (-1) ** i)
                                         for i in range(40)]
    floored = _run_losses(ksync.Adaptive(loss_step=True), stairs, scaling="power")
    assert floored.policy_rule.lr_factor == adaptive.MIN_STALL_FACTOR
    factors = [rule.lr_factor for _, rule, _ in floored.history]
    assert factors == sorted(factors, reverse=True)  # never raised


def test_the_step_factor_survives_a_checkpoint_and_older_ones_restore():
    import json
    controller = _run_losses(ksync.Adaptive(loss_step=True),
                             [2.0 * 0.97 ** i for i in range(10)]
                             + [2.0 + 0.001 * i for i in range(6)], scaling="power")
    assert controller.policy_rule.lr_factor < 1.0
    state = json.loads(json.dumps(controller.get_state()))
    restored = ksync.RuleController(ksync.Adaptive(loss_step=True), 8, lr_scaling="power")
    restored.set_state(state)
    assert restored.policy_rule == controller.policy_rule
    for key in ("rule", "policy_rule"):          # a checkpoint from before the factor
        del state[key]["lr_factor"]
    older = ksync.RuleController(ksync.Adaptive(loss_step=True), 8, lr_scaling="power")
    older.set_state(state)
    assert older.policy_rule.lr_factor == 1.0
    # A checkpoint names its policy by repr: with the option on (the default) it reads
    # as before the option existed.
    assert "loss_step" not in repr(ksync.Adaptive())
    assert "loss_step=False" in repr(ksync.Adaptive(loss_step=False))
