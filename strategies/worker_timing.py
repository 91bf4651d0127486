"""Each worker's step times as the chief sees them: the iteration time policies and the
batch allocator read.

`WorkerTiming` records when each worker took a step from the closure queue and when it
ended (input, compute and push: slowdowns included), and answers what the coordinator
reports: busy seconds and steps per worker, the median of each worker's last
`ksync.policies.RECENT_STEPS` steps, and how long each running step has run. Pure
Python, no clock of its own (callers pass the time) and no lock: each worker's entry is
written only by that worker's thread, and readers copy before they iterate.

>>> class Step: pass
>>> timing = WorkerTiming(num_workers=2)
>>> step = Step()
>>> timing.start(0, now=10.0, closure=step)
>>> timing.in_flight_s(now=10.5)
[0.5, None]
>>> timing.end(0, now=11.0)[0], timing.busy_s, timing.steps, timing.usual()
(10.0, [1.0, 0.0], [1, 0], [1.0, None])
"""

import collections
import statistics
import weakref

from ksync.policies import RECENT_STEPS


class WorkerTiming:
    """Steps and their times, per worker (see the module docstring)."""

    def __init__(self, num_workers: int):
        self.busy_s = [0.0] * num_workers   # seconds each worker spent in its steps
        self.steps = [0] * num_workers      # steps each finished
        self.recent = [collections.deque(maxlen=RECENT_STEPS) for _ in range(num_workers)]
        self.retried = 0  # steps put back after their worker failed while running them
        # worker -> (start time, weak reference to the closure) of the step it is running:
        # weak, as TensorFlow drops a closure once processed (a closure held here, e.g.
        # one cancelled after its worker failed, would hold its function and through it
        # the strategy and coordinator, whose destructor stops the threads).
        self._started = {}

    def start(self, worker: int, now: float, closure) -> None:
        """``worker`` took ``closure`` at ``now``."""
        self._started[worker] = (now, weakref.ref(closure))

    def end(self, worker: int, now: float):
        """``worker``'s step ended at ``now`` and counts: ``(start time, closure or None
        if already dropped)``, or None if it ran no timed step."""
        started = self._started.pop(worker, None)
        if started is None:
            return None
        elapsed = now - started[0]
        self.busy_s[worker] += elapsed
        self.steps[worker] += 1
        self.recent[worker].append(elapsed)
        return started[0], started[1]()

    def fail(self, worker: int) -> None:
        """``worker``'s step failed in itself: it ends training and its time counts
        for nothing."""
        self._started.pop(worker, None)

    def put_back(self, worker: int, closure) -> bool:
        """``closure`` goes back to the queue after ``worker`` failed while running it
        (TensorFlow retries it on another worker): the failed attempt is not a step.
        Whether it was ``worker``'s running step."""
        started = self._started.get(worker)
        if started is None or started[1]() is not closure:
            return False
        del self._started[worker]
        self.retried += 1
        return True

    def running(self) -> set:
        """Workers running a step now."""
        return set(self._started)

    def started(self, worker: int):
        """``(start time, closure or None if already dropped)`` of the step ``worker``
        runs now; None when it runs none."""
        started = self._started.get(worker)
        return None if started is None else (started[0], started[1]())

    def in_flight_s(self, now: float) -> list:
        """Seconds each worker has been running its current step (None: not running)."""
        started = dict(self._started)
        return [now - started[w][0] if w in started else None
                for w in range(len(self.steps))]

    def usual(self) -> list:
        """The median of each worker's last steps (None: no finished step): one long
        step (a freeze that ended) does not make a worker slow."""
        return [statistics.median(list(r)) if r else None for r in self.recent]
