"""Injected slowdowns that scale with the samples a worker processes and burn no CPU.

The delay is a `tf.data` sleep on every example of the worker's own input pipeline,
sized from the worker index TensorFlow gives the ``dataset_fn`` on each worker, so one
``dataset_fn`` slows each worker by its own factor, and a worker given a smaller batch
waits proportionally less. Nothing is prefetched after the sleep: the step waits for
it, as it would wait for a slower machine.

Example:

```python
dataset_fn = slowed_dataset_fn(data.dataset_fn(None), us_per_sample=500,
                               speeds=[1.0, 1.0, 0.5, 0.25], batch_size=32)
```
"""


def per_sample_delays_us(us_per_sample: float, speeds) -> list[int]:
    """Per-worker sleep per example: a worker at speed s takes 1/s of the base time."""
    speeds = list(speeds)
    for s in speeds:
        if not s > 0:
            raise ValueError(f"worker speeds must be > 0 (1.0 = full speed), got {speeds}")
    return [int(round(us_per_sample / s)) for s in speeds]


def slowed_dataset_fn(dataset_fn, us_per_sample: float, speeds, batch_size: int | None = None):
    """Wrap an unbatched ``dataset_fn`` so worker ``i`` sleeps per example as if running
    at ``speeds[i]``; batch after the sleep when ``batch_size`` is given (leave it None
    when the strategy batches, as with batch allocation)."""
    per_worker = per_sample_delays_us(us_per_sample, speeds)

    def slowed(input_context=None):
        import tensorflow as tf
        from tensorflow.python.data.experimental.ops import testing
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        delay = tf.gather(tf.constant(per_worker, tf.int64), worker)
        dataset = dataset_fn(input_context).apply(testing.sleep(delay))
        if batch_size is not None:
            dataset = dataset.batch(batch_size, drop_remainder=True)
        options = tf.data.Options()
        # An injected prefetch would overlap the sleep with the step and hide it.
        options.experimental_optimization.inject_prefetch = False
        return dataset.with_options(options)

    return slowed
