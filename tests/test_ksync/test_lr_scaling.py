"""Learning-rate scaling at the commit (`ksync.lr_scaling`): the gain against a known
gradient distribution, the fixed rules, the warm-up, the reference state's commits, the
goodput model under scaling and the simulator's commits (no cluster, a few seconds)."""

import math

import numpy as np
import pytest

import ksync
from ksync import goodput, lr_scaling, noise
from ksync.lr_scaling import LRScaling
from ksync.rule import Rule
from cluster_sim.numpy_mlp import MLP
from cluster_sim.sim.engine import SimConfig, Simulation
from cluster_sim.workloads import digits


@pytest.fixture(scope="module")
def data():
    return digits(seed=0)


def _gradients(rng, mean, trace, batch, count):
    """``count`` gradients of ``batch`` samples: ``mean`` plus noise of per-sample
    covariance trace ``trace`` (isotropic)."""
    dim = len(mean)
    return mean + rng.normal(0.0, math.sqrt(trace / dim / batch), (count, dim))


def test_adascale_gain_from_the_ps_estimates_matches_a_known_distribution():
    """|G|^2 = 1, tr(S) = 320 per sample, base batch 32: rounds of 4 gradients measured
    as the PS measures them give AdaScale's r = E|g_b0|^2 / E|g_M|^2 for an update of
    M = 256 samples, (10 + 1) / (1.25 + 1) = 4.89."""
    rng = np.random.default_rng(3)
    mean = np.zeros(16)
    mean[0] = 1.0
    scaling = LRScaling("adascale", base_batch=32)
    for _ in range(400):
        grads = _gradients(rng, mean, 320.0, 32, 4)
        round_ = noise.RoundNoise()
        for g in grads:
            round_.add(float(g @ g), 32)
        agg = grads.mean(axis=0)
        scaling.observe(*round_.estimate(float(agg @ agg)))
    expected = (320.0 / 32 + 1.0) / (320.0 / 256 + 1.0)
    # AdaScale's definition, measured directly: the ratio of squared norms.
    base = _gradients(rng, mean, 320.0, 32, 20000)
    large = _gradients(rng, mean, 320.0, 256, 20000)
    direct = np.mean(np.sum(base ** 2, 1)) / np.mean(np.sum(large ** 2, 1))
    assert direct == pytest.approx(expected, rel=0.02)
    # The faded window holds ~90 rounds of 4 gradients: a few percent of noise.
    assert scaling.warmup() == 1.0
    assert scaling.gain(256 / 32) == pytest.approx(expected, rel=0.1)
    assert 1.0 <= scaling.gain(256 / 32) <= 8.0


def test_the_fixed_rules_and_the_floor_of_one_base_step():
    assert lr_scaling.gain("linear", 8.0) == 8.0
    assert lr_scaling.gain("sqrt", 9.0) == 3.0
    assert lr_scaling.gain(None, 8.0) == 1.0
    # An update of less than a base batch (few or stale samples) keeps the base step.
    for mode in ("linear", "sqrt", "adascale"):
        assert lr_scaling.gain(mode, 0.25, noise_scale=1000.0, base_batch=32) == 1.0
    # AdaScale's limits: all noise -> linear, no noise -> 1; always in [1, S].
    assert lr_scaling.gain("adascale", 8.0, math.inf, 32) == 8.0
    assert lr_scaling.gain("adascale", 8.0, 0.0, 32) == 1.0
    for b in (1.0, 32.0, 320.0, 1e5):
        assert 1.0 <= lr_scaling.gain("adascale", 8.0, b, 32) <= 8.0
    # Linear and sqrt need no measurement and have no warm-up.
    assert LRScaling("linear", 32).commit(4.0) == 4.0
    assert LRScaling("sqrt", 32).commit(4.0) == 2.0
    with pytest.raises(ValueError, match="lr_scaling must be one of"):
        LRScaling("cubic", 32)
    with pytest.raises(ValueError, match="base_batch"):
        LRScaling("linear", 0)


