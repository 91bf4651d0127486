"""Turning speed series into fixed-size arrays: recent-history matrices and forecast origins.

Example:

>>> import numpy as np
>>> from predictor.windows import recent_matrix, forecast_origins
>>> recent_matrix([np.array([1.0, 2.0]), np.array([3.0])], 3).tolist()
[[nan, 1.0, 2.0], [nan, nan, 3.0]]
>>> hist, truth, ids = forecast_origins([np.arange(1.0, 7.0)], min_history=3, horizon=2)
>>> truth.tolist(), ids.tolist()
([[4.0, 5.0], [5.0, 6.0]], [[0, 3], [0, 4]])
"""

from __future__ import annotations

import numpy as np

__all__ = ["recent_matrix", "edge_fill", "forecast_origins", "exp_smooth"]


def recent_matrix(histories, length: int) -> np.ndarray:
    """Last ``length`` points of each history, right-aligned, NaN-padded on the left."""
    out = np.full((len(histories), length), np.nan)
    for i, h in enumerate(histories):
        tail = h[-length:]
        out[i, length - len(tail):] = tail
    return out


def edge_fill(recent: np.ndarray) -> np.ndarray:
    """Replace the left NaN padding of each row by the row's first observed value."""
    first = np.argmax(~np.isnan(recent), axis=1)
    firsts = recent[np.arange(recent.shape[0]), first]
    return np.where(np.isnan(recent), firsts[:, None], recent)


def exp_smooth(recent: np.ndarray, alpha: float, return_path: bool = False):
    """Exponential-smoothing level of each NaN-left-padded row.

    The level starts at the first observed value and ignores the padding.
    With ``return_path`` the level after every column is returned too.
    """
    level = np.full(recent.shape[0], np.nan)
    path = np.empty_like(recent) if return_path else None
    for j in range(recent.shape[1]):
        x = recent[:, j]
        stepped = level + alpha * (x - level)
        level = np.where(np.isnan(level), x, np.where(np.isnan(x), level, stepped))
        if return_path:
            path[:, j] = level
    return (level, path) if return_path else level


def forecast_origins(series, min_history: int, horizon: int, stride: int = 1,
                     max_history: int | None = None, max_origins: int | None = None,
                     seed: int = 0):
    """Every (history, next ``horizon`` values) pair a forecaster can be scored on.

    Returns ``(histories, truth, ids)``: histories are views (no copies) holding at
    most ``max_history`` points, ``truth`` is ``[n_origins, horizon]`` and ``ids``
    ``[n_origins, 2]`` holds (series index, origin time = length of full history).
    ``max_origins`` keeps a fixed-seed random subset, for cheap model selection.
    """
    hist, truth, ids = [], [], []
    for s_idx, s in enumerate(series):
        for t in range(min_history, len(s) - horizon + 1, stride):
            lo = 0 if max_history is None else max(0, t - max_history)
            hist.append(s[lo:t])
            truth.append(s[t:t + horizon])
            ids.append((s_idx, t))
    if max_origins is not None and len(hist) > max_origins:
        keep = np.sort(np.random.default_rng(seed).choice(len(hist), max_origins, replace=False))
        hist = [hist[i] for i in keep]
        truth = [truth[i] for i in keep]
        ids = [ids[i] for i in keep]
    return hist, np.array(truth, dtype=np.float64).reshape(-1, horizon), \
        np.array(ids, dtype=np.int64).reshape(-1, 2)
