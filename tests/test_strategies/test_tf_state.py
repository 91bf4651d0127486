"""The TensorFlow PS state makes the same decisions as the pure-Python reference."""

import random

import numpy as np
import pytest
import tensorflow as tf

import ksync
from ksync.noise import RoundNoise
from strategies.ps_state import STALENESS_BINS, PSUpdateState

# The local CPU of whatever job this process plays (tests may have connected it to a
# cluster as the chief).
DEVICE = "/device:CPU:0"


def make_pusher(state, var, direct=False):
    def apply_fn(v, g):
        return v.assign_sub(g)

    @tf.function
    def push(grad, version_read, samples, worker):
        return state.push([(apply_fn, var, grad)], version_read, samples,
                          tf.constant(0.01, tf.float64), worker, direct=direct)

    return push


class _Fixed(ksync.Policy):
    """A policy that runs one given rule (rules no shipped static policy has)."""

    def __init__(self, rule):
        super().__init__()
        self._fixed = rule

    def _rule(self, num_workers):
        return self._fixed

    def __repr__(self):
        return f"Fixed({self._fixed.describe()})"


@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.KSync(k=2), ksync.KAsync(k=3),
                                    ksync.SSP(max_staleness=1, stale_action="downweight"),
                                    ksync.SSP(max_staleness=2), ksync.ASP(),
                                    _Fixed(ksync.Rule(k=2, wait=False, max_staleness=2,
                                                      staleness_scaling=True)),
                                    ksync.Rennala(batch=4), ksync.Ringmaster(max_delay=1)],
                         ids=repr)
def test_tf_state_matches_reference(policy):
    # The strategy applies a static K = 1 rule outside the lock (`direct`): Ringmaster
    # takes that path here, the others the aggregate's (which Adaptive uses at K = 1).
    _check_against_reference(policy, direct=isinstance(policy, ksync.Ringmaster))


def test_asp_direct_push_takes_no_lock_and_matches_reference():
    """ASP's direct push decides from the push alone: no lock in its graph, and the same
    counters, telemetry and parameters as the reference."""
    def op_types(policy):
        state = PSUpdateState(2, policy.rule(2), DEVICE)
        push = make_pusher(state, tf.Variable(tf.zeros([2])), direct=True)
        graph = push.get_concrete_function(
            tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.int64),
            tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)).graph
        return {op.type for op in graph.get_operations()}

    kinds = op_types(ksync.ASP())
    assert "MutexLock" not in kinds and "AssignAddVariableOp" in kinds
    assert "MutexLock" in op_types(ksync.SSP(max_staleness=2))
    _check_against_reference(ksync.ASP(), direct=True)