def test_adascale_ramps_from_one_while_few_rounds_are_measured():
    scaling = LRScaling("adascale", base_batch=32)
    full = lr_scaling.gain("adascale", 8.0, 320.0, 32)
    assert scaling.commit(8.0) == 1.0  # nothing measured
    gains = []
    for _ in range(120):
        scaling.observe(signal=1.0, trace=320.0)
        gains.append(scaling.gain(8.0))
    assert np.all(np.diff(gains) >= -1e-12) and gains[0] > 1.0
    # Halfway through the warm-up's (faded) rounds, about halfway to the full gain.
    half = next(i for i, _ in enumerate(gains) if scaling_rounds(i + 1) >= 25)
    assert gains[half] == pytest.approx(1 + 0.5 * (full - 1), rel=0.03)
    assert gains[-1] == pytest.approx(full)
    # A round that cannot tell (one gradient) is not counted.
    before = scaling.get_state()
    scaling.observe(0.0, 0.0)
    assert scaling.get_state() == before


def scaling_rounds(n):
    """The faded count of ``n`` measured rounds."""
    return sum(noise.NOISE_MEMORY ** (i / noise.NOISE_WINDOW) for i in range(n))


def test_progress_counts_the_applied_gains_and_the_state_survives_a_checkpoint():
    scaling = LRScaling("adascale", base_batch=32)
    for _ in range(100):
        scaling.observe(1.0, 640.0)
    gains = [scaling.commit(s) for s in (1.0, 4.0, 16.0)]
    assert gains[0] == 1.0 and gains[0] < gains[1] < gains[2] <= 16.0
    assert scaling.progress == pytest.approx(sum(gains)) and scaling.commits == 3
    other = LRScaling("adascale", base_batch=32)
    other.set_state(scaling.get_state())
    assert other.gain(8.0) == scaling.gain(8.0) and other.progress == scaling.progress


def test_the_reference_state_commits_with_lr_times_the_gain():
    scaling = LRScaling("adascale", base_batch=32, max_lr=0.1)
    for _ in range(200):
        scaling.observe(1.0, 320.0)
    state = ksync.UpdateState(4, Rule(k=4, wait=True, max_staleness=0), scaling)
    results = [state.push(worker=w, version_read=0, samples=32) for w in range(4)]
    assert [r.gain for r in results[:3]] == [1.0] * 3 and results[3].committed
    expected = lr_scaling.gain("adascale", 4.0, 320.0, 32)
    assert results[3].gain == pytest.approx(expected) and expected > 2
    assert state.learning_rate(0.02, results[3]) == pytest.approx(0.02 * expected)
    assert state.learning_rate(0.05, results[3]) == 0.1  # capped at max_lr
    # K-async: stale gradients count 1 / (1 + s) of their samples. Two fresh 32s and two
    # 64s three updates stale: S = (32 + 32 + 16 + 16) / 32 = 3.
    state.set_rule(Rule(k=4, wait=False))
    for w, (read, samples) in enumerate([(1, 32), (1, 32), (-2, 64), (-2, 64)]):
        result = state.push(worker=w, version_read=read, samples=samples)
    assert result.committed and result.gain == pytest.approx(scaling.gain(3.0))
    # A round committed after K was lowered gets its gain too.
    state.set_rule(Rule(k=3, wait=True, max_staleness=0))
    for w in range(2):
        state.push(worker=w, version_read=state.version, samples=32)
    state.set_rule(Rule(k=2, wait=True, max_staleness=0))
    assert state.commit_complete_round()
    assert state.last_gain == pytest.approx(scaling.gain(2.0)) and scaling.commits == 3
    state.check_invariants()
    # No scaling: gain 1, the rate as given.
    plain = ksync.UpdateState(2, Rule(k=2, wait=True, max_staleness=0))
    plain.push(0, 0, 32)
    assert plain.push(1, 0, 32).gain == 1.0 and plain.learning_rate(0.02) == 0.02


