"""AllocationSchedule: profile, allocate, and carry a worker's last usable speed over garbage."""

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
    [0.0, 0.0, 0.0], [300.0, -5.0, 100.0], [np.nan, 300.0, 100.0], [300.0, 300.0, np.inf],
    [300.0, None, 100.0]], ids=["zeros", "negative", "nan", "inf", "stopped-reporting"])
def test_garbage_keeps_the_allocation_on_the_last_usable_speeds(mode, garbage):
    s = schedule(mode)
    first = allocate_quietly(s, 10, GOOD)
    assert first[2] < first[0] / 2  # the slow worker gets a small batch
    with pytest.warns(AllocatorFallbackWarning, match="last usable speeds"):
        kept = s.observe(20, garbage) or s.sizes
    assert kept[2] < kept[0] / 2 and sum(kept) == 96
    assert "carried" in s.history[-1]["stage"]
    for version in (30, 40):
        sizes = allocate_quietly(s, version, GOOD) or s.sizes
    assert sizes[2] < sizes[0] / 2 and sum(sizes) == 96


def test_a_paused_worker_keeps_its_share_while_the_others_rebalance():
    s = schedule("last")
    allocate_quietly(s, 10, [300.0, 300.0, 100.0])
    with pytest.warns(AllocatorFallbackWarning, match=r"workers \[2\]"):
        sizes = s.observe(20, [300.0, 100.0, None])  # 2 paused, 1 slowed 3x meanwhile
    assert sizes == [58, 19, 19]  # 300 : 100 : 100 (2 at its last usable speed)
    with pytest.warns(AllocatorFallbackWarning):
        assert s.observe(30, [300.0, 100.0, None]) is None  # nothing new: kept
    assert allocate_quietly(s, 40, [300.0, 100.0, 300.0]) == [41, 14, 41]  # 2 is back


def test_a_restored_schedule_carries_speeds_from_its_history():
    s = schedule("last")
    allocate_quietly(s, 10, GOOD)
    restored = schedule("last")
    restored.history, restored.sizes = s.history, s.sizes  # as RuleController restores
    with pytest.warns(AllocatorFallbackWarning):
        assert restored.observe(20, [None, 300.0, 100.0]) in (None, s.sizes)


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
    with pytest.warns(AllocatorFallbackWarning):  # 1 at its last usable speed, 150
        assert s.observe(40, [300.0, 0.0, 300.0]) is None and s.sizes == [32, 16, 32]
