"""The TF parameter server's learning-rate scaling (`strategies.ps_lr_scaling` inside
`strategies.ps_state.PSUpdateState`) against the pure reference (`ksync.lr_scaling.LRScaling`
in `ksync.UpdateState`), push by push, in this process (no cluster; a few seconds)."""

import dataclasses
import random

import numpy as np
import pytest
import tensorflow as tf

import ksync
from ksync.lr_scaling import LRScaling
from strategies.ps_lr_scaling import commit_gain
from strategies.ps_state import PSUpdateState

DEVICE = "/device:CPU:0"
LR = 0.1


def _scaled_sgd(v, g):
    """Plain SGD at ``LR`` times the gain of the commit being traced, as the strategy's
    optimizer hook scales an optimizer's learning rate."""
    gain = commit_gain()
    lr = LR if gain is None else LR * tf.cast(gain, g.dtype)
    return v.assign_sub(lr * g)


def _pusher(state, var, direct=False):
    @tf.function
    def push(grad, version_read, samples, worker):
        return state.push([(_scaled_sgd, var, grad)], version_read, samples,
                          tf.constant(0.01, tf.float64), worker, direct=direct)
    return push


@pytest.mark.parametrize("mode, policy, base_batch, factors", [
    ("adascale", ksync.KSync(k=3), 16.0, ()),
    ("adascale", ksync.KAsync(k=2), None, ()),   # the base batch from the first push
    ("linear", ksync.KAsync(k=3), 16.0, ()),
    ("sqrt", ksync.SSP(max_staleness=2, stale_action="downweight"), 16.0, ()),
    ("linear", ksync.ASP(), 16.0, ()),            # K = 1, the direct path (locked)
    ("power", ksync.KSync(k=3), 16.0, ()),
    ("power", ksync.KAsync(k=3), None, ()),       # stale gradients count no samples
    # the rule's gain factor (`ksync.Rule.lr_factor`), changed every 15 pushes
    ("power", ksync.KSync(k=3), 16.0, (0.5, 1.0, 0.125, 1.7)),
    ("adascale", ksync.KAsync(k=2), 16.0, (1.0, 0.3)),
], ids=lambda x: repr(x) if not isinstance(x, float) else f"b0={x}")
def test_ps_gains_equal_the_pure_reference_push_by_push(mode, policy, base_batch, factors,
                                                        record_property):
    """Random workers, staleness, batch sizes and gradients: after every push the PS's
    last gain, progress, faded noise sums, open round's discounted samples and base
    batch equal the reference's fed the PS's own round estimates (the cumulative noise
    sums' increments), and the variable moved by ``LR * gain`` times each round's mean.
    With ``factors`` both switch every 15 pushes to the rule with the next factor."""
    workers, direct = 3, isinstance(policy, ksync.ASP)
    rule = policy.rule(workers)
    state = PSUpdateState(workers, rule, DEVICE, lr_scaling=mode, base_batch=base_batch)
    reference = ksync.UpdateState(workers, rule)
    var = tf.Variable(tf.zeros([4], tf.float64))
    push = _pusher(state, var, direct)
    rng = random.Random(11)
    np_rng = np.random.default_rng(11)
    expected, round_grads = np.zeros(4), []
    noise_before, gains, factored = np.zeros(2), [], set()
    for i in range(300 if mode == "adascale" else 120):
        if factors and i % 15 == 0:
            changed = dataclasses.replace(rule, lr_factor=factors[i // 15 % len(factors)])
            state.set_rule(changed)
            reference.set_rule(changed)
            assert state.counters()["lr_scaling"]["factor"] == changed.lr_factor
        worker = rng.randrange(workers)
        v_read = max(0, reference.version - rng.randrange(3))
        samples = float(rng.choice([8, 16, 32]))
        # A signal of |G|^2 = 1 and per-sample noise of trace 64: a noise scale of 64.
        grad = np.array([1.0, 0.0, 0.0, 0.0]) + np_rng.normal(0, np.sqrt(16 / samples), 4)
        if reference.scaling is None:
            # The reference's scaling is made once its base batch is known: given, or
            # the first accepted push's samples (every push here is finite).
            reference.scaling = LRScaling(mode, base_batch or samples)
        result = reference.push(worker, v_read, samples)
        push(tf.constant(grad), tf.constant(v_read, tf.int64), tf.constant(samples),
             tf.constant(worker, tf.int64))
        c = state.counters()
        if result.accepted:
            round_grads.append((result.weight * samples * grad, samples))
        if result.committed:
            mean = sum(g for g, _ in round_grads) / sum(s for _, s in round_grads)
            expected -= LR * result.gain * mean
            round_grads = []
            gains.append(result.gain)
            factored.add(reference.rule.lr_factor)
            # The round's estimate as the PS measured it (zero when it cannot tell).
            reference.observe_noise(*(c["noise_sums"] - noise_before))
            noise_before = c["noise_sums"]
        lr = c["lr_scaling"]
        assert c["version"] == reference.version
        ref = reference.scaling
        np.testing.assert_allclose(
            [lr["last_gain"], lr["progress"], lr["pending_scaled"], lr["base_batch"]],
            [reference.last_gain, ref.progress, reference.pending_scaled, ref.base_batch],
            rtol=1e-12)
        np.testing.assert_allclose([lr["signal"], lr["trace"], lr["rounds"]],
                                   [ref.signal, ref.trace, ref.rounds], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-9, atol=1e-12)
    # The comparison compared something: gains above 1, and AdaScale's well into its
    # warm-up (0.64 of it for K-sync, all of it for K-async, measured).
    record_property("max_gain", max(gains))
    record_property("warmup", reference.scaling.warmup())
    assert max(gains) > 1.2, (mode, max(gains))
    # Every factor acted on some commit, a factor below 1 gave a gain below 1.
    assert factored == (set(factors) or {1.0}), factored
    if any(f < 1.0 for f in factors):
        assert min(gains) < 1.0, min(gains)
    if mode == "adascale":
        assert reference.scaling.warmup() > 0.3


@pytest.mark.parametrize("factor, expected", [(1.0, 2.0), (0.25, 0.5)])
def test_a_round_committed_by_a_lowered_k_gets_the_gain_of_what_it_holds(factor, expected):
    """`commit_complete_round` (a worker died, K lowered): the gain of the round's two
    gradients times the lowered rule's factor, as the reference's."""
    rule = ksync.BSP().rule(3)
    state = PSUpdateState(3, rule, DEVICE, lr_scaling="linear", base_batch=8.0)
    reference = ksync.UpdateState(3, rule, LRScaling("linear", 8.0))
    var = tf.Variable(tf.zeros([2], tf.float64))
    push = _pusher(state, var)
    for worker in (0, 1):
        push(tf.constant([1.0, 2.0], tf.float64), tf.constant(0, tf.int64),
             tf.constant(8.0), tf.constant(worker, tf.int64))
        reference.push(worker, 0, 8.0)
    lowered = ksync.Rule(k=2, wait=True, max_staleness=0, lr_factor=factor)
    state.set_rule(lowered)
    reference.set_rule(lowered)

    @tf.function
    def complete():
        return state.commit_complete_round([(_scaled_sgd, var, None)])

    assert bool(complete()) and reference.commit_complete_round()
    lr = state.counters()["lr_scaling"]
    assert lr["last_gain"] == reference.last_gain == expected and lr["pending_scaled"] == 0.0
    # lr 0.1 x the gain x the round's mean
    np.testing.assert_allclose(var.numpy(), [-0.1 * expected, -0.2 * expected])


def test_no_scaling_keeps_no_state():
    """lr_scaling=None: no scaling state on the PS and none in its counters."""
    state = PSUpdateState(2, ksync.BSP().rule(2), DEVICE)
    assert state.lr_scaling is None and state.counters()["lr_scaling"] is None
    with pytest.raises(ValueError, match="lr_scaling must be one of"):
        PSUpdateState(2, ksync.BSP().rule(2), DEVICE, lr_scaling="cubic")


# -- on the session's real cluster (3 workers, 1 PS task) --------------------------------
# Sharded variables over 2 PS tasks: tests/test_strategies/two_ps_suite.py.
def test_an_unknown_lr_scaling_is_refused_with_the_choices():
    import tf_keras  # noqa: F401  (the strategy needs tf_keras loaded)
    from strategies import KSyncStrategy
    from test_drop_in import resolver
    spec = {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}
    with pytest.raises(ValueError, match=r"lr_scaling must be 'auto' .* got 'cubic'"):
        KSyncStrategy(resolver(spec), policy=ksync.BSP(), lr_scaling="cubic")
    with pytest.raises(ValueError, match=r"base_batch must be a number of samples > 0"):
        KSyncStrategy(resolver(spec), policy=ksync.BSP(), lr_scaling="linear", base_batch=0)


@pytest.mark.parametrize("name", ["Adam", "SGD-schedule", "legacy.SGD-momentum"])
def test_linear_bsp_equals_one_process_at_the_scaled_rate(cluster, name):
    """BSP with lr_scaling="linear" on K = 3 workers' batches of 16 is one process
    training on the 48 concatenated samples with the rate times 3 (SGD: a schedule's
    current rate; a legacy optimizer with momentum) or times sqrt(3) (Adam); the
    optimizer's own rate is left as given. SGD with momentum on sharded variables,
    several steps per scheduled function: tests/test_strategies/two_ps_suite.py."""
    import tf_keras as keras
    from test_drop_in import check_bsp_equals_single_process, mlp_model
    O = keras.optimizers
    k = cluster.num_workers
    make = {
        "Adam": lambda f: O.Adam(0.003 * f ** 0.5),
        "SGD-schedule": lambda f: O.SGD(O.schedules.PiecewiseConstantDecay(
            [1000], [0.1 * f, 0.01 * f])),
        "legacy.SGD-momentum": lambda f: O.legacy.SGD(0.05 * f, momentum=0.9),
    }[name]
    strategy, model = check_bsp_equals_single_process(
        cluster, None, 1, mlp_model, lambda: make(1),
        lr_scaling="linear", make_reference_optimizer=lambda: make(k))
    lr = strategy.telemetry()["lr_scaling"]
    factor = k ** 0.5 if name == "Adam" else k
    assert lr["mode"] == "linear" and lr["gain"] == k and lr["progress"] == 10 * k
    assert lr["optimizer_gain"] == pytest.approx(factor)
    given = 0.003 if name == "Adam" else 0.1 if name == "SGD-schedule" else 0.05
    assert lr["base_learning_rate"] == pytest.approx(given)   # nothing leaked into it
    assert lr["learning_rate"] == pytest.approx(given * factor)


def test_adaptive_scales_by_adascale_and_shows_it(cluster, record_property):
    """Adaptive with AdaScale (an opt-in) at each commit; telemetry, explain and History
    show the gain, the rate applied and the progress; the optimizer's variable keeps the
    user's rate. By default: the power gain under Adaptive, no scaling for a fixed rule."""
    import tf_keras as keras
    from strategies import KSyncStrategy, KSyncTelemetryCallback
    from test_drop_in import DATA, check_counters, mlp_model
    default = KSyncStrategy(cluster.resolver(), policy=ksync.Adaptive())
    assert default.lr_scaling == "power" and default.controller.lr_scaling == "power"
    unscaled = KSyncStrategy(cluster.resolver(), policy=ksync.Adaptive(), lr_scaling=None)
    assert unscaled.lr_scaling is None and unscaled.controller.lr_scaling is None
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.Adaptive(refresh_every=10),
                             lr_scaling="adascale")
    assert strategy.lr_scaling == "adascale"
    with strategy.scope():
        model = mlp_model()
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(keras.utils.experimental.DatasetCreator(DATA.dataset_fn(32)),
                        epochs=2, steps_per_epoch=120, verbose=0,
                        callbacks=[KSyncTelemetryCallback(strategy)])
    t = strategy.telemetry()
    check_counters(t, 240)
    lr = t["lr_scaling"]
    record_property("adascale_gain", lr["gain"])
    record_property("progress_over_updates", lr["progress"] / t["version"])
    assert lr["mode"] == "adascale" and lr["base_batch"] == 32.0
    # Some commits stepped further than one gradient would (1.30 x the updates, measured).
    assert lr["gain"] >= 1.0 and lr["progress"] > 1.05 * t["version"]
    assert lr["learning_rate"] == pytest.approx(0.05 * lr["gain"])
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    assert history.history["ksync_lr_gain"][-1] == lr["gain"]
    assert history.history["ksync_progress"][-1] == lr["progress"]
    assert "lr scaling adascale: gain" in strategy.explain()
    bsp = KSyncStrategy(cluster.resolver(), policy=ksync.BSP())
    assert bsp.lr_scaling is None and bsp.controller.lr_scaling is None


def test_another_thread_reads_the_users_rate_while_a_commit_is_traced():
    """While the PS traces a scaled apply (the optimizer's class swapped for the
    trace), a read of the rate from another thread (telemetry, the harness's evaluator)
    gets the user's rate, not an error; the tracing thread gets the scaled one."""
    import threading
    import tf_keras as keras
    from strategies.lr_scope import _scaled, current_learning_rate
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    inside, done, seen = threading.Event(), threading.Event(), {}

    def trace():
        with _scaled(optimizer, tf.constant(4.0, tf.float64), lambda v, g: None):
            seen["tracing"] = current_learning_rate(optimizer)
            inside.set()
            done.wait(30)

    thread = threading.Thread(target=trace)
    thread.start()
    assert inside.wait(30)
    seen["other"] = current_learning_rate(optimizer)
    done.set()
    thread.join(30)
    assert seen["tracing"] == pytest.approx(0.4) and seen["other"] == pytest.approx(0.1)
    assert current_learning_rate(optimizer) == pytest.approx(0.1)


def test_an_update_not_made_by_a_keras_optimizer_is_refused_under_scaling():
    """A custom update (``strategy.extended.update(var, fn, ...)`` with the user's own
    ``fn``) has no learning rate the commit could scale: a clear error, and the way
    out. The optimizer families: SGD by ``r``, the others by ``sqrt(r)``."""
    import tf_keras as keras
    from strategies.lr_scope import check_scalable, family

    def my_update(var, grad):
        return var.assign_sub(0.1 * grad)

    with pytest.raises(ValueError, match=r"not made by one \('.*my_update'\).*"
                                         r"lr_scaling=None"):
        check_scalable(my_update, "adascale")
    O = keras.optimizers
    assert [family(o) for o in (O.SGD(0.1, momentum=0.9), O.legacy.SGD(0.1), O.Adam(),
                                O.Lion(), O.legacy.RMSprop())] == \
        ["sgd", "sgd", "adam", "adam", "adam"]