def test_a_run_scales_as_its_policy_says_unless_told():
    assert lr_scaling.resolve("auto", ksync.Adaptive()) == "power"
    assert lr_scaling.resolve("auto", ksync.KAsync(k=2)) is None
    assert lr_scaling.resolve(None, ksync.Adaptive()) is None
    # "auto" by default, as on the strategy's PS: the policy's own.
    config = SimConfig(num_workers=2, max_pushes=4)
    assert Simulation(ksync.Adaptive(), config).scaling.mode == "power"
    assert Simulation(ksync.BSP(), config).scaling is None
    on = SimConfig(num_workers=2, max_pushes=4, lr_scaling="adascale")
    assert Simulation(ksync.Adaptive(), on).scaling.mode == "adascale"
    sim = Simulation(ksync.BSP(), SimConfig(num_workers=2, max_pushes=4, lr_scaling="sqrt"))
    assert sim.scaling.mode == "sqrt" and sim.controller.context().lr_scaling == "sqrt"
    with pytest.raises(ValueError, match="lr_scaling must be one of"):
        SimConfig(num_workers=2, max_pushes=4, lr_scaling="adam").check()


@pytest.mark.parametrize("allocated", [False, True])
def test_linear_bsp_in_the_simulator_is_sgd_on_the_concatenated_batch_at_the_scaled_rate(
        data, allocated):
    """BSP with ``lr_scaling="linear"``: every update is one SGD-with-momentum step on
    the round's samples at ``lr * M / b0`` (float64 model, so exact to 1e-6); with the
    allocator's unequal batches too."""
    import predictor
    kwargs = {}
    if allocated:
        kwargs = dict(batch_allocation=predictor.BatchAllocator(
            global_batch=96, min_batch=8, hysteresis=0.0))
    config = SimConfig(num_workers=4, max_pushes=48, eval_every=20, stop_at_target=False,
                       speeds=(1.0, 1.0, 0.5, 0.25), batch_size=32, learning_rate=0.05,
                       lr_scaling="linear", allocate_every=2)
    sim = Simulation(ksync.BSP(), config, data, record_batches=True, **kwargs)
    sim.model = MLP(data.num_features, data.num_classes, config.hidden, seed=config.seed,
                    dtype=np.float64)
    sim.grads = np.zeros_like(sim.grads, dtype=np.float64)
    sim.run()
    assert sim.state.version == 12 and sim.state.dropped == 0
    if allocated:
        assert len({len(rows) for _, _, rows, _ in sim.batches}) > 1
    reference = MLP(data.num_features, data.num_classes, config.hidden, seed=config.seed,
                    dtype=np.float64)
    for version in range(sim.state.version):
        rows = np.concatenate([r for v, _, r, _ in sim.batches if v == version])
        x, y = data.x_train[rows][None], data.y_train[rows][None]
        g = reference.gradients(reference.params, x, y, np.full((1, len(rows)), 1 / len(rows)))
        lr = config.learning_rate * len(rows) / config.batch_size
        assert sim.lr_over_time[version][2] == pytest.approx(lr, rel=1e-12)
        reference.apply(g[0], lr, config.momentum)
    np.testing.assert_allclose(sim.model.params, reference.params, rtol=1e-6, atol=1e-6)
    assert sim.scaling.progress == pytest.approx(sum(g for _, g, _ in sim.lr_over_time))


