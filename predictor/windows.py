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

import warnings

import numpy as np

__all__ = ["recent_matrix", "edge_fill", "forecast_origins", "exp_smooth", "smoothing_weights",
           "changepoint_levels", "check_jump", "CHANGEPOINT_CONTEXT"]


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


def smoothing_weights(length: int, alpha: float, last: int = 1) -> np.ndarray:
    """Matrix ``M`` of shape ``[length, last]``: ``edge_fill(recent) @ M`` is the
    exponential-smoothing level after each of the last ``last`` columns.

    The level starts at the first column; on edge-filled rows that equals starting
    at the first observed value, because repeating it leaves the level unchanged.
    One matrix product replaces a Python loop over time, which keeps forecasting
    64 workers well under a millisecond.
    """
    j = np.arange(length)[:, None]
    end = np.arange(length - last, length)[None, :]
    age = end - j
    w = np.where(age >= 0, alpha * (1.0 - alpha) ** np.maximum(age, 0), 0.0)
    w[0] = (1.0 - alpha) ** end[0]  # the initial level carries the remaining weight
    return w


def exp_smooth(recent: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential-smoothing level of each NaN-left-padded row (ignoring the padding)."""
    return edge_fill(recent) @ smoothing_weights(recent.shape[1], alpha)[:, 0]


#: history the change-point level is computed over (see ``changepoint_levels``).
CHANGEPOINT_CONTEXT = 96


def check_jump(jump: float | None, threshold: float | None) -> None:
    """Raise ``ValueError`` unless ``jump`` is None or a one-point restart above a
    change-point ``threshold`` (the settings of ``changepoint_levels``; without a
    threshold there is no change-point level, and ``jump`` goes unused)."""
    if jump is None or threshold is None:
        return
    if not jump > threshold:
        raise ValueError(f"jump must be above the change-point threshold ({threshold}) or "
                         f"None, got {jump!r}: a smaller one restarts the level at noise")


def changepoint_levels(recent: np.ndarray, alpha: float, threshold: float = 3.0,
                       run: int = 2, min_scale: float = 0.005,
                       jump: float | None = None) -> np.ndarray:
    """Exponential-smoothing level after each column, restarted at change points.

    Smoothing averages noise away but trails a regime change (a co-located job
    starting, a pause) by about ``1 / alpha`` steps. Here, when ``run`` consecutive
    points deviate from the level in the same direction by more than ``threshold``
    times the row's noise scale, the level jumps to their mean and smoothing goes on
    from there. The noise scale is the median absolute step of ``log(speed)`` over
    the row (steps are mostly noise even across regime changes), at least
    ``min_scale``. With ``jump``, one point beyond ``jump`` times the noise scale
    restarts the level at that point at once: waiting for a second point costs an
    allocation window at the wrong sizes after every large shift (a co-located job
    starting, a pause), while following a one-point spike costs one window too, so
    large moves are followed as they come (a spike is left at the next point, which
    jumps back). Works in log space, so it is scale-free. Returns ``[n, length]``.
    A Python loop over columns: callers pass the last ``CHANGEPOINT_CONTEXT``
    points (older ones weigh < 1 % for alpha >= 0.05, and a shift restarts the level).

    >>> x = np.array([[1.0, 1.02, 0.98, 1.0, 1.01, 0.5, 0.51, 0.49]])
    >>> changepoint_levels(x, alpha=0.1).round(2).tolist()
    [[1.0, 1.0, 1.0, 1.0, 1.0, 0.93, 0.5, 0.5]]
    >>> changepoint_levels(x, alpha=0.1, jump=8.0).round(2).tolist()
    [[1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5]]
    """
    x = np.log(edge_fill(recent))
    n, length = x.shape
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rows without a step: min_scale
        steps = np.abs(np.diff(np.log(recent), axis=1))
        scale = np.nan_to_num(np.nanmedian(np.where(steps > 0, steps, np.nan), axis=1))
    scale = np.maximum(scale, min_scale)
    limit = threshold * scale
    big = np.inf if jump is None else jump * scale
    level = x[:, 0].copy()
    streak = np.zeros(n)  # signed count of consecutive large deviations
    out = np.empty_like(x)
    out[:, 0] = level
    for t in range(1, length):
        dev = x[:, t] - level
        sign = np.sign(dev) * (np.abs(dev) > limit)
        streak = np.where(sign * streak > 0, streak + sign, sign)
        shift = np.abs(streak) >= run
        jumped = (np.abs(dev) > big) & ~shift
        level = level + alpha * dev
        if shift.any():
            level[shift] = x[shift, max(0, t - run + 1):t + 1].mean(axis=1)
        level[jumped] = x[jumped, t]
        streak[shift | jumped] = 0.0
        out[:, t] = level
    return np.exp(out)


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
