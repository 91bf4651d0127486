"""Property-based tests of predictor.BatchAllocator (pure numpy, no TensorFlow)."""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from predictor.allocator import AllocatorFallbackWarning, BatchAllocator

speeds_st = st.lists(st.floats(0.01, 100.0, allow_nan=False), min_size=1, max_size=64)


@st.composite
def feasible(draw):
    speeds = draw(speeds_st)
    n = len(speeds)
    lo = draw(st.integers(1, 64))
    hi = draw(st.integers(lo, 512))
    total = draw(st.integers(n * lo, n * hi))
    return speeds, total, lo, hi


@settings(max_examples=300, deadline=None)
@given(feasible(), st.floats(0.0, 0.5))
def test_sizes_sum_exactly_and_respect_bounds(case, hysteresis):
    speeds, total, lo, hi = case
    sizes = BatchAllocator(total, lo, hi, hysteresis).allocate(speeds)
    assert all(isinstance(b, int) for b in sizes)
    assert sum(sizes) == total
    assert all(lo <= b <= hi for b in sizes)


@settings(max_examples=300, deadline=None)
@given(feasible())
def test_sizes_are_within_one_of_the_proportional_ideal(case):
    speeds, total, lo, hi = case
    alloc = BatchAllocator(total, lo, hi, hysteresis=0.0)
    ideal = alloc.ideal_sizes(speeds)
    sizes = np.array(alloc.allocate(speeds))
    assert np.all(np.abs(sizes - ideal) < 1.0 + 1e-9)
    # Where no bound binds, the ideal is proportional to speed.
    free = (ideal > lo + 1e-9) & (ideal < hi - 1e-9)
    if free.sum() >= 2:
        ratio = ideal[free] / np.asarray(speeds)[free]
        assert np.allclose(ratio, ratio[0], rtol=1e-6)


@settings(max_examples=300, deadline=None)
@given(feasible())
def test_faster_worker_never_gets_a_smaller_batch_when_unbounded(case):
    speeds, total, lo, hi = case
    ideal = BatchAllocator(total, lo, hi).ideal_sizes(speeds)
    order = np.argsort(speeds, kind="stable")
    assert np.all(np.diff(ideal[order]) >= -1e-9)


@settings(max_examples=300, deadline=None)
@given(feasible(), st.floats(0.02, 0.3), st.data())
def test_small_noise_keeps_the_previous_allocation(case, hysteresis, data):
    speeds, total, lo, hi = case
    alloc = BatchAllocator(total, lo, hi, hysteresis)
    first = alloc.allocate(speeds)
    # Multiplicative noise of +-delta moves every ideal size by < 2*delta/(1-delta) < h.
    delta = hysteresis / 4
    noise = data.draw(st.lists(st.floats(1 - delta, 1 + delta), min_size=len(speeds),
                               max_size=len(speeds)))
    assert alloc.allocate(np.asarray(speeds) * np.asarray(noise)) == first


@settings(max_examples=200, deadline=None)
@given(feasible(), st.floats(0.01, 0.2))
def test_large_change_is_applied(case, hysteresis):
    speeds, total, lo, hi = case
    assume(len(speeds) >= 2)
    alloc = BatchAllocator(total, lo, hi, hysteresis)
    alloc.allocate(speeds)
    changed = list(speeds)
    changed[0] *= 10.0
    fresh = BatchAllocator(total, lo, hi, hysteresis=0.0).allocate(changed)
    target_moved = np.max(np.abs(alloc.ideal_sizes(changed) - alloc._anchor) / alloc._anchor)
    assume(target_moved >= hysteresis)
    assert alloc.allocate(changed) == fresh


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_infeasible_bounds_raise(n, lo, hi):
    assume(lo <= hi)
    for total in (n * lo - 1, n * hi + 1):
        if total < 1:
            continue
        with pytest.raises(ValueError, match="infeasible"):
            BatchAllocator(total, lo, hi).allocate([1.0] * n)


@settings(max_examples=200, deadline=None)
@given(feasible(), st.sampled_from([np.nan, 0.0, -1.0, np.inf]), st.data())
def test_bad_speeds_fall_back_to_equal_sizes_then_recover(case, bad, data):
    speeds, total, lo, hi = case
    alloc = BatchAllocator(total, lo, hi, hysteresis=0.1)
    i = data.draw(st.integers(0, len(speeds) - 1))
    broken = list(speeds)
    broken[i] = bad
    with pytest.warns(AllocatorFallbackWarning, match=rf"workers \[{i}\]"):
        sizes = alloc.allocate(broken)
    assert sum(sizes) == total and max(sizes) - min(sizes) <= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert alloc.allocate(speeds) == BatchAllocator(total, lo, hi, 0.0).allocate(speeds)


def test_examples():
    alloc = BatchAllocator(256, 8, 128, hysteresis=0.05)
    assert alloc.allocate([1.0, 1.0, 2.0]) == [64, 64, 128]
    assert alloc.allocate([1.01, 0.99, 2.0]) == [64, 64, 128]
    assert BatchAllocator(100, 10, 60).allocate([3.0, 1.0]) == [60, 40]
    # The straggler is held at min_batch, the rest share the remainder equally.
    assert BatchAllocator(100, 10).allocate([0.01, 1.0, 1.0]) == [10, 45, 45]


@pytest.mark.parametrize("kwargs", [dict(global_batch=0), dict(global_batch=10, min_batch=5, max_batch=4),
                                    dict(global_batch=10, hysteresis=1.5), dict(global_batch=2.5)])
def test_bad_parameters_raise(kwargs):
    with pytest.raises(ValueError):
        BatchAllocator(**kwargs)


def test_allocator_does_not_import_tensorflow():
    code = ("import sys, predictor; predictor.BatchAllocator(8).allocate([1, 2]); "
            "import predictor.baselines; "
            "assert 'tensorflow' not in sys.modules and 'tf_keras' not in sys.modules "
            "and 'keras' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


@settings(max_examples=300, deadline=None)
@given(feasible())
def test_deadline_sizes_are_what_each_worker_finishes_in_the_fastest_time(case):
    speeds, total, lo, hi = case
    alloc = BatchAllocator(total, lo, hi)
    equal = alloc.equal_sizes(len(speeds))
    deadline = min(e / s for e, s in zip(equal, speeds))
    sizes = alloc.deadline_sizes(speeds)
    assert all(isinstance(b, int) for b in sizes) and sum(sizes) <= total
    for b, e, s in zip(sizes, equal, speeds):
        assert lo <= b <= e
        assert b == lo or b / s <= deadline * (1 + 1e-9)       # done by the deadline
        assert b == e or (b + 1) / s > deadline * (1 - 1e-9)   # and not one sample more


def test_deadline_sizes_fall_back_to_equal_sizes_on_bad_speeds():
    alloc = BatchAllocator(128, min_batch=4)
    assert alloc.deadline_sizes([1.0, 1.0, 0.5, 0.25]) == [32, 32, 16, 8]
    with pytest.warns(AllocatorFallbackWarning):
        assert alloc.deadline_sizes([1.0, np.nan, 0.5, 0.25]) == [32] * 4
