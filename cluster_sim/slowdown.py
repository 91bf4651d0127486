"""Injected slowdowns that scale with the samples a worker processes and burn no CPU.

`SlowdownLayer` sits first in the model. In a training step scheduled on a worker it
sleeps ``us_per_sample[worker] * batch_size`` microseconds (a `tf.data` sleep, executed
synchronously inside the step, so no input prefetching can hide it while the worker
waits at a barrier), then passes its input on unchanged. The per-worker delays are a
non-trainable weight on the parameter server: the harness changes them while training
runs to follow a scenario's time-varying speeds.

Example:

```python
with strategy.scope():
    slow = SlowdownLayer(num_workers=4)
    model = keras.Sequential([keras.layers.Input((64,)), slow, keras.layers.Dense(10)])
slow.set_speeds([1.0, 1.0, 0.5, 0.25], us_per_sample=300)
```
"""

import tf_keras as keras
import tensorflow as tf

from strategies.ps_state import sleep_us


def per_sample_delays_us(us_per_sample: float, speeds) -> list[float]:
    """Per-worker sleep per example: a worker at speed s takes 1/s of the base time; a
    worker at speed 0 (frozen by the scenario) is not slowed here, the harness pauses it."""
    speeds = [float(s) for s in speeds]
    if any(s < 0 or s != s for s in speeds):
        raise ValueError(f"worker speeds must be >= 0 (1.0 = full speed), got {speeds}")
    return [us_per_sample / s if s > 0 else 0.0 for s in speeds]


class SlowdownLayer(keras.layers.Layer):
    """Identity layer that makes each worker's training step sleep per example."""

    def __init__(self, num_workers: int, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.num_workers = num_workers

    def build(self, input_shape):
        self.delays = self.add_weight(name="us_per_sample", shape=(self.num_workers,),
                                      initializer="zeros", trainable=False)

    def set_speeds(self, speeds, us_per_sample: float) -> None:
        if len(speeds) != self.num_workers:
            raise ValueError(f"{len(speeds)} speeds for {self.num_workers} workers")
        self.delays.assign(per_sample_delays_us(us_per_sample, speeds))

    def call(self, inputs, training=None):
        if not training:
            return inputs
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        samples = tf.cast(tf.shape(inputs)[0], tf.float32)
        # A 1-D index: the delays may be a ShardedVariable under a partitioner.
        delay = tf.cast(tf.gather(self.delays, tf.reshape(worker, [1]))[0] * samples,
                        tf.int64)
        with tf.control_dependencies([sleep_us(delay)]):
            return tf.identity(inputs)

    def get_config(self):
        return dict(super().get_config(), num_workers=self.num_workers)
