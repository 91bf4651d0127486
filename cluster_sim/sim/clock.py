"""The simulated clock: a heap of timed events, popped in time order.

Ties are broken by insertion order (a sequence number), never by comparing payloads,
so two runs with the same seed pop the same events in the same order.

Example:

>>> clock = EventClock()
>>> clock.schedule(2.0, "b"); clock.schedule(1.0, "a"); clock.schedule(2.0, "c")
>>> [clock.pop() for _ in range(3)], clock.now
([(1.0, 'a'), (2.0, 'b'), (2.0, 'c')], 2.0)
"""

import heapq
import itertools


class EventClock:
    """Simulated time and the events still to happen."""

    def __init__(self):
        self.now = 0.0
        self._heap = []
        self._seq = itertools.count()

    def schedule(self, at: float, payload) -> None:
        if at < self.now:
            raise ValueError(f"cannot schedule an event at {at} before now ({self.now})")
        heapq.heappush(self._heap, (at, next(self._seq), payload))

    def pop(self):
        """The next event as ``(time, payload)``; the clock moves to its time."""
        at, _, payload = heapq.heappop(self._heap)
        self.now = at
        return at, payload

    def next_at(self) -> float:
        """The time of the next event (the clock must have one)."""
        return self._heap[0][0]

    def advance(self, seconds: float) -> None:
        """Let time pass with nothing happening (e.g. a fixed overhead)."""
        if seconds < 0:
            raise ValueError(f"time cannot go backwards ({seconds} s)")
        self.now += seconds

    def __len__(self):
        return len(self._heap)

    def __bool__(self):
        return bool(self._heap)
