"""Per-worker batch sizes proportional to forecast speed.

Pure numpy on purpose: the allocator runs inside the parameter-server loop and
must stay importable (and cheap) without loading TensorFlow.

Example:

>>> from predictor.allocator import BatchAllocator
>>> alloc = BatchAllocator(global_batch=256, min_batch=8, max_batch=128, hysteresis=0.05)
>>> alloc.allocate([1.0, 1.0, 2.0])
[64, 64, 128]
>>> alloc.allocate([1.01, 0.99, 2.0])   # small forecast noise: sizes do not churn
[64, 64, 128]
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["BatchAllocator", "AllocatorFallbackWarning"]


class AllocatorFallbackWarning(UserWarning):
    """Speeds given as numbers were not speeds (NaN, inf, zero or negative): equal sizes
    were used. A bug of the caller or of its forecaster, so it is said; a worker with no
    measurement yet is an expected condition (`BatchAllocator.equal_for_now`, quiet)."""


def _water_fill(speeds: np.ndarray, total: float, lo: float, hi: float) -> np.ndarray:
    """Real-valued sizes ``clip(c * speeds, lo, hi)`` with ``c`` chosen so they sum to ``total``.

    ``f(c) = sum(clip(c * s, lo, hi))`` is continuous, non-decreasing and linear
    between the breakpoints ``lo / s_i`` and ``hi / s_i``, so ``c`` is found
    exactly by locating the segment that contains ``total`` and interpolating.
    """
    breaks = np.unique(np.concatenate([lo / speeds, hi / speeds]))
    sums = np.clip(np.outer(breaks, speeds), lo, hi).sum(axis=1)
    k = int(np.searchsorted(sums, total))
    if k == 0:
        c = breaks[0]
    elif k == breaks.size:
        c = breaks[-1]
    else:
        c0, c1, f0, f1 = breaks[k - 1], breaks[k], sums[k - 1], sums[k]
        c = c1 if f1 == f0 else c0 + (total - f0) * (c1 - c0) / (f1 - f0)
    return np.clip(c * speeds, lo, hi)


def _round_preserving_sum(target: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Largest-remainder rounding: integers within ``[lo, hi]`` that sum to ``total``."""
    sizes = np.clip(np.floor(target + 1e-9), lo, hi).astype(np.int64)
    short = total - int(sizes.sum())
    frac = target - sizes
    # Hand the missing units to the largest remainders first; a worker already at
    # a bound is skipped so bounds hold even with floating-point slop in ``target``.
    step = 1 if short > 0 else -1
    order = np.argsort(-frac if short > 0 else frac, kind="stable")
    while short != 0:
        moved = False
        for i in order:
            if short == 0:
                break
            if lo <= sizes[i] + step <= hi:
                sizes[i] += step
                short -= step
                moved = True
        if not moved:  # pragma: no cover - excluded by the feasibility check
            raise RuntimeError("cannot round batch sizes within bounds")
    return sizes


def _usable(speeds: np.ndarray) -> bool:
    """False, with an `AllocatorFallbackWarning` (equal sizes follow), for NaN, inf,
    zero or negative speeds: numbers that cannot be a measured speed."""
    usable = np.isfinite(speeds) & (speeds > 0)
    if usable.all():
        return True
    bad = np.flatnonzero(~usable).tolist()
    # The workers, not their values, in the text: Python's default filter then shows it
    # once per set of workers instead of in every window of a long pause.
    warnings.warn(f"unusable speeds (NaN, inf, zero or negative) for workers {bad}: "
                  "falling back to equal batch sizes", AllocatorFallbackWarning, stacklevel=3)
    return False


