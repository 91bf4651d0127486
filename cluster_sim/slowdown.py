"""Injected slowdowns that scale with the samples a worker processes and burn no CPU.

The delay is a `tf.data` sleep inside the worker's own input pipeline, sized from the
worker index TensorFlow gives the ``dataset_fn`` on each worker, so one ``dataset_fn``
slows each worker by its own factor. Nothing is prefetched after the sleep: the step
waits for it, as it would wait for a slower machine.

Example:

```python
dataset_fn = slowed_dataset_fn(data.dataset_fn(32), us_per_sample=500,
                               speeds=[1.0, 1.0, 0.5, 0.25], batch_size=32)
```
"""

def delays_us(us_per_sample: float, speeds, batch_size: int) -> list[int]:
    """Per-worker sleep per batch: a worker at speed s takes 1/s of the base time."""
    for s in speeds:
        if not s > 0:
            raise ValueError(f"worker speeds must be > 0 (1.0 = full speed), got {list(speeds)}")
    return [int(round(us_per_sample * batch_size / s)) for s in speeds]


def slowed_dataset_fn(dataset_fn, us_per_sample: float, speeds, batch_size: int):
    """Wrap a batched ``dataset_fn`` so worker ``i`` sleeps per batch as if at ``speeds[i]``."""
    per_worker = delays_us(us_per_sample, speeds, batch_size)

    def slowed(input_context=None):
        import tensorflow as tf
        from tensorflow.python.data.experimental.ops import testing
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        delay = tf.gather(tf.constant(per_worker, tf.int64), worker)
        return dataset_fn(input_context).apply(testing.sleep(delay))

    return slowed
