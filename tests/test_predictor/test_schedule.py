"""AllocationSchedule: profile, allocate, fall back to equal sizes while a worker has no
speed (quietly) and on garbage (with a warning)."""

import warnings

import numpy as np
import pytest

import predictor
from predictor import AllocatorFallbackWarning, BatchAllocator
from predictor.schedule import AllocationSchedule

GOOD = [300.0, 300.0, 100.0]


def schedule(mode):
    forecaster = predictor.GRUSmoothingForecaster.default() if mode == "forecast" else None
    s = AllocationSchedule(BatchAllocator(96, min_batch=4), forecaster=forecaster, mode=mode)
    s.initial(3)
    return s


def allocate_quietly(s, version, speeds):
    with warnings.catch_warnings():
        warnings.simplefilter("error", AllocatorFallbackWarning)  # good data: no fallback
        return s.observe(version, speeds)


@pytest.mark.parametrize("mode", ["last", "forecast"])
@pytest.mark.parametrize("garbage", [
    [0.0, 0.0, 0.0], [300.0, -5.0, 100.0], [np.nan, 300.0, 100.0], [300.0, 300.0, np.inf]],
    ids=["zeros", "negative", "nan", "inf"])
def test_garbage_falls_back_to_equal_sizes_then_recovers(mode, garbage):
    s = schedule(mode)
    first = allocate_quietly(s, 10, GOOD)
    assert first[2] < first[0] / 2  # the slow worker gets a small batch
    with pytest.warns(AllocatorFallbackWarning, match="equal batch sizes"):
        assert s.observe(20, garbage) == [32, 32, 32]
    assert s.history[-1]["stage"] == "fallback: unusable speeds"
    for version in (30, 40):  # the forecaster needs its level back, not a fresh start
        sizes = allocate_quietly(s, version, GOOD) or s.sizes
    assert sizes[2] < sizes[0] / 2 and sum(sizes) == 96


@pytest.mark.parametrize("mode", ["last", "forecast", "deadline"])
def test_a_worker_without_a_speed_gets_equal_sizes_quietly_then_allocation_resumes(mode):
    s = schedule(mode)
    first = allocate_quietly(s, 10, GOOD)
    assert first[2] < first[0] / 2
    # Expected (a slow or paused worker made no step in the window): said by status()
    # and history, not by a warning.
    assert allocate_quietly(s, 20, [300.0, None, 100.0]) == [32, 32, 32]
    assert s.history[-1]["stage"] == "equal sizes: no speed for worker(s) [1]"
    assert allocate_quietly(s, 30, [None, None, 100.0]) is None  # still equal
    assert s.status() == ("equal batch sizes since version 20: no speed measured for "
                          "workers 0, 1 in the last window")
    sizes = allocate_quietly(s, 40, GOOD)
    assert sizes[2] < sizes[0] / 2 and s.status() is None


def test_profiling_waits_until_every_worker_is_measured():
    s = schedule("last")
    assert s.observe(10, [300.0, None, 100.0]) is None
    assert s.history[-1]["stage"] == "profile"
    assert s.observe(20, GOOD) is not None


def test_static_mode_keeps_the_first_allocation():
    s = schedule("static")
    first = s.observe(10, GOOD)
    assert s.observe(20, [100.0, 300.0, 300.0]) is None and s.sizes == first


def test_deadline_mode_shrinks_the_slow_workers_share_and_the_global_batch():
    s = schedule("deadline")
    assert s.observe(10, [None, 300.0, 100.0]) is None  # still profiling
    assert allocate_quietly(s, 20, GOOD) == [32, 32, 10]
    assert allocate_quietly(s, 30, [300.0, 150.0, 300.0]) == [32, 16, 32]
    with pytest.warns(AllocatorFallbackWarning):
        assert s.observe(40, [300.0, 0.0, 100.0]) == [32, 32, 32]
