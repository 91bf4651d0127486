"""The simulator's speed-ups change no result: the fast evaluations of `cluster_sim.numpy_mlp`
and `cluster_sim.numpy_ctr` give the very floats of the plain formulas they replace, and
a simulated run's curve is the same bit for bit with either.

The plain formulas are kept here, as they were in the code before the speed-ups (full
log-softmax, fresh arrays, the embeddings gathered and concatenated at every call).
"""

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import ksync
from cluster_sim.numpy_ctr import EmbeddingMLP
from cluster_sim.numpy_mlp import MLP
from cluster_sim.sim import SimConfig, Simulation
from cluster_sim.workloads import ctr


def plain_mlp_evaluate(model, x, y):
    h = x
    layers = model.layers(model.params)
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            np.maximum(h, 0, out=h)
    logits = h.astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    loss = -float(logp[np.arange(len(y)), y].mean())
    return loss, float((logits.argmax(axis=1) == y).mean())


def plain_ctr_evaluate(model, x, y, chunk=50_000):
    params = model.params  # settles every row
    table = params[:model.table_size].reshape(model.table_rows, model.dim)
    loss = correct = 0.0
    for lo in range(0, len(x), chunk):
        xc, yc = x[lo:lo + chunk], np.asarray(y[lo:lo + chunk])
        rows = xc[:, :model.num_fields].astype(np.int64) + model.offsets
        inputs = np.concatenate([table[rows].reshape(len(xc), -1),
                                 xc[:, model.num_fields:].astype(model.dtype)], axis=1)
        l, a = plain_mlp_evaluate(model.top, inputs, yc)
        loss += l * len(xc)
        correct += a * len(xc)
    return loss / len(x), correct / len(x)


@pytest.mark.parametrize("classes", [2, 10])
def test_mlp_evaluation_gives_the_plain_formulas_floats(classes):
    rng = np.random.default_rng(classes)
    x = rng.standard_normal((3000, 12)).astype(np.float32)
    y = rng.integers(0, classes, len(x))
    model = MLP(12, classes, (16, 8), seed=1)
    for scale in (1.0, 30.0):  # 30: large logits, where the log-sum-exp's shift matters
        model.params *= scale
        for rows in (len(x), 777):  # a second size: its own scratch arrays
            assert model.evaluate(x[:rows], y[:rows]) == plain_mlp_evaluate(
                model, x[:rows], y[:rows])
    fresh = model.logits(model.params, x)
    assert np.array_equal(fresh, model.logits(model.params, x, out=model.scratch(len(x))))
    assert fresh is not model.logits(model.params, x)  # without out: a new array each call


def test_ctr_evaluation_gives_the_plain_gathers_floats_as_training_moves_the_tables():
    data = ctr(train_size=4000, test_size=1500, seed=3)
    model = EmbeddingMLP(data.layout.buckets, data.layout.num_dense, hidden=(8,), seed=3)
    rng = np.random.default_rng(0)
    for step in range(3):  # the cached rows and dense columns, with embeddings that moved
        idx = rng.integers(0, len(data.x_train), (4, 16))
        for g in model.gradients(None, data.x_train[idx], data.y_train[idx],
                                 np.full((4, 16), 1 / 16)):
            model.apply(g, learning_rate=0.5, momentum=0.9)
        fast = model.evaluate(data.x_test, data.y_test)
        assert fast == plain_ctr_evaluate(model, data.x_test, data.y_test), step
        assert model.evaluate(data.x_test, data.y_test, chunk=400) == plain_ctr_evaluate(
            model, data.x_test, data.y_test, chunk=400)
    other = data.x_test[::-1].copy()  # another array: its own rows, not the cached ones
    assert model.evaluate(other, data.y_test[::-1]) == plain_ctr_evaluate(
        model, other, data.y_test[::-1])


@pytest.mark.parametrize("policy", ["bsp", "asp"])
def test_a_simulated_curve_is_the_same_with_the_plain_evaluation(policy):
    config = SimConfig(num_workers=4, max_pushes=240, eval_every=12, step_jitter=0.1,
                       stop_at_target=False, seed=2)
    curves = []
    with threadpool_limits(1):
        for plain in (False, True):
            sim = Simulation(ksync.get(policy), config)
            if plain:
                sim.model.evaluate = lambda x, y, m=sim.model: plain_mlp_evaluate(m, x, y)
            sim.run()
            curves.append([(p["wall_s"], p["loss"], p["accuracy"]) for p in sim.curve])
    assert len(curves[0]) == 20 and curves[0] == curves[1]  # every 12 pushes of 240
