"""Dynamic batch sizes in the input pipeline never drop or repeat an example."""

import numpy as np
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from strategies.batching import CHUNK, dynamic_batches, looks_batched


def test_sizes_follow_the_variable_and_every_example_appears_once():
    size = tf.Variable(3, dtype=tf.int64)
    ds = dynamic_batches(tf.data.Dataset.range(100), size, chunk=4)
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


def test_a_new_size_applies_within_one_chunk_of_examples():
    size = tf.Variable(5, dtype=tf.int64)
    batches = iter(dynamic_batches(tf.data.Dataset.range(10_000), size))
    before = [len(next(batches)) for _ in range(3)]
    size.assign(8)
    after = [len(next(batches)) for _ in range(CHUNK // 5 + 3)]
    assert before == [5, 5, 5]
    assert after[-1] == 8 and sum(after[:after.index(8)]) <= CHUNK


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 40), st.sampled_from([1, 4, 8]),
       st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_any_length_chunk_and_sizes_give_the_stream_back_in_order(length, chunk, sizes):
    # Lengths that are multiples of the chunk leave the end's rest in the scan's state:
    # the flush after the input must still give it out.
    size = tf.Variable(sizes[0], dtype=tf.int64)
    seen, got = [], []
    for i, batch in enumerate(dynamic_batches(tf.data.Dataset.range(length), size, chunk)):
        seen.extend(batch.numpy().tolist())
        got.append(len(batch))
        size.assign(sizes[(i + 1) % len(sizes)])
    assert seen == list(range(length))
    assert all(0 < n <= max(sizes) for n in got)


def test_examples_whose_shape_the_spec_leaves_open_batch_by_what_they_hold():
    rows = tf.data.Dataset.from_generator(
        lambda: (np.full((2, 3), i, "float32") for i in range(9)),
        output_signature=tf.TensorSpec([None, 3], tf.float32))
    batches = list(dynamic_batches(rows, tf.Variable(4, dtype=tf.int64)))
    assert [b.shape for b in batches] == [(4, 2, 3), (4, 2, 3), (1, 2, 3)]
    assert np.concatenate(batches)[:, 0, 0].tolist() == list(range(9))


def test_tuples_of_features_and_labels_batch_together():
    size = tf.Variable(4, dtype=tf.int64)
    x, y = np.arange(20, dtype="float32").reshape(10, 2), np.arange(10)
    ds = dynamic_batches(tf.data.Dataset.from_tensor_slices((x, y)), size)
    xb, yb = next(iter(ds))
    assert xb.shape == (4, 2) and yb.numpy().tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(xb.numpy()[:, 0] / 2, yb.numpy())
    named = dynamic_batches(tf.data.Dataset.from_tensor_slices({"x": x, "y": y}), size)
    assert [len(b["y"]) for b in named] == [4, 4, 2]


def test_looks_batched():
    assert looks_batched(tf.data.Dataset.range(10).batch(3).element_spec)
    assert not looks_batched(tf.data.Dataset.range(10).element_spec)
    assert not looks_batched(tf.data.Dataset.from_tensor_slices(np.zeros((4, 3))).element_spec)
    xy = tf.data.Dataset.from_tensor_slices((np.zeros((8, 3)), np.zeros(8)))
    assert not looks_batched(xy.element_spec)
    assert looks_batched(xy.batch(4, drop_remainder=True).element_spec)
