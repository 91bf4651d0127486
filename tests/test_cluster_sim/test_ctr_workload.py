"""The held-out click-through workload (`cluster_sim.ctr`) and its numpy twin
(`cluster_sim.numpy_ctr`): the data's properties, the twin against the tf_keras model
(loss, sparse gradients, SGD steps with momentum), the lazy momentum against a dense
one, and that SGD learns the task but not in a few updates."""

import numpy as np
import pytest

from cluster_sim import ctr as ctr_module
from cluster_sim.ctr import CTR_TARGETS, CTR_TRAINING, CTRLayout, generate
from cluster_sim.numpy_ctr import EmbeddingMLP, SparseGradient
from cluster_sim.workloads import build_model, load, numpy_model

SMALL = dict(train_size=4000, test_size=1000)
#: A task of the same shape with small vocabularies: cheaper to generate many times.
TINY = dict(vocab=(5000, 300, 12), buckets=(512, 64, 16), num_dense=2)


@pytest.fixture(scope="module")
def small():
    return load("ctr", **SMALL)


def twin_for(layout, **kw):
    return EmbeddingMLP(layout.buckets, layout.num_dense, **kw)


def dense_sgd(params, velocity, gradient, lr, momentum):
    """Keras's dense SGD with momentum, the reference for the lazy sparse one."""
    velocity *= momentum
    velocity -= lr * gradient
    params += velocity


# -- the data ----------------------------------------------------------------------------

def test_generation_is_deterministic_and_the_test_set_does_not_move():
    a, b = generate(**SMALL, **TINY), generate(**SMALL, **TINY)
    for u, v in zip(a[:4], b[:4]):
        assert np.array_equal(u, v)
    other = generate(seed=1, **SMALL, **TINY)
    assert not np.array_equal(a[0], other[0])
    bigger = generate(train_size=8000, test_size=1000, **TINY)
    assert np.array_equal(a[2], bigger[2]) and np.array_equal(a[3], bigger[3])


def test_layout_sizes_and_ids(small):
    data = small
    layout = data.layout
    assert data.name == "ctr" and data.num_classes == 2 and data.x_train.dtype == np.float32
    assert data.x_train.shape[1] == layout.num_fields + layout.num_dense
    ids = data.x_train[:, :layout.num_fields]
    assert np.array_equal(ids, np.round(ids)) and ids.min() >= 0
    assert (ids.max(axis=0) < np.asarray(layout.buckets)).all()
    # The benchmark's tables hold at least a million parameters.
    assert layout.num_rows * CTR_TRAINING["embedding_dim"] >= 1_000_000
    assert data.target == CTR_TARGETS["early"]
    assert CTR_TARGETS["late"]["loss"] < CTR_TARGETS["early"]["loss"]


def test_values_follow_a_power_law_and_clicks_are_noisy():
    x_tr, y_tr, _, y_te, layout, teacher_loss = generate(train_size=200_000, test_size=20_000)
    # Field 5 (500 values in 512 buckets) is not hashed: its bucket counts are the
    # Zipf law itself, count of rank r ~ r ** -1.1.
    counts = np.sort(np.bincount(x_tr[:, 5].astype(int)))[::-1][:100]
    slope = np.polyfit(np.log(np.arange(1, 101)), np.log(counts), 1)[0]
    assert slope == pytest.approx(-1.1, abs=0.1)
    # The largest field: a long tail of rows seen rarely (most of its table).
    big = np.bincount(x_tr[:, 0].astype(int), minlength=layout.buckets[0])
    assert (big < 5).mean() > 0.5 and big.max() / len(x_tr) > 0.05
    # About a quarter click; the teacher's own loss is far above 0 (label noise) and
    # far below the constant guess's.
    rate = y_te.mean()
    constant = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
    assert 0.22 < y_tr.mean() < 0.28
    assert 0.3 < teacher_loss < constant - 0.1
    assert teacher_loss < CTR_TARGETS["late"]["loss"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="as many positive sizes"):
        generate(vocab=(10, 10), buckets=(4,), **SMALL)
    with pytest.raises(ValueError, match="train_size"):
        generate(train_size=0)
    with pytest.raises(ValueError, match="click_rate"):
        generate(click_rate=1.0, **SMALL)