def test_adascale_in_the_simulator_warms_up_and_stays_within_one_and_s(data):
    config = SimConfig(num_workers=8, max_pushes=8 * 120, eval_every=80,
                       stop_at_target=False, speeds=(1.0,), learning_rate=0.02)
    sim = Simulation(ksync.BSP(), config, data)
    sim.scaling = sim.state.scaling = LRScaling("adascale", config.batch_size)
    sim.run()
    gains = np.array([g for _, g, _ in sim.lr_over_time])
    assert gains[0] == 1.0 and np.all((gains >= 1.0) & (gains <= 8.0))
    assert gains[-1] > 2.0, "a BSP round of 8 batches should gain from the measured noise"
    assert gains[-1] == pytest.approx(sim.scaling.gain(8.0), rel=0.05)  # one round more
    lrs = [lr for _, _, lr in sim.lr_over_time]
    assert lrs == pytest.approx(list(0.02 * gains))
    assert sim.curve[-1]["lr_gain"] == gains[-1] and "progress" in sim.curve[-1]


def test_the_goodput_model_counts_an_update_by_its_gain_in_base_steps():
    times, batches = [0.1] * 64, [32] * 64
    bsp = Rule(k=64, wait=True, max_staleness=0)
    for mode in ("adascale", "linear", "sqrt"):
        f = goodput.forecast(bsp, times, batches, 640.0, tolerance=14.0, momentum=0.9,
                             scaling=mode, base_batch=32)
        r = lr_scaling.gain(mode, 64.0, 640.0, 32)
        ada = lr_scaling.adascale_gain(64.0, 640.0, 32)
        assert f.gain == pytest.approx(r)
        assert f.batch_efficiency == pytest.approx(min(r, ada))  # no more than the noise allows
        assert f.goodput == pytest.approx(10.0 * min(r, ada))
    # The unscaled model is the one fitted before: batch efficiency at B' = B (1-mu)/(1+mu).
    f = goodput.forecast(bsp, times, batches, 640.0, tolerance=14.0, momentum=0.9)
    assert f.gain == 1.0 and f.batch_efficiency == pytest.approx(
        goodput.batch_efficiency(2048, goodput.per_update(640.0, 0.9)))
    # K-async: stale gradients count 1 / (1 + s), and a larger step tolerates less.
    kasync = Rule(k=16, wait=False, max_staleness=8)
    plain = goodput.forecast(kasync, times, batches, 640.0, tolerance=14.0, momentum=0.9)
    scaled = goodput.forecast(kasync, times, batches, 640.0, tolerance=14.0, momentum=0.9,
                              scaling="adascale", base_batch=32)
    assert plain.staleness == pytest.approx(63 / 16)  # (64 workers - 1) / K
    assert scaled.gain == pytest.approx(
        lr_scaling.gain("adascale", 16 / (1 + 63 / 16), 640.0, 32))
    assert scaled.tolerance == pytest.approx(plain.tolerance / scaled.gain)
    # With the step scaled, on equal workers and much noise, waiting for all pays.
    ranked = goodput.rank(times, batches, 640.0, tolerance=14.0, momentum=0.9,
                          halving=25.0, scaling="adascale", base_batch=32)
    assert ranked[0].rule == bsp


def test_adaptive_models_the_scaling_its_run_applies_once_the_noise_is_measured():
    policy = ksync.Adaptive()
    observation = ksync.Observation(version=100, iteration_times=(0.1,) * 16,
                                    live_workers=tuple(range(16)), noise_scale=640.0,
                                    batch_sizes=(32,) * 16)
    scaled = ksync.Context(num_workers=16, rule=policy.rule(16), lr_scaling="adascale",
                           base_batch=32.0)
    plain = ksync.Context(num_workers=16, rule=policy.rule(16))
    best = policy.forecasts(observation, scaled)[0]
    assert best.gain > 1.0 and best.rule.wait
    assert policy.forecasts(observation, plain)[0].gain == 1.0
    assert "lr scaling adascale" in policy.observe(observation, scaled)[1]
    # Before the noise scale is measured the PS's gain is still 1: the unscaled model.
    unmeasured = ksync.Observation(version=5, iteration_times=(0.1,) * 16,
                                   live_workers=tuple(range(16)), batch_sizes=(32,) * 16)
    assert all(f.gain == 1.0 for f in policy.forecasts(unmeasured, scaled))


