"""Input validation shared by all forecasters.

Speeds are positive by definition; a NaN, inf, zero or negative value is a
telemetry glitch. Such values are replaced by the worker's previous valid value
(carried forward) with a warning rather than propagated into forecasts.

Example:

>>> import warnings
>>> from predictor.checks import clean_series
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")
...     clean_series([2.0, float("nan"), 3.0]).tolist()
[2.0, 2.0, 3.0]
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["InvalidSpeedWarning", "clean_series", "clean_histories"]


class InvalidSpeedWarning(UserWarning):
    """NaN, inf, zero or negative speeds were replaced by the previous valid value."""


def clean_series(values, name: str = "series") -> np.ndarray:
    """Return ``values`` as a 1-D float64 array with invalid entries carried forward.

    Leading invalid entries take the first valid value. Raises ``ValueError`` if
    the input is empty, not 1-D, or has no valid value at all.
    """
    x = np.array(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(x) | (x <= 0)
    if not bad.any():
        return x
    if bad.all():
        raise ValueError(f"{name} has no valid (finite, positive) speed")
    warnings.warn(f"{name}: {int(bad.sum())} NaN/inf/zero/negative value(s) replaced by the "
                  "previous valid value", InvalidSpeedWarning, stacklevel=3)
    idx = np.where(bad, 0, np.arange(x.size))
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(~bad))
    idx[:first] = first
    return x[idx]


def clean_histories(histories, name: str = "histories") -> list[np.ndarray]:
    """Accept a 1-D array (one series), a 2-D array (rows) or a list of 1-D arrays."""
    if isinstance(histories, np.ndarray) and histories.ndim == 1:
        histories = [histories]
    elif isinstance(histories, np.ndarray) and histories.ndim == 2:
        x = histories.astype(np.float64, copy=False)
        if x.shape[0] and x.shape[1] and np.all(np.isfinite(x)) and np.all(x > 0):
            return list(x)  # fast path for the common, clean, one-row-per-worker case
        histories = list(histories)
    elif len(histories) and np.ndim(histories[0]) == 0:
        histories = [histories]
    out = [clean_series(h, f"{name}[{i}]") for i, h in enumerate(histories)]
    if not out:
        raise ValueError(f"{name} is empty: pass at least one series")
    return out
