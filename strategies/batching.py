"""Batches whose size a variable sets at run time, inside a worker's input pipeline.

`dynamic_batches` groups consecutive examples of an unbatched dataset into batches; each
batch takes its size from ``size_variable`` when its first example arrives, so a size
assigned while training runs applies from the next batch on. Examples are never dropped
or repeated: concatenating the batches gives the input stream back in order.

Example:

```python
size = tf.Variable(4, dtype=tf.int64)
ds = dynamic_batches(tf.data.Dataset.range(10), size)   # [0..3], [4..7], ...
```
"""

import tensorflow as tf

# Sizes travel inside the window key (key = batch id * _KEY_BASE + size) so that
# group_by_window knows each batch's size without reading the variable a second time.
_KEY_BASE = 1 << 20


def dynamic_batches(dataset: tf.data.Dataset, size_variable) -> tf.data.Dataset:
    """Batch ``dataset`` (single examples) with sizes read from ``size_variable``."""
    zero = tf.constant(0, tf.int64)

    def assign_batch(state, example):
        position, batch_id, size = state
        size = tf.where(position == 0,
                        tf.clip_by_value(tf.cast(size_variable.read_value(), tf.int64),
                                         1, _KEY_BASE - 1),
                        size)
        position += 1
        full = position >= size
        next_state = (tf.where(full, zero, position), tf.where(full, batch_id + 1, batch_id),
                      size)
        return next_state, (batch_id * _KEY_BASE + size, example)

    keyed = dataset.scan((zero, zero, tf.constant(1, tf.int64)), assign_batch)
    batched = keyed.group_by_window(
        key_func=lambda key, _example: key,
        reduce_func=lambda _key, window: window.batch(_KEY_BASE),
        window_size_func=lambda key: key % _KEY_BASE)
    return batched.map(lambda _key, batch: batch)


def looks_batched(element_spec) -> bool:
    """True when the elements look like batches: every component has a leading
    dimension, all the same, and it is unknown (``Dataset.batch``) or shared by several
    components (features and labels batched with ``drop_remainder=True``).

    A single component with a fixed leading dimension is taken for one example."""
    specs = tf.nest.flatten(element_spec)
    if not specs or any(getattr(s, "shape", None) is None or s.shape.rank in (None, 0)
                        for s in specs):
        return False
    leading = {s.shape[0] for s in specs}
    return len(leading) == 1 and (None in leading or len(specs) > 1)
