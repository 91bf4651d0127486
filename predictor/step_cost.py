"""A worker's speed per sample, apart from the fixed cost every step pays.

A cluster measures a worker's speed as the samples it pushed over the time it was busy.
A step of ``b`` samples takes ``c + b / v``: a fixed cost ``c`` (the framework's dispatch,
parameter reads, the push) that does not depend on the batch, and ``b / v`` at the
worker's speed ``v`` per sample. Samples over busy time, ``b / (c + b / v)``, then moves
with the worker's own batch: give a slow worker a smaller batch and it measures slower
still. Last value settles on the balanced sizes only after an allocation or two, and a
smoothed forecast averages over its own moves (the harness lost 4 % to it on
``colocated``). Sizes in proportion to ``v`` balance the step times when the workers
share ``c``, so the allocator wants ``v``.

`StepCostEstimate` learns ``c`` from what the allocation itself does: when a worker's
mean batch moves between two windows and its speed does not, the two (batch, step time)
points give the line ``c + b / v``. The estimate is the median over the recent pairs, so
a pair whose worker also changed speed (the allocation moves sizes because speeds move)
is outvoted; until ``min_pairs`` pairs exist the cost is taken as 0 (samples over busy
time, as before).

Example:

>>> est = StepCostEstimate(min_pairs=1)
>>> # 10 steps each: c = 25 ms, then 2.5 and 5 ms a sample; profiled at 32 samples
>>> [round(v) for v in est.speeds(samples=[320, 320], busy_s=[1.05, 1.85], steps=[10, 10])]
[305, 173]
>>> # the batches move to 40 and 24: the pairs give the line, the speeds come out right
>>> [round(v) for v in est.speeds(samples=[400, 240], busy_s=[1.25, 1.45], steps=[10, 10])]
[400, 200]
>>> round(est.cost, 4)
0.025
"""

from __future__ import annotations

import collections
import math

import numpy as np

__all__ = ["StepCostEstimate"]

#: the fixed cost may take at most this share of a worker's mean step in a window; an
#: estimate beyond it is wrong for that worker (its speed moved with its batch).
MAX_COST_SHARE = 0.8


class StepCostEstimate:
    """The fixed time per step shared by the workers, learned from windows where a
    worker's batch moved; `speeds` turns a window's counters into speeds per sample.

    Args:
      min_change: the smallest relative move of a worker's mean batch between two
        windows that makes a pair (smaller moves leave the line to timing noise).
      memory: the recent pairs the median is taken over.
      min_pairs: pairs needed before the cost counts (0 until then).
    """

    def __init__(self, min_change: float = 0.15, memory: int = 32, min_pairs: int = 3):
        if not 0.0 < min_change < 1.0:
            raise ValueError(f"min_change must be in (0, 1), got {min_change!r}")
        if int(memory) != memory or memory < 1 or int(min_pairs) != min_pairs or min_pairs < 1:
            raise ValueError(f"memory and min_pairs must be integers >= 1, got {memory!r} "
                             f"and {min_pairs!r}")
        self.min_change = float(min_change)
        self.memory = int(memory)
        self.min_pairs = int(min_pairs)
        self.pairs = collections.deque(maxlen=self.memory)  # cost from one pair each
        self._last = {}  # worker -> (mean batch, mean step time) of its last window

    @property
    def cost(self) -> float:
        """The estimated fixed seconds per step (0 before ``min_pairs`` pairs)."""
        return float(np.median(self.pairs)) if len(self.pairs) >= self.min_pairs else 0.0

    def update(self, batches, step_times) -> None:
        """Add one window: each worker's mean batch and mean step time (None where it
        made no step)."""
        for w, (b, t) in enumerate(zip(batches, step_times)):
            if b is None or t is None or not (b > 0 and t > 0 and math.isfinite(t)):
                continue
            if w in self._last:
                b0, t0 = self._last[w]
                if abs(b - b0) >= self.min_change * max(b, b0):
                    per_sample = (t - t0) / (b - b0)
                    if per_sample > 0:
                        self.pairs.append(float(min(max(t0 - b0 * per_sample, 0.0),
                                                    min(t, t0))))
            self._last[w] = (float(b), float(t))

    def speeds(self, samples, busy_s, steps) -> list:
        """Each worker's samples per second of per-sample time over one window
        (``samples / (busy_s - steps * cost)``), after learning from the window; None
        where a worker made no step or measured nothing usable.

        The cost is capped per window at `MAX_COST_SHARE` of the shortest mean step, so
        a wrong estimate cannot make a time negative."""
        windows = [(s / p, t / p) if p and p > 0 and s > 0 and t > 0 else (None, None)
                   for s, t, p in zip(samples, busy_s, steps)]
        if windows:
            self.update(*zip(*windows))
        times = [t for _, t in windows if t is not None]
        cost = min(self.cost, MAX_COST_SHARE * min(times)) if times else 0.0
        return [None if t is None else float(b / (t - cost)) for b, t in windows]

    def get_state(self) -> dict:
        """The pairs and last windows as plain data (for checkpoints)."""
        return {"pairs": list(self.pairs),
                "last": {str(w): list(bt) for w, bt in self._last.items()}}

    def set_state(self, state: dict) -> None:
        """Continue from `get_state`'s output."""
        self.pairs = collections.deque(state["pairs"], maxlen=self.memory)
        self._last = {int(w): tuple(bt) for w, bt in state["last"].items()}
