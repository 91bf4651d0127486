"""The TensorFlow PS state makes the same decisions as the pure-Python reference."""

import random

import numpy as np
import pytest
import tensorflow as tf

import ksync
from ksync.tf_state import PSUpdateState

# The local CPU of whatever job this process plays (tests may have connected it to a
# cluster as the chief).
DEVICE = "/device:CPU:0"


def make_pusher(state, var):
    def apply_fn(v, g):
        return v.assign_sub(g)

    @tf.function
    def push(grad, version_read, samples, worker):
        return state.push([(apply_fn, var, grad)], version_read, samples,
                          tf.constant(0.01, tf.float64), worker)

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
                                                      staleness_scaling=True))],
                         ids=repr)
def test_tf_state_matches_reference(policy):
    num_workers = 3
    rule = policy.rule(num_workers)
    reference = ksync.UpdateState(num_workers, rule)
    state = PSUpdateState(num_workers, rule, DEVICE)
    var = tf.Variable(tf.zeros([2]))
    push = make_pusher(state, var)
    rng = random.Random(7)
    expected = np.zeros(2)
    round_grads = []
    for _ in range(60):
        worker = rng.randrange(num_workers)
        v_read = max(0, reference.version - rng.randrange(4))
        samples = float(rng.choice([8, 16, 32]))
        finite = rng.random() > 0.1
        grad = np.array([rng.uniform(-1, 1), np.nan if not finite else 1.0])
        result = reference.push(worker, v_read, samples, finite=finite)
        push(tf.constant(grad, tf.float32), tf.constant(v_read, tf.int64),
             tf.constant(samples), tf.constant(worker, tf.int64))
        if result.accepted:
            round_grads.append((result.weight * samples * grad, samples))
        if result.committed:
            total = sum(s for _, s in round_grads)
            expected -= sum(g for g, _ in round_grads) / total
            round_grads = []
        c = state.counters()
        assert (c["version"], c["pushed"], c["applied"], c["dropped"], c["pending"],
                c["nonfinite"]) == (reference.version, reference.pushed, reference.applied,
                                    reference.dropped, reference.pending,
                                    reference.nonfinite)
        assert list(c["contributed"]) == reference.contributed
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-5, atol=1e-6)
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
