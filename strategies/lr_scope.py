"""An optimizer's learning rate scaled for one apply on the parameter server.

The PS commit traces the optimizer's updates of a round (`strategies.ps_state`) with the
commit's gain ``r`` (`strategies.ps_lr_scaling.commit_gain`). `scaled_update` wraps one
update so that, while it is traced inside a commit, every read of the optimizer's
learning rate gives ``lr * f``, with ``f = optimizer_gain(r, family)``: ``r`` for SGD
(with or without momentum), ``sqrt(r)`` for the adaptive optimizers (`family`). Its
decoupled weight decay, which reads the same rate, follows. Nothing of the optimizer
changes at run time: its ``learning_rate`` variable (or schedule) keeps the user's
value, in checkpoints and in concurrent steps alike.

How: for the trace only, the optimizer's class is a subclass whose learning-rate read
multiplies by ``f`` (tf_keras: the ``learning_rate`` property, which reads a schedule's
current value too; a legacy optimizer: ``_decayed_lr``, with the step's precomputed
``apply_state`` hidden so its coefficients are computed in the commit). Optimizers
that compile their update with XLA are traced without it for that apply, since a
compiled function would keep the first trace's factor.

Example (what the strategy does with each update it collects):

```python
update = scaled_update(lambda v, g: base(v, fn, (g,), kwargs, True), fn)
```
"""

import contextlib
import inspect
import sys
import threading

import tensorflow as tf
import tf_keras

from ksync.lr_scaling import optimizer_gain
from strategies.ps_lr_scaling import commit_gain

_SGD = (tf_keras.optimizers.SGD, tf_keras.optimizers.legacy.SGD)
_LEGACY = tf_keras.optimizers.legacy.Optimizer

_FACTORS = threading.local()  # id(optimizer) -> the factor of the apply being traced
_CLASSES = {}


def _keras3_optimizers():
    """Keras 3's optimizers module once a Keras 3 model loaded it (None before: ksync
    never imports Keras 3 for a tf_keras user)."""
    keras3 = sys.modules.get("keras")
    optimizers = getattr(keras3, "optimizers", None)
    return optimizers if hasattr(optimizers, "Optimizer") else None


def is_keras3(optimizer) -> bool:
    """Whether ``optimizer`` is a Keras 3 optimizer (it passes its learning rate to each
    update as an argument, `scaled_arguments`)."""
    optimizers = _keras3_optimizers()
    return optimizers is not None and isinstance(optimizer, optimizers.Optimizer)


def family(optimizer) -> str:
    """"sgd" for SGD (momentum, Nesterov), else "adam": every other optimizer scales
    by the square root (Adam-like updates are normalised by the gradient's scale; for
    an unknown one the smaller of the two rules)."""
    optimizers = _keras3_optimizers()
    sgd = _SGD + ((optimizers.SGD,) if optimizers is not None else ())
    return "sgd" if isinstance(optimizer, sgd) else "adam"


def optimizer_of(fn):
    """The optimizer whose method made the update function ``fn`` (tf_keras's and
    Keras 3's update functions are closures over the optimizer, ``self``), or None."""
    cells = _cells(fn)
    optimizer = cells["self"].cell_contents if "self" in cells else None
    if isinstance(optimizer, (tf_keras.optimizers.Optimizer, _LEGACY)) or \
            is_keras3(optimizer):
        return optimizer
    return None


def scaled_arguments(fn, rest: tuple) -> tuple:
    """The arguments after the gradient of the update ``fn``: a Keras 3 optimizer
    passes its learning rate first, which a commit that scales multiplies by its factor
    (the optimizer's variables keep the user's rate); anything else as it is."""
    optimizer = optimizer_of(fn)
    gain = commit_gain()
    if not rest or gain is None or not is_keras3(optimizer):
        return rest
    factor = optimizer_gain(gain, family(optimizer), sqrt=tf.sqrt)
    rate = tf.convert_to_tensor(rest[0])
    return (rate * tf.cast(factor, rate.dtype),) + tuple(rest[1:])


