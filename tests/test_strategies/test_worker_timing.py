"""`strategies.worker_timing.WorkerTiming`: each worker's steps and their times, as the
coordinator records them, driven in one thread with the time given."""

from ksync.policies import RECENT_STEPS
from strategies.worker_timing import WorkerTiming


class Step:
    """A closure (weakly referenced, as TensorFlow's are)."""


def test_times_and_the_median_of_recent_steps():
    timing, step = WorkerTiming(2), Step()
    now = 0.0
    for duration in [1.0] * (RECENT_STEPS - 1) + [50.0]:  # one long step: a freeze
        timing.start(1, now, step)
        now += duration
        assert timing.end(1, now) == (now - duration, step)
    assert timing.steps == [0, RECENT_STEPS] and timing.busy_s == [0.0, RECENT_STEPS + 49.0]
    assert timing.usual() == [None, 1.0]
    for _ in range(RECENT_STEPS):  # the window keeps the last RECENT_STEPS steps
        timing.start(1, now, step)
        now += 3.0
        timing.end(1, now)
    assert timing.usual() == [None, 3.0]


def test_running_steps_and_their_time_so_far():
    timing, steps = WorkerTiming(3), [Step(), Step()]
    timing.start(0, 1.0, steps[0])
    timing.start(2, 4.0, steps[1])
    assert timing.running() == {0, 2}
    assert timing.in_flight_s(now=5.0) == [4.0, None, 1.0]
    assert timing.started(2) == (4.0, steps[1]) and timing.started(1) is None
    assert timing.end(1, 6.0) is None  # no step of its own: nothing counts


def test_a_step_put_back_or_failed_is_not_a_step():
    timing, step, other = WorkerTiming(2), Step(), Step()
    timing.start(0, 0.0, step)
    assert not timing.put_back(0, other)  # not the closure it runs: still running
    assert timing.put_back(0, step) and timing.retried == 1
    assert timing.running() == set() and timing.end(0, 9.0) is None
    timing.start(1, 0.0, step)
    timing.fail(1)
    assert timing.steps == [0, 0] and timing.busy_s == [0.0, 0.0]


def test_a_dropped_closure_is_not_held():
    timing = WorkerTiming(1)
    timing.start(0, 0.0, Step())  # nothing else holds it: dropped at once
    assert timing.started(0) == (0.0, None)
    assert timing.end(0, 2.0) == (0.0, None) and timing.steps == [1]
