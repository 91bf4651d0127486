"""Allocation regret: a forecaster judged by the round times of the allocations it makes.

The replay mirrors the product: a ``predictor.schedule.AllocationSchedule`` with a
``predictor.BatchAllocator`` starts with equal sizes, then after every allocation
window it ``observe``s the speeds measured over that window and sets the sizes
for the next one (mode ``"forecast"``: from the forecaster's prediction).

A window spans ``every`` points of the speed series (e.g. R = 20 updates = 2 points
of a PAI trace sampled every 10 iterations); a worker's speed over the window is
its samples per unit time there, the harmonic mean of its points. The window's
synchronous round time is the slowest worker's ``batch / speed``. The oracle knows
the true speeds of the coming window and allocates in proportion to them (same
bounds, no hysteresis), which is optimal up to integer rounding. Regret of a
window = forecaster's round time / oracle's - 1; ``mean_regret`` averages it over
all windows after the profiling one, ``time_regret`` is total time over total
oracle time - 1 (the lost throughput).

Example:

>>> import numpy as np
>>> from predictor.baselines import LastValue
>>> speeds = np.array([[1.0] * 6, [1.0, 1.0, 0.5, 0.5, 0.5, 0.5]])
>>> r = allocation_regret(speeds, LastValue(), global_batch=32, min_batch=1)
>>> round(r["mean_regret"], 3), r["windows"]    # one window late to see the change
(0.091, 5)
"""

from __future__ import annotations

import numpy as np

from .allocator import BatchAllocator
from .schedule import AllocationSchedule

__all__ = ["window_speeds", "round_times", "allocation_regret"]


def window_speeds(speeds: np.ndarray, every: int) -> np.ndarray:
    """``[n, points] -> [n, points // every]``: samples per unit time in each window."""
    speeds = np.asarray(speeds, dtype=np.float64)
    n_win = speeds.shape[1] // every
    if n_win < 2:
        raise ValueError(f"need at least two allocation windows: {speeds.shape[1]} points "
                         f"with every={every}")
    cut = speeds[:, :n_win * every].reshape(speeds.shape[0], n_win, every)
    return every / np.sum(1.0 / cut, axis=2)


def round_times(sizes: np.ndarray, speeds: np.ndarray) -> np.ndarray:
    """Synchronous round time per window: ``max_i sizes[i, w] / speeds[i, w]``."""
    return np.max(np.asarray(sizes) / speeds, axis=0)


def allocation_regret(speeds, forecaster, measured=None, every: int = 1,
                      global_batch: int | None = None, min_batch: int = 4,
                      hysteresis: float = 0.05, horizon: int = 1,
                      mode: str = "forecast", step_cost: float = 0.0,
                      estimate_cost: bool = True) -> dict:
    """Replay allocation over true ``speeds`` (``[workers, points]``) with ``forecaster``.

    ``measured`` (same shape; default: ``speeds``) is what the schedule observes,
    e.g. the true speeds with timing noise; round times use the true speeds.

    ``step_cost`` is a fixed time per step on top of ``size / speed`` (a framework's
    cost; in the speeds' time unit). With it, what the schedule observes is what a
    cluster measures, samples over busy time, ``size / (step_cost + size / speed)``
    times ``measured / speeds`` (the noise): a worker's measured speed then moves when
    its own batch does, as in the harness. The schedule sees those counters through
    `AllocationSchedule.observe_window`, which takes the cost out again as the product
    does (``estimate_cost=False``: it allocates on samples over busy time).

    ``global_batch`` defaults to 32 per worker and ``min_batch`` to 4, as in the
    harness. The forecaster's ``update`` buffers are reset first (and left filled).
    Returns ``mean_regret``, ``time_regret`` (fractions, not percent), ``windows``
    and the per-window ``regret`` array.
    """
    v = window_speeds(speeds, every)
    seen = v if measured is None else window_speeds(measured, every)
    n, n_win = v.shape
    global_batch = global_batch or 32 * n
    schedule = AllocationSchedule(BatchAllocator(global_batch, min_batch, hysteresis=hysteresis),
                                  forecaster, mode=mode, horizon=horizon,
                                  step_cost="estimate" if estimate_cost else None)
    if forecaster is not None:
        forecaster.reset_buffers()
    oracle = BatchAllocator(global_batch, min_batch, hysteresis=0.0)
    sizes = np.empty((n, n_win))
    best = np.empty((n, n_win))
    current = schedule.initial(n)
    for w in range(n_win):
        sizes[:, w] = current
        best[:, w] = oracle.allocate(v[:, w])
        # One step a window: the estimate works on mean steps, so the count cancels.
        busy = (step_cost + sizes[:, w] / v[:, w]) * v[:, w] / seen[:, w]
        new = schedule.observe_window(w + 1, samples=sizes[:, w], busy_s=busy,
                                      steps=np.ones(n))
        current = new if new is not None else current
    # Window 0 profiles; the fixed cost is the same for every allocation.
    t, t_best = (round_times(x, v)[1:] + step_cost for x in (sizes, best))
    regret = t / t_best - 1.0
    return {"mean_regret": float(np.mean(regret)),
            "time_regret": float(t.sum() / t_best.sum() - 1.0),
            "windows": int(regret.size), "regret": regret}
