"""Batches whose size a variable sets at run time, inside a worker's input pipeline.

`dynamic_batches` groups consecutive examples of an unbatched dataset into batches whose
size it reads from ``size_variable``, so a size assigned while training runs applies a
few batches later. Examples are never dropped or repeated: concatenating the batches
gives the input stream back in order, the last batch holding what is left at the end.

Example:

```python
size = tf.Variable(4, dtype=tf.int64)
ds = dynamic_batches(tf.data.Dataset.range(10), size)   # [0..3], [4..7], [8, 9]
```
"""

import tensorflow as tf

#: Examples taken from the input at a time. The pipeline does its work per chunk, not
#: per example (a per-example `scan` cost ten times what `Dataset.batch` costs); the
#: size is read once per chunk, so a new size applies within ``CHUNK`` examples. Each
#: chunk pays for a call of the `scan` function (a third fewer ops in it measured no
#: cheaper): in CPU per batch of 32 against `Dataset.batch(32)`, chunks of 32 cost
#: 1.65x, of 128 about 1.2x, of 256 about 1.1x for twice the delay.
CHUNK = 128


def dynamic_batches(dataset: tf.data.Dataset, size_variable,
                    chunk: int = CHUNK) -> tf.data.Dataset:
    """Batch ``dataset`` (single examples) with sizes read from ``size_variable``.

    The input arrives in chunks of ``chunk`` examples (`Dataset.batch`); each chunk is
    appended to what the previous batches left over, as many batches of the current
    size as that holds leave as one ``[k, size, ...]`` element, and `unbatch` splits
    them. A last element marked as the end flushes what is left as a shorter batch.
    """
    spec = dataset.element_spec
    empty = tf.nest.map_structure(
        lambda s: tf.zeros([0] + [d or 0 for d in s.shape.as_list()], s.dtype), spec)
    marked = tf.data.Dataset.zip((dataset.batch(chunk),
                                  tf.data.Dataset.from_tensors(False).repeat()))
    marked = marked.concatenate(tf.data.Dataset.from_tensors((empty, True)))

    @tf.autograph.experimental.do_not_convert
    def split(left, item):
        part, last = item
        buffered = tf.nest.map_structure(_append, left, part, spec)
        count = _length(buffered)
        size = tf.clip_by_value(tf.cast(size_variable.read_value(), tf.int64), 1, 1 << 40)
        size = tf.where(last, tf.maximum(count, 1), size)
        used = count // size * size
        batches = tf.nest.map_structure(
            lambda b: tf.reshape(b[:used], tf.concat(
                [[count // size, size], tf.shape(b, out_type=tf.int64)[1:]], 0)),
            buffered)
        return tf.nest.map_structure(lambda b: b[used:], buffered), batches

    return marked.scan(empty, split).unbatch()


def _length(tensors) -> tf.Tensor:
    return tf.shape(tf.nest.flatten(tensors)[0], out_type=tf.int64)[0]


def _append(left, part, spec):
    if spec.shape.is_fully_defined():
        return tf.concat([left, part], 0)
    # Skips the concatenation when either side is empty, so that an example dimension
    # the spec leaves unknown (an empty placeholder has 0 there) never has to match.
    return tf.cond(tf.shape(part)[0] == 0, lambda: left,
                   lambda: tf.cond(tf.shape(left)[0] == 0, lambda: part,
                                   lambda: tf.concat([left, part], 0)))


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
