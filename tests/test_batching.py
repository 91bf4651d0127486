"""Dynamic batch sizes in the input pipeline never drop or repeat an example."""

import numpy as np
import tensorflow as tf

from strategies.batching import dynamic_batches, looks_batched


def test_sizes_follow_the_variable_and_every_example_appears_once():
    size = tf.Variable(3, dtype=tf.int64)
    ds = dynamic_batches(tf.data.Dataset.range(100), size)
    seen, sizes = [], []
    for i, batch in enumerate(ds):
        if i == 4:
            size.assign(7)
        if i == 8:
            size.assign(1)
        seen.extend(batch.numpy().tolist())
        sizes.append(len(batch))
    assert seen == list(range(100))
    assert sizes[:4] == [3, 3, 3, 3] and 7 in sizes and 1 in sizes
    assert len(set(sizes[:-1]) - {3, 7, 1}) == 0


def test_tuples_of_features_and_labels_batch_together():
    size = tf.Variable(4, dtype=tf.int64)
    x, y = np.arange(20, dtype="float32").reshape(10, 2), np.arange(10)
    ds = dynamic_batches(tf.data.Dataset.from_tensor_slices((x, y)), size)
    xb, yb = next(iter(ds))
    assert xb.shape == (4, 2) and yb.numpy().tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(xb.numpy()[:, 0] / 2, yb.numpy())


def test_looks_batched():
    assert looks_batched(tf.data.Dataset.range(10).batch(3).element_spec)
    assert not looks_batched(tf.data.Dataset.range(10).element_spec)
    assert not looks_batched(tf.data.Dataset.from_tensor_slices(np.zeros((4, 3))).element_spec)
    xy = tf.data.Dataset.from_tensor_slices((np.zeros((8, 3)), np.zeros(8)))
    assert not looks_batched(xy.element_spec)
    assert looks_batched(xy.batch(4, drop_remainder=True).element_spec)
