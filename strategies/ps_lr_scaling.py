"""`ksync.lr_scaling` on the parameter server: each commit's gain, computed in the graph.

`PSLRScaling` keeps what `ksync.lr_scaling.LRScaling` remembers in one float64 vector
variable on the rule task (the faded noise sums, the progress, the last gain, the open
round's staleness-discounted samples and the base batch), and computes a commit's gain
from it with the same arithmetic, inside the rule's critical section: a few scalar ops
per push, no extra message but the gain itself, sent to each shard that applies the
commit. `strategies.ps_state.PSUpdateState` owns one when a run scales its learning rate;
without scaling none exists and the commit's graph is the one it always was.

The commit's updates read the gain through `commit_gain` while they are traced: the
strategy's optimizer hook (`strategies.lr_scope`) multiplies the optimizer's learning
rate by it for that apply only, at trace time, so no variable of the user's optimizer is
ever changed (nothing leaks into checkpoints, concurrent steps or schedules).

Example (eager, on this process's CPU):

```python
scaling = PSLRScaling("linear", base_batch=32, device="/device:CPU:0")
values = scaling.variable.read_value()
decision = scaling.decide(values, accepted=True, samples=64.0, staleness=0)
float(decision.gain)   # 2.0: an update of two base batches
```
"""

import collections
import contextlib
import threading

import tensorflow as tf

from ksync import lr_scaling
from ksync.noise import NOISE_MEMORY, NOISE_WINDOW

#: slots of the state vector: the faded (|G|^2, tr(S), rounds) sums, the applied gains'
#: sum, the last commit's gain, the open round's discounted samples, the base batch
#: (0: not known yet; the first accepted push's samples then).
SLOTS = ("signal", "trace", "rounds", "progress", "last_gain", "pending_scaled",
         "base_batch")
_SIGNAL, _TRACE, _ROUNDS, _PROGRESS, _LAST, _PENDING, _BASE = range(len(SLOTS))
#: the weight of the earlier sums after one more measured round (`ksync.noise.fade`).
_FADE = NOISE_MEMORY ** (1.0 / NOISE_WINDOW)

Decision = collections.namedtuple("Decision", "gain pending_scaled base_batch")

_TRACING = threading.local()


def commit_gain():
    """The gain (a float64 scalar tensor) of the commit whose updates are being traced
    in this thread; None outside a commit, or when the run does not scale."""
    return getattr(_TRACING, "gain", None)


@contextlib.contextmanager
def committing(gain):
    """Trace a commit's updates with ``gain`` (None: no scaling) as `commit_gain`."""
    outer = getattr(_TRACING, "gain", None)
    _TRACING.gain = gain
    try:
        yield
    finally:
        _TRACING.gain = outer