def current_learning_rate(optimizer) -> float:
    """The optimizer's learning rate now, as the user set it (a schedule's current
    value), read eagerly (on the PS holding it)."""
    if isinstance(optimizer, _LEGACY):
        return float(optimizer._decayed_lr(tf.float32))  # pylint: disable=protected-access
    return float(tf.convert_to_tensor(optimizer.learning_rate))


def check_scalable(fn, mode) -> None:
    """Raise ValueError when learning-rate scaling ``mode`` cannot reach the rate of
    the update function ``fn`` (not made by a tf_keras or Keras 3 optimizer)."""
    if optimizer_of(fn) is None:
        raise ValueError(
            f"KSyncStrategy(lr_scaling={mode!r}) scales the learning rate of a tf_keras "
            f"or Keras 3 optimizer for each update, and this step's update of a variable "
            f"was not made by one ({getattr(inspect.unwrap(fn), '__qualname__', fn)!r}). "
            f"Apply the gradients with the optimizer's apply_gradients, or pass "
            f"lr_scaling=None.")


def scaled_update(update, fn):
    """``update`` (a callable making the update ``fn`` describes, on the PS), traced
    with its optimizer's learning rate times the commit's gain's factor when it is
    traced inside a commit that scales; unchanged otherwise."""
    optimizer = optimizer_of(fn)

    def scaled(*args):
        gain = commit_gain()
        if gain is None or optimizer is None or is_keras3(optimizer):
            return update(*args)  # Keras 3: the rate is an argument (scaled_arguments)
        factor = optimizer_gain(gain, family(optimizer), sqrt=tf.sqrt)
        with _scaled(optimizer, factor, fn):
            return update(*args)
    return scaled


def _cells(fn) -> dict:
    """The closure of ``fn`` as ``{free variable name: cell}``."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    return {} if code is None else dict(zip(code.co_freevars, fn.__closure__ or ()))


@contextlib.contextmanager
def _scaled(optimizer, factor, fn):
    cls = type(optimizer)
    factors = _FACTORS.__dict__.setdefault("by_id", {})
    factors[id(optimizer)] = factor
    hidden = _hide_apply_state(fn) if isinstance(optimizer, _LEGACY) else None
    jit = optimizer.__dict__.get("jit_compile")
    object.__setattr__(optimizer, "__class__", _scaled_class(cls))
    if jit:
        object.__setattr__(optimizer, "jit_compile", False)
    try:
        yield
    finally:
        object.__setattr__(optimizer, "__class__", cls)
        if jit:
            object.__setattr__(optimizer, "jit_compile", jit)
        if hidden is not None:
            hidden[0].update(hidden[1])
        del factors[id(optimizer)]


def _hide_apply_state(fn):
    """Empty the legacy update's precomputed coefficients (computed on the worker at
    the push) for the trace, so the update computes them in the commit, through
    ``_decayed_lr``; returns ``(dict, saved)`` to restore them."""
    cells = _cells(fn)
    state = cells["apply_state"].cell_contents if "apply_state" in cells else None
    if not isinstance(state, dict):
        return None
    saved = dict(state)
    state.clear()
    return state, saved


def _scaled_class(cls):
    """``cls`` with its learning-rate read multiplied by the traced apply's factor."""
    if cls not in _CLASSES:
        def factor(self, dtype):
            # The class is swapped on the object, the factor is the tracing thread's:
            # another thread reading the rate meanwhile (telemetry, an evaluation) gets
            # the user's rate.
            f = getattr(_FACTORS, "by_id", {}).get(id(self))
            return tf.ones([], dtype) if f is None else tf.cast(f, dtype)

        if issubclass(cls, _LEGACY):
            def _decayed_lr(self, var_dtype):
                return cls._decayed_lr(self, var_dtype) * factor(self, var_dtype)
            attrs = {"_decayed_lr": _decayed_lr}
        else:
            read = inspect.getattr_static(cls, "learning_rate")

            def learning_rate(self):
                lr = tf.convert_to_tensor(read.fget(self))
                return lr * factor(self, lr.dtype)
            attrs = {"learning_rate": property(learning_rate, read.fset)}
        _CLASSES[cls] = type(cls.__name__, (cls,), dict(
            attrs, __module__=cls.__module__, __qualname__=cls.__qualname__))
    return _CLASSES[cls]