# -- the twin against tf_keras -----------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    """The tf_keras model and the twin with its weights, on a small layout of the same
    shape (so the test is fast) and rows drawn by the workload's generator."""
    x, y, _, _, layout, _ = generate(train_size=512, test_size=10, vocab=(400, 90, 12),
                                     buckets=(64, 32, 16), num_dense=3)
    keras_model = ctr_module.embedding_mlp(layout, embedding_dim=4, hidden=(8, 6), seed=3)
    twin = twin_for(layout, embedding_dim=4, hidden=(8, 6), seed=3)
    twin.params = np.concatenate([w.numpy().ravel() for w in keras_model.trainable_weights])
    return keras_model, twin, layout, x, y


def keras_gradient(model, x, y):
    import tensorflow as tf
    import tf_keras as keras
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    return float(loss), tape.gradient(loss, model.trainable_weights)


def flat(gradients, variables):
    import tensorflow as tf
    out = []
    for g, v in zip(gradients, variables):
        if isinstance(g, tf.IndexedSlices):
            dense = np.zeros(v.shape, np.float32)
            np.add.at(dense, g.indices.numpy(), g.values.numpy())
            out.append(dense.ravel())
        else:
            out.append(g.numpy().ravel())
    return np.concatenate(out)


def test_twin_loss_and_gradients_equal_keras(pair):
    import tensorflow as tf
    model, twin, layout, x, y = pair
    xb, yb = x[:64], y[:64]
    loss, grads = keras_gradient(model, xb, yb)
    # Embeddings get sparse gradients, the MLP dense ones.
    assert [isinstance(g, tf.IndexedSlices) for g in grads][:layout.num_fields + 1] == \
        [True] * layout.num_fields + [False]
    assert twin.evaluate(xb, yb)[0] == pytest.approx(loss, abs=1e-5)
    (g,) = twin.gradients(twin.params, xb[None], yb[None], np.full((1, 64), 1 / 64))
    np.testing.assert_allclose(g.to_dense(twin.table_rows), flat(grads, model.trainable_weights),
                               atol=1e-5)
    # Only the rows the batch looked up.
    looked_up = np.unique(xb[:, :3].astype(int) + twin.offsets)
    assert np.array_equal(g.rows, looked_up)


def test_sgd_with_momentum_steps_equal_keras(pair):
    import tf_keras as keras
    model, twin, layout, x, y = pair
    lr, momentum = 0.3, 0.9
    optimizer = keras.optimizers.SGD(lr, momentum=momentum)
    before_last = None
    for step in range(5):
        xb, yb = x[64 + 32 * step: 96 + 32 * step], y[64 + 32 * step: 96 + 32 * step]
        if step == 4:
            before_last = np.concatenate([w.numpy().ravel() for w in model.trainable_weights])
        _, grads = keras_gradient(model, xb, yb)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        (g,) = twin.gradients(None, xb[None], yb[None], np.full((1, 32), 1 / 32))
        twin.apply(g, lr, momentum)
        after = np.concatenate([w.numpy().ravel() for w in model.trainable_weights])
        np.testing.assert_allclose(twin.params, after, atol=1e-5)
    # tf_keras moves rows the last batch did not touch (their momentum): the semantics
    # the twin follows, not TF1's lazy sparse momentum.
    untouched = np.setdiff1d(np.arange(twin.table_rows), g.rows)
    moved = (after != before_last)[:twin.table_size].reshape(twin.table_rows, -1)
    assert moved[untouched].any(axis=1).sum() > 10


# -- the twin on its own -----------------------------------------------------------------