class PSLRScaling:
    """The learning-rate scaling state of one PS (see the module docstring).

    Args:
      mode: "adascale", "power", "linear" or "sqrt" (`ksync.lr_scaling.MODES`).
      base_batch: samples the learning rate is meant for (one worker's batch); None:
        the first accepted push's samples.
      device: the rule task.
      factor: the first rule's gain factor (`ksync.Rule.lr_factor`).
    """

    def __init__(self, mode, base_batch, device, factor: float = 1.0):
        lr_scaling.check(mode)
        if mode is None:
            raise ValueError("PSLRScaling needs a scaling mode; without one the PS keeps "
                             "no scaling state.")
        self.mode = mode
        initial = [0.0] * len(SLOTS)
        initial[_LAST] = 1.0
        initial[_BASE] = float(base_batch or 0.0)
        with tf.init_scope(), tf.device(device):
            self.variable = tf.Variable(tf.constant(initial, tf.float64), trainable=False,
                                        name="ksync/lr_scaling")
            # The rule's gain factor (`ksync.Rule.lr_factor`), set with the rule. Not in
            # checkpoints: the rule restored with the controller sets it again, and
            # checkpoints written before the factor existed restore unchanged.
            self.factor = tf.Variable(tf.constant(float(factor), tf.float64), trainable=False,
                                      name="ksync/lr_factor")

    def set_factor(self, factor: float) -> None:
        """Set the rule's gain factor (`ksync.Rule.lr_factor`) for the later commits."""
        self.factor.assign(tf.constant(float(factor), tf.float64))

    def decide(self, values, accepted, samples, staleness) -> Decision:
        """The gain a commit made by this push would apply, the open round's discounted
        samples with this push, and the base batch (``values``: the state read in the
        lock; ``accepted``: whether the push joins the round)."""
        accepted = tf.convert_to_tensor(accepted)
        samples = tf.cast(samples, tf.float64)
        base = tf.where(values[_BASE] > 0, values[_BASE],
                        tf.where(accepted, samples, tf.constant(0.0, tf.float64)))
        pending = values[_PENDING] + tf.where(accepted, samples * self._stale_weight(staleness),
                                              tf.constant(0.0, tf.float64))
        return Decision(self._gain(values, pending, base), pending, base)

    def _stale_weight(self, staleness):
        """`ksync.lr_scaling.stale_weight` of a push's staleness (an integer tensor)."""
        stale = tf.cast(staleness, tf.int64)
        if self.mode == "power":
            return tf.where(stale <= 0, tf.constant(1.0, tf.float64),
                            tf.constant(0.0, tf.float64))
        return 1.0 / (1.0 + tf.cast(tf.maximum(stale, 0), tf.float64))

    def pending(self, values) -> Decision:
        """The decision for the open round as it stands (a round committed because K
        was lowered)."""
        return Decision(self._gain(values, values[_PENDING], values[_BASE]),
                        values[_PENDING], values[_BASE])

    def _gain(self, values, pending, base):
        """`ksync.lr_scaling.LRScaling.gain` of ``pending / base`` base batches, times
        the rule's factor (read where the caller reads ``values``: in the push's lock)."""
        return self._scale_gain(values, pending, base) * self.factor.read_value()

    def _scale_gain(self, values, pending, base):
        """The mode's gain of ``pending / base`` base batches, before the rule's factor."""
        safe = tf.where(base > 0, base, tf.constant(1.0, tf.float64))
        s = tf.maximum(tf.math.divide_no_nan(pending, base), 1.0)
        if self.mode == "linear":
            return s
        if self.mode == "sqrt":
            return tf.sqrt(s)
        if self.mode == "power":
            return tf.pow(s, tf.constant(lr_scaling.POWER_EXPONENT, tf.float64))
        signal, trace = values[_SIGNAL], values[_TRACE]
        b = tf.math.divide_no_nan(trace, signal) / safe
        # No noise measured (trace <= 0): 1; no signal left: S (`noise_scale_of`).
        full = tf.where(trace <= 0, tf.constant(1.0, tf.float64),
                        tf.where(signal <= 0, s, (1.0 + b) / (1.0 + b / s)))
        warmup = tf.minimum(tf.constant(1.0, tf.float64),
                            values[_ROUNDS] / lr_scaling.WARMUP_ROUNDS)
        return 1.0 + warmup * (full - 1.0)

    def record(self, values, decision: Decision, commit, estimate=None, valid=None):
        """The op storing a push's outcome: at a commit its gain counted, the round's
        samples cleared and (``valid``) the round's ``(|G|^2, tr(S))`` ``estimate``
        faded into the sums, which later commits' gains use."""
        zero = tf.constant(0.0, tf.float64)
        sums = values[:_PROGRESS]
        if estimate is not None:
            faded = _FADE * sums + tf.concat(
                [tf.cast(estimate, tf.float64), tf.ones([1], tf.float64)], 0)
            sums = tf.where(valid, faded, sums)
        gain = decision.gain
        tail = tf.stack([values[_PROGRESS] + tf.where(commit, gain, zero),
                         tf.where(commit, gain, values[_LAST]),
                         tf.where(commit, zero, decision.pending_scaled),
                         decision.base_batch])
        return self.variable.assign(tf.concat([sums, tail], 0))



def describe(values: dict) -> dict:
    """The telemetry of a state vector read as ``{slot: value}``: the last gain, the
    progress in base steps, the rule's gain factor, the base batch and the faded noise
    scale the gains use."""
    noise = lr_scaling.noise_scale_of(values["signal"], values["trace"])
    return {"gain": values["last_gain"], "progress": values["progress"],
            "factor": values.get("factor", 1.0),   # the rule's (`ksync.Rule.lr_factor`)
            "base_batch": values["base_batch"] or None,
            "noise_scale": None if noise is None or noise == float("inf") else noise,
            "warmup": min(1.0, values["rounds"] / lr_scaling.WARMUP_ROUNDS),
            "pending_scaled": values["pending_scaled"],
            "sums": (values["signal"], values["trace"], values["rounds"])}
