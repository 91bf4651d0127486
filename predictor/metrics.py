"""Forecast error metrics over arrays of shape ``[n_origins, horizon]``.

Example:

>>> import numpy as np
>>> from predictor.metrics import mape, rmse
>>> round(mape(np.array([[2.0]]), np.array([[1.6]])), 6)   # |1.6 - 2| / 2, in percent
20.0
>>> round(rmse(np.array([[1.0, 2.0]]), np.array([[1.0, 4.0]])), 4)
1.4142
"""

from __future__ import annotations

import numpy as np

__all__ = ["mape", "rmse", "log_mae", "horizon_metrics"]


def mape(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean absolute percentage error, in percent (truth is a speed, so positive)."""
    return float(100.0 * np.mean(np.abs(pred - truth) / truth))


def rmse(truth: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def log_mae(truth: np.ndarray, pred: np.ndarray) -> float:
    """Mean |log(pred / truth)|: scale-free, what model selection minimises."""
    return float(np.mean(np.abs(np.log(pred / truth))))


def horizon_metrics(truth: np.ndarray, pred: np.ndarray, horizons=(1, 5, 10),
                    mean_over: int = 10) -> dict[str, dict[str, float]]:
    """MAPE and RMSE at each horizon (1-based column) and for the mean of the next
    ``mean_over`` steps, the quantity the batch allocator consumes."""
    out = {}
    for h in horizons:
        out[f"h={h}"] = {"MAPE": mape(truth[:, h - 1], pred[:, h - 1]),
                         "RMSE": rmse(truth[:, h - 1], pred[:, h - 1])}
    tm, pm = truth[:, :mean_over].mean(axis=1), pred[:, :mean_over].mean(axis=1)
    out[f"mean{mean_over}"] = {"MAPE": mape(tm, pm), "RMSE": rmse(tm, pm)}
    return out