def test_concurrent_unlocked_pushes_lose_nothing():
    """Pushes from several threads at once on the unlocked path: every one counted and
    applied exactly once, and the staleness histogram holds every push."""
    import threading
    state = PSUpdateState(4, ksync.ASP().rule(4), DEVICE)
    var = tf.Variable(tf.zeros([3]))
    push = make_pusher(state, var, direct=True)
    one = tf.ones([3])
    push(one, tf.constant(0, tf.int64), tf.constant(1.0), tf.constant(0, tf.int64))  # trace
    per_thread = 50

    def pusher(worker):
        for _ in range(per_thread):
            push(one, state.read_version(), tf.constant(1.0), tf.constant(worker, tf.int64))

    threads = [threading.Thread(target=pusher, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = 1 + 4 * per_thread
    c = state.counters()
    assert (c["version"], c["pushed"], c["applied"], c["dropped"]) == (total, total, total, 0)
    assert int(c["staleness_hist"].sum()) == total
    assert list(c["worker_pushes"]) == [1 + per_thread] + [per_thread] * 3
    np.testing.assert_allclose(var.numpy(), [-total] * 3)


def _check_against_reference(policy, direct):
    num_workers = 3
    rule = policy.rule(num_workers)
    reference = ksync.UpdateState(num_workers, rule)
    state = PSUpdateState(num_workers, rule, DEVICE)
    var = tf.Variable(tf.zeros([2]))
    push = make_pusher(state, var, direct=direct)
    rng = random.Random(7)
    expected = np.zeros(2)
    round_grads = []
    # The noise scale's statistics, as the simulator computes them (`ksync.noise`).
    round_noise, noise_sums = RoundNoise(), np.zeros(2)
    hist = np.zeros((num_workers, STALENESS_BINS), np.int64)
    for _ in range(60):
        worker = rng.randrange(num_workers)
        v_read = max(0, reference.version - rng.randrange(4))
        samples = float(rng.choice([8, 16, 32]))
        finite = rng.random() > 0.1
        grad = np.array([rng.uniform(-1, 1), np.nan if not finite else 1.0],
                        np.float32).astype(np.float64)
        result = reference.push(worker, v_read, samples, finite=finite)
        hist[worker, min(result.staleness, STALENESS_BINS - 1)] += 1
        push(tf.constant(grad, tf.float32), tf.constant(v_read, tf.int64),
             tf.constant(samples), tf.constant(worker, tf.int64))
        if result.accepted:
            round_grads.append((result.weight * samples * grad, samples))
            round_noise.add(float(grad @ grad), samples)
        if result.committed:
            total = sum(s for _, s in round_grads)
            mean = sum(g for g, _ in round_grads) / total
            expected -= mean
            noise_sums += round_noise.estimate(float(mean @ mean))
            round_grads, round_noise = [], RoundNoise()
        c = state.counters()
        assert (c["version"], c["pushed"], c["applied"], c["dropped"], c["pending"],
                c["nonfinite"]) == (reference.version, reference.pushed, reference.applied,
                                    reference.dropped, reference.pending,
                                    reference.nonfinite)
        assert list(c["contributed"]) == reference.contributed
        np.testing.assert_array_equal(c["staleness_hist"], hist)
        np.testing.assert_allclose(c["noise_sums"], noise_sums, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-5, atol=1e-6)
    if rule.k > 1 and not isinstance(policy, ksync.Ringmaster):
        assert noise_sums[1] != 0   # the comparison above compared something
    assert np.isfinite(var.numpy()).all()


def test_rule_change_takes_effect_on_next_push():
    rule = ksync.KSync(k=3).rule(3)
    state = PSUpdateState(3, rule, DEVICE)
    var = tf.Variable(tf.zeros([1]))
    push = make_pusher(state, var)
    one = tf.constant([1.0])
    push(one, tf.constant(0, tf.int64), tf.constant(4.0), tf.constant(0, tf.int64))
    state.set_rule(ksync.Rule(k=2, wait=True, max_staleness=0))
    push(one, tf.constant(0, tf.int64), tf.constant(4.0), tf.constant(1, tf.int64))
    c = state.counters()
    assert c["version"] == 1 and c["k"] == 2 and c["applied"] == 2


def test_wait_turn_commits_a_round_made_complete_by_a_lowered_k():
    """A worker waiting in the graph for its round commits it once K drops to what the
    round holds, exactly as the reference's `commit_complete_round`."""
    rule = ksync.BSP().rule(3)
    state = PSUpdateState(3, rule, DEVICE)
    reference = ksync.UpdateState(3, rule)
    var = tf.Variable(tf.zeros([2]))
    push = make_pusher(state, var)
    for worker, grad in ((0, [1.0, 2.0]), (1, [3.0, 4.0])):
        push(tf.constant(grad), tf.constant(0, tf.int64), tf.constant(4.0),
             tf.constant(worker, tf.int64))
        reference.push(worker, 0, 4.0)
    lowered = ksync.Rule(k=2, wait=True, max_staleness=0)
    state.set_rule(lowered)
    reference.set_rule(lowered)

    @tf.function
    def wait(worker):
        return state.wait_turn(worker, [(lambda v, g: v.assign_sub(g), var, None)],
                               max_wait_s=5.0)

    assert int(wait(tf.constant(0, tf.int64))) == 1
    assert reference.commit_complete_round() and not reference.commit_complete_round()
    c = state.counters()
    assert (c["version"], c["applied"], c["pending"]) == (
        reference.version, reference.applied, reference.pending) == (1, 2, 0)
    np.testing.assert_allclose(var.numpy(), [-2.0, -3.0])  # mean of the round's two
    assert int(wait(tf.constant(2, tf.int64))) == 1  # never joined: no wait


def test_wait_turn_gives_up_with_an_error_naming_the_round():
    state = PSUpdateState(2, ksync.BSP().rule(2), DEVICE)
    var = tf.Variable(tf.zeros([1]))
    make_pusher(state, var)(tf.constant([1.0]), tf.constant(0, tf.int64), tf.constant(1.0),
                            tf.constant(0, tf.int64))

    @tf.function
    def wait():
        return state.wait_turn(tf.constant(0, tf.int64),
                               [(lambda v, g: v.assign_sub(g), var, None)], max_wait_s=0.05)

    with pytest.raises(tf.errors.InvalidArgumentError, match="waited more than"):
        wait()


def test_sparse_gradients_aggregate_like_dense_ones():
    rule = ksync.KSync(k=2).rule(2)
    dense_var, sparse_var = tf.Variable(tf.zeros([4, 2])), tf.Variable(tf.zeros([4, 2]))
    dense, sparse = PSUpdateState(2, rule, DEVICE), PSUpdateState(2, rule, DEVICE)
    push_dense, push_sparse = make_pusher(dense, dense_var), make_pusher(sparse, sparse_var)
    rows = [(tf.constant([0, 2]), tf.constant([[1.0, 1.0], [2.0, 2.0]])),
            (tf.constant([2, 3]), tf.constant([[4.0, 4.0], [8.0, 8.0]]))]
    for worker, (indices, values) in enumerate(rows):
        args = (tf.constant(0, tf.int64), tf.constant(2.0 + worker),
                tf.constant(worker, tf.int64))
        push_sparse(tf.IndexedSlices(values, indices, tf.constant([4, 2])), *args)
        push_dense(tf.scatter_nd(indices[:, None], values, [4, 2]), *args)
    assert dense.counters()["version"] == sparse.counters()["version"] == 1
    np.testing.assert_allclose(sparse_var.numpy(), dense_var.numpy())
    assert np.abs(dense_var.numpy()).sum() > 0


def test_rennala_on_the_tf_state_one_fast_worker_fills_the_round():
    """The push sequence of the reference test (tests/test_ksync/test_policies.py): a fast worker
    contributes three gradients at the current version, a stale one is dropped, and the
    update is the sample-weighted mean of the round's four gradients."""
    rule = ksync.Rennala(batch=4).rule(3)
    state, reference = PSUpdateState(3, rule, DEVICE), ksync.UpdateState(3, rule)
    var = tf.Variable(tf.zeros([1]))
    push = make_pusher(state, var)
    pushes = [(0, 0, 1.0), (0, 0, 2.0), (1, 0, 3.0), (0, 0, 4.0), (2, 0, 100.0), (1, 1, 5.0)]
    for worker, v_read, grad in pushes:
        reference.push(worker, v_read, 8.0)
        push(tf.constant([grad]), tf.constant(v_read, tf.int64), tf.constant(8.0),
             tf.constant(worker, tf.int64))
    c = state.counters()
    assert (c["version"], c["applied"], c["dropped"], c["pending"]) == (
        reference.version, reference.applied, reference.dropped, reference.pending) == (1, 4, 1, 1)
    np.testing.assert_allclose(var.numpy(), [-2.5])   # mean of 1, 2, 3, 4; 100 dropped
    assert bool(c["wait"]) is False and c["k"] == 4


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_the_push_scalars_ride_in_a_gradient_of_any_float_dtype_exactly(dtype):
    from strategies.ps_state import _carry
    grad = tf.cast(tf.reshape(tf.range(6.0), [2, 3]), dtype)
    meta = tf.constant([1.0, 37.0, 0.123456789012345, 5.0, 1e-300], tf.float64)
    back, got = _carry(grad, meta, DEVICE)
    assert back.dtype == dtype and back.shape == grad.shape
    np.testing.assert_array_equal(tf.cast(back, tf.float64).numpy(),
                                  tf.cast(grad, tf.float64).numpy())
    np.testing.assert_array_equal(got.numpy(), meta.numpy())  # bit for bit