class BatchAllocator:
    """Split a fixed global batch across workers in proportion to forecast speed.

    Args:
        global_batch: Total samples per step, ``B``; the sizes always sum to it.
        min_batch: Smallest per-worker batch (inclusive).
        max_batch: Largest per-worker batch (inclusive); ``None`` means ``global_batch``.
        hysteresis: Relative change of the ideal (real-valued) size, per worker,
            below which the previous allocation is kept, so forecast noise does not
            churn batch sizes (and recompile input pipelines) every window.

    Example:

    >>> alloc = BatchAllocator(global_batch=100, min_batch=10, max_batch=60)
    >>> alloc.allocate([3.0, 1.0])
    [60, 40]
    """

    def __init__(self, global_batch: int, min_batch: int = 1, max_batch: int | None = None,
                 hysteresis: float = 0.05):
        if max_batch is None:
            max_batch = global_batch
        for name, value in (("global_batch", global_batch), ("min_batch", min_batch),
                            ("max_batch", max_batch)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if min_batch > max_batch:
            raise ValueError(f"min_batch ({min_batch}) > max_batch ({max_batch})")
        if not (0.0 <= hysteresis < 1.0):
            raise ValueError(f"hysteresis must be in [0, 1), got {hysteresis!r}")
        self.global_batch = int(global_batch)
        self.min_batch = int(min_batch)
        self.max_batch = int(max_batch)
        self.hysteresis = float(hysteresis)
        self._anchor: np.ndarray | None = None  # ideal sizes when the allocation last changed
        self._current: list[int] | None = None

    def check_feasible(self, n_workers: int) -> None:
        """Raise ``ValueError`` if ``n_workers`` cannot share the batch within bounds."""
        if n_workers < 1:
            raise ValueError("need at least one worker")
        if n_workers * self.min_batch > self.global_batch:
            raise ValueError(
                f"infeasible: {n_workers} workers x min_batch {self.min_batch} = "
                f"{n_workers * self.min_batch} > global_batch {self.global_batch}; "
                "lower min_batch or raise global_batch")
        if n_workers * self.max_batch < self.global_batch:
            raise ValueError(
                f"infeasible: {n_workers} workers x max_batch {self.max_batch} = "
                f"{n_workers * self.max_batch} < global_batch {self.global_batch}; "
                "raise max_batch or lower global_batch")

    def ideal_sizes(self, speeds) -> np.ndarray:
        """Real-valued proportional sizes within bounds summing to ``global_batch``."""
        s = np.asarray(speeds, dtype=np.float64).ravel()
        self.check_feasible(s.size)
        return _water_fill(s, float(self.global_batch), float(self.min_batch), float(self.max_batch))

    def equal_sizes(self, n_workers: int) -> list[int]:
        """Sizes as equal as integers allow (the first ``B mod n`` workers get one more)."""
        self.check_feasible(n_workers)
        base, extra = divmod(self.global_batch, n_workers)
        return [base + (1 if i < extra else 0) for i in range(n_workers)]

    def equal_for_now(self, n_workers: int) -> list[int]:
        """Equal sizes, and the next `allocate` applies at once (no hysteresis against
        an allocation made before): the sizes while some worker has no speed.

        >>> a = BatchAllocator(8, min_batch=1)
        >>> a.allocate([1.0, 3.0]), a.equal_for_now(2), a.allocate([1.0, 3.05])
        ([2, 6], [4, 4], [2, 6])
        """
        self._anchor = None
        self._current = self.equal_sizes(n_workers)
        return list(self._current)

    def allocate(self, speeds) -> list[int]:
        """Return per-worker batch sizes for forecast ``speeds`` (higher = faster)."""
        s = np.asarray(speeds, dtype=np.float64).ravel()
        self.check_feasible(s.size)
        if not _usable(s):
            return self.equal_for_now(s.size)
        target = _water_fill(s, float(self.global_batch), float(self.min_batch), float(self.max_batch))
        if self._keeps_previous(target):
            return list(self._current)
        sizes = _round_preserving_sum(target, self.global_batch, self.min_batch, self.max_batch)
        self._anchor, self._current = target, [int(b) for b in sizes]
        return list(self._current)

    def deadline_sizes(self, speeds) -> list[int]:
        """Sizes for a deadline: each worker gets the samples it finishes in the time
        the fastest takes for an equal share (at least ``min_batch``, at most that share). Unlike `allocate`, the global batch shrinks instead of moving to the
        faster workers (the deadline rule of Anytime Minibatch / Non-blocking SGD).

        >>> BatchAllocator(global_batch=96, min_batch=4).deadline_sizes([2.0, 2.0, 1.0])
        [32, 32, 16]
        """
        s = np.asarray(speeds, dtype=np.float64).ravel()
        equal = np.array(self.equal_sizes(s.size))
        if not _usable(s):
            return equal.tolist()
        deadline_s = np.min(equal / s)  # the fastest worker's time for its share
        sizes = np.floor(s * deadline_s + 1e-9)
        return np.clip(sizes, self.min_batch, equal).astype(int).tolist()

    def _keeps_previous(self, target: np.ndarray) -> bool:
        if self._anchor is None or self._anchor.shape != target.shape or self.hysteresis == 0:
            return False
        change = np.abs(target - self._anchor) / self._anchor
        return bool(np.max(change) < self.hysteresis)

    def get_state(self) -> dict:
        """The hysteresis state as plain data (for checkpoints).

        >>> a = BatchAllocator(8, min_batch=1)
        >>> sizes = a.allocate([1.0, 3.0])
        >>> b = BatchAllocator(8, min_batch=1)
        >>> b.set_state(a.get_state()); b.get_state() == a.get_state()
        True
        """
        return {"anchor": None if self._anchor is None else [float(x) for x in self._anchor],
                "current": None if self._current is None else list(self._current)}

    def set_state(self, state: dict) -> None:
        """Continue from `get_state`'s output."""
        self._anchor = None if state["anchor"] is None else np.array(state["anchor"])
        self._current = None if state["current"] is None else list(state["current"])