def test_the_arms_run_adaptive_at_its_default_gain_and_its_ablations(data):
    """``adaptive`` in the benchmark is the product's default (the power gain with the
    loss's factor), ``adaptive+power`` the gain without the factor,
    ``adaptive+adascale`` AdaScale's gain, ``adaptive+unscaled`` the rate as given."""
    from cluster_sim.cli.bench_matrix import simulate_arm
    from cluster_sim.harness.arms import CONTENDERS
    from cluster_sim.harness.config import RunConfig
    config = SimConfig(num_workers=8, max_pushes=8 * 120, eval_every=80,
                       stop_at_target=False, speeds=(1.0,), learning_rate=0.02)
    runs = {name: simulate_arm(CONTENDERS[name].arm(), config, data, RunConfig())
            for name in ("adaptive", "adaptive+power", "adaptive+adascale", "adaptive+unscaled")}
    assert [r["policy"] for r in runs.values()] == [
        "Adaptive", "Adaptive+power", "Adaptive+AdaScale", "Adaptive unscaled"]
    # Progress in base steps is counted only where the PS scales.
    for name in ("adaptive", "adaptive+power", "adaptive+adascale"):
        assert runs[name]["curve"][-1]["progress"] > 0 and "lr_gain" in runs[name]["curve"][-1]
    assert all("lr_gain" not in point for point in runs["adaptive+unscaled"]["curve"])
    # The default and the gain alone are the same run until the loss moves the factor.
    assert runs["adaptive"]["curve"][:2] == runs["adaptive+power"]["curve"][:2]


# -- "power": the measured scaling law, fresh samples only, and its goodput model --------
def test_power_steps_at_s_to_the_two_thirds_and_gives_stale_gradients_no_gain():
    # The best rates tuned for BSP on 8 and 64 workers from base 0.02: 0.08 and 0.32.
    assert 0.02 * lr_scaling.gain("power", 8.0) == pytest.approx(0.08)
    assert 0.02 * lr_scaling.gain("power", 64.0) == pytest.approx(0.32)
    assert lr_scaling.gain("power", 0.5) == 1.0   # never below the base step
    assert LRScaling("power", 32).commit(8.0) == pytest.approx(4.0)   # no warm-up
    # In the reference state a round's gain counts its fresh gradients' samples only:
    # K=3 async, three fresh gradients of 32 -> S = 3; then three read before that
    # commit (staleness 1) -> S = 0, the floor of 1; then one stale and two fresh -> 2.
    stale = ksync.UpdateState(3, Rule(k=3, wait=False), LRScaling("power", 32))
    for _ in range(3):
        stale.push(0, 0, 32.0)  # version 0, 0, 0: fresh, fresh, fresh
    assert stale.last_gain == pytest.approx(3.0 ** (2 / 3))
    results = [stale.push(w, 0, 32.0) for w in range(3)]  # all read version 0, now 1
    assert results[-1].committed and results[-1].gain == 1.0
    results = [stale.push(0, 1, 32.0), stale.push(1, 2, 32.0), stale.push(2, 2, 32.0)]
    assert results[-1].committed and results[-1].gain == pytest.approx(2.0 ** (2 / 3))


def test_power_worth_is_the_loss_a_quadratic_step_removes_against_the_base_step():
    """On a quadratic ``h w^2 / 2`` whose best step is ``r`` times the base step ``1 /
    (h r)``, the best step removes ``r^2 / (2 r - 1)`` times the loss the base one does
    (`ksync.goodput.power_worth` with exponent 1)."""
    h, w0 = 3.0, 2.0
    g = h * w0

    def removed(step):
        w = w0 - step * g
        return h * w0 ** 2 / 2 - h * w ** 2 / 2

    for r in (1.0, 2.0, 4.0, 16.0):
        base = 1.0 / (h * r)
        assert removed(r * base) / removed(base) == pytest.approx(
            goodput.power_worth(r, exponent=1.0))
    assert goodput.power_worth(0.5) == 1.0
    with pytest.raises(ValueError, match="PowerModel"):
        goodput.PowerModel(tolerance=0.0)


