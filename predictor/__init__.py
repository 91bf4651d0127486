"""Worker speed forecasting and per-worker batch allocation for ksync.

``BatchAllocator`` and the numpy baselines import without TensorFlow; the GRU
forecasters (``GRUSmoothingForecaster``, ``GRUOnly``) load tf_keras on first use.

Example:

>>> import predictor
>>> predictor.BatchAllocator(global_batch=64, min_batch=4).allocate([2.0, 1.0, 1.0])
[32, 16, 16]
"""

from importlib import import_module

from .allocator import AllocatorFallbackWarning, BatchAllocator
from .checks import InvalidSpeedWarning
from .persist import ForecasterFileError

__all__ = [
    "BatchAllocator", "AllocatorFallbackWarning", "InvalidSpeedWarning", "ForecasterFileError",
    "Forecaster", "NotFittedError", "load",
    "LastValue", "MovingAverage", "ExponentialSmoothing", "LagRegressor",
    "GRUSmoothingForecaster", "GRUOnly", "OnlineForecaster",
]

# Attribute -> module; resolved on first access so `import predictor` stays TF-free.
_LAZY = {
    "Forecaster": "base", "NotFittedError": "base", "load": "loading",
    "LastValue": "baselines", "MovingAverage": "baselines",
    "ExponentialSmoothing": "baselines", "LagRegressor": "baselines",
    "GRUSmoothingForecaster": "gru", "GRUOnly": "gru",
    "OnlineForecaster": "online",
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'predictor' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