def test_workers_in_one_call_equal_one_by_one_and_padding_is_left_out():
    x, y, _, _, layout, _ = generate(train_size=300, test_size=10, vocab=(500, 40),
                                     buckets=(50, 40), num_dense=2)
    twin = twin_for(layout, embedding_dim=3, hidden=(5,), seed=0)
    xs, ys = x[:96].reshape(3, 32, -1), y[:96].reshape(3, 32)
    weights = np.full((3, 32), 1 / 32)
    weights[2, 20:] = 0.0  # worker 2 has 20 real rows; the rest is padding
    weights[2, :20] = 1 / 20
    together = twin.gradients(None, xs, ys, weights)
    for j, g in enumerate(together):
        n = 20 if j == 2 else 32
        (alone,) = twin.gradients(None, xs[j:j + 1, :n], ys[j:j + 1, :n], np.full((1, n), 1 / n))
        assert np.array_equal(g.rows, alone.rows)
        np.testing.assert_allclose(g.values, alone.values, atol=1e-7)
        np.testing.assert_allclose(g.dense, alone.dense, atol=1e-7)
    # The aggregate of the PS: the weighted sum of the dense forms.
    total = twin.zero_sum()
    for g, scale in zip(together, (0.5, 0.25, 2.0)):
        total.add(g, scale)
    mean = total.total(divide_by=4.0)
    expected = sum(s * g.to_dense(twin.table_rows).astype(np.float64)
                   for g, s in zip(together, (0.5, 0.25, 2.0))) / 4.0
    np.testing.assert_allclose(mean.to_dense(twin.table_rows), expected, atol=1e-7)
    assert mean.norm2() == pytest.approx(float(expected @ expected), rel=1e-5)
    assert len(np.unique(mean.rows)) == len(mean.rows)


def test_lazy_momentum_equals_dense_momentum_and_touches_only_its_rows():
    layout = CTRLayout((200, 30), 1)
    twin = twin_for(layout, embedding_dim=2, hidden=(4,), seed=1)
    params, velocity = twin.params.astype(np.float64), np.zeros(twin.num_params)
    rng = np.random.default_rng(0)
    steps = [(0.2, 0.9)] * 30 + [(0.1, 0.5)] * 10 + [(0.1, 0.0)] * 3 + [(0.05, 0.9)] * 5
    for i, (lr, momentum) in enumerate(steps):
        rows = np.unique(rng.integers(0, twin.table_rows, 6))
        g = SparseGradient(rng.standard_normal(twin.top.num_params).astype(np.float32), rows,
                           rng.standard_normal((len(rows), 2)).astype(np.float32))
        stored = twin._params.copy()
        twin.apply(g, lr, momentum)
        dense_sgd(params, velocity, g.to_dense(twin.table_rows), lr, momentum)
        if i and steps[i - 1][1] == momentum:
            # An update writes the MLP and its own rows, nothing else of the table.
            changed = (twin._params != stored)[:twin.table_size].reshape(-1, 2).any(axis=1)
            assert set(np.flatnonzero(changed)) <= set(rows)
    np.testing.assert_allclose(twin.params, params, atol=1e-5)
    np.testing.assert_allclose(twin.velocity, velocity, atol=1e-5)
    # Reading through gradients(None, ...) settles the rows it looks up first.
    x = np.array([[[3, 7, 0.5]]], np.float32)
    (lazy,) = twin.gradients(None, x, np.array([[1]]), np.ones((1, 1)))
    (settled,) = twin.gradients(twin.params, x, np.array([[1]]), np.ones((1, 1)))
    np.testing.assert_allclose(lazy.values, settled.values, atol=1e-6)


def test_builders_follow_the_workload(small):
    data = small
    twin = numpy_model(data, hidden=(8,), embedding_dim=4)
    model = build_model(data, hidden=(8,), embedding_dim=4)
    assert twin.num_params == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert twin.nbytes < twin.table_size * 4 / 10  # a step moves rows, not the tables
    teacher = load("teacher", train_size=100, test_size=10)
    assert type(numpy_model(teacher)).__name__ == "MLP"


# -- learning ----------------------------------------------------------------------------

def test_sgd_learns_but_not_in_a_few_updates():
    # 150 BSP-sized updates (256 samples) at the training settings: clearly learning,
    # still short of the early target.
    data = load("ctr", train_size=150 * 256, test_size=20_000)
    settings = CTR_TRAINING
    twin = numpy_model(data, hidden=settings["hidden"], embedding_dim=settings["embedding_dim"])
    start, _ = twin.evaluate(data.x_test, data.y_test)
    weights = np.full((1, 256), 1 / 256)
    for i in range(150):
        rows = slice(256 * i, 256 * (i + 1))
        (g,) = twin.gradients(None, data.x_train[rows][None], data.y_train[rows][None], weights)
        twin.apply(g, settings["learning_rate"], settings["momentum"])
    loss, _ = twin.evaluate(data.x_test, data.y_test)
    assert loss < start - 0.1
    assert loss > CTR_TARGETS["early"]["loss"] + 0.005