def test_the_power_model_charges_a_waiting_round_its_gate_and_gives_async_fresh_gains():
    times, batches = [0.1] * 64, [32] * 64
    power = goodput.PowerModel(tolerance=6.0, overhead_s=0.02, exponent=0.8)
    bsp = goodput.forecast(Rule(k=64, wait=True, max_staleness=0), times, batches, 640.0,
                           tolerance=14.0, momentum=0.9, scaling="power", base_batch=32,
                           power=power)
    assert bsp.updates_per_s == pytest.approx(1 / 0.12)
    assert bsp.gain == pytest.approx(16.0)
    assert bsp.batch_efficiency == pytest.approx(
        goodput.batch_efficiency(2048, goodput.per_update(640.0, 0.9))
        * goodput.power_worth(16.0, 0.8))
    # K-async on 64 equal workers: every gradient about 63 / 16 updates stale, none
    # fresh, so no gain, and the one tolerance of the model.
    kasync = goodput.forecast(Rule(k=16, wait=False, max_staleness=8), times, batches,
                              640.0, tolerance=14.0, momentum=0.9, scaling="power",
                              base_batch=32, power=power)
    assert kasync.gain == 1.0 and kasync.tolerance == 6.0
    # On 64 equal workers with the step scaled, waiting for all pays; on 8 workers of
    # which two are 3.4x slower an asynchronous rule does (the simulated race's verdict
    # at the rates tuned for each, which the model was fitted to).
    ranked = goodput.rank(times, batches, 640.0, tolerance=14.0, momentum=0.9,
                          halving=25.0, scaling="power", base_batch=32, power=power)
    assert ranked[0].rule.wait and ranked[0].rule.k == 64
    static8 = [0.127, 0.127, 0.23, 0.436, 0.127, 0.128, 0.229, 0.434]
    ranked = goodput.rank(static8, [32] * 8, 300.0, tolerance=14.0, exposure=0.9,
                          momentum=0.9, halving=25.0, scaling="power", base_batch=32,
                          power=power)
    assert not ranked[0].rule.wait


def test_adaptive_takes_the_power_models_constants_and_refuses_bad_ones():
    policy = ksync.Adaptive(power_tolerance=5.0, round_overhead_s=0.0)
    assert policy.power == goodput.PowerModel(5.0, 0.0)
    assert ksync.Adaptive(**policy.get_config()).power == policy.power
    with pytest.raises(ValueError, match="power_tolerance"):
        ksync.Adaptive(power_tolerance=-1.0)


def test_the_rules_gain_factor_multiplies_the_commits_gain():
    """`ksync.Rule.lr_factor`: the commit's gain times the factor (below 1 too), counted in
    progress; a bad factor is refused with what it must be."""
    state = ksync.UpdateState(2, Rule(k=2, wait=True, max_staleness=0, lr_factor=0.25),
                              LRScaling("linear", 32))
    state.push(worker=0, version_read=0, samples=32)
    result = state.push(worker=1, version_read=0, samples=32)
    assert result.gain == 0.5 and state.learning_rate(0.02, result) == 0.01
    assert state.scaling.progress == 0.5
    assert "lr gain x 0.25" in state.rule.describe()
    assert "lr gain" not in Rule(k=2, wait=True).describe()
    for bad in (0.0, -1.0, math.nan, math.inf, True, "0.5"):
        with pytest.raises(ValueError, match="lr_factor must be a finite number > 0"):
            Rule(k=2, wait=True, lr_factor=bad)
