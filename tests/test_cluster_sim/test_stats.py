"""cluster_sim.report.stats against cases whose answer is known."""

import math

import numpy as np
import pytest

from cluster_sim.report.stats import (bootstrap_ci, coefficient_of_variation, crossing_time,
                                      paired_ratio_ci)


# -- crossing_time ----------------------------------------------------------------------

def test_crossing_of_a_straight_line_is_exact():
    # loss = 2 - 0.01 t, sampled every 7 time units: crosses 1.234 at t = 76.6.
    t = np.arange(0, 200, 7.0)
    assert crossing_time(t, 2 - 0.01 * t, 1.234) == pytest.approx(76.6)
    # The same line read as an accuracy rising past a target.
    assert crossing_time(t, 0.01 * t, 0.5, below=False) == pytest.approx(50.0)


def test_crossing_interpolates_between_the_two_evaluations_around_it_only():
    # A curve that dips, rises and dips again: the first crossing counts, and only the
    # two points around it decide where (not a fit over the whole curve).
    t = [0, 10, 20, 30, 40]
    v = [1.0, 0.8, 0.4, 0.9, 0.1]
    assert crossing_time(t, v, 0.6) == pytest.approx(15.0)


def test_first_point_already_past_the_target_counts_as_its_time():
    assert crossing_time([3.0, 4.0], [0.2, 0.1], 0.5) == 3.0
    assert crossing_time([3.0, 4.0], [0.9, 0.95], 0.9, below=False) == 3.0


def test_a_point_exactly_on_the_target_is_reached_there():
    assert crossing_time([0, 1, 2], [1.0, 0.5, 0.2], 0.5) == 1.0


def test_never_reached_is_none():
    assert crossing_time([0, 1, 2], [1.0, 0.9, 0.8], 0.5) is None
    assert crossing_time([], [], 0.5) is None


def test_crossing_rejects_mismatched_or_unsorted_curves():
    with pytest.raises(ValueError, match="one length"):
        crossing_time([0, 1], [1.0], 0.5)
    with pytest.raises(ValueError, match="non-decreasing"):
        crossing_time([1, 0], [1.0, 0.0], 0.5)


# -- bootstrap_ci -----------------------------------------------------------------------

def test_degenerate_sample_gives_zero_width_interval():
    assert bootstrap_ci([7.0] * 5) == (7.0, 7.0, 7.0)
    assert bootstrap_ci([7.0]) == (7.0, 7.0, 7.0)


def test_interval_covers_the_true_median_at_about_the_stated_rate():
    # Exponential(1) has median ln 2. 300 repeats of 15 draws: a 90 % percentile
    # bootstrap of the median should cover it in roughly 90 % of them (the percentile
    # bootstrap of a median from 15 values is a little conservative or liberal, so the
    # band is wide enough not to flake and narrow enough to catch a wrong quantile
    # (a 50 % interval covers about 50 %, a swapped low/high covers nothing).
    rng = np.random.default_rng(1)
    true = math.log(2)
    covered = 0
    repeats = 300
    for i in range(repeats):
        sample = rng.exponential(1.0, 15)
        point, low, high = bootstrap_ci(sample, level=0.9, n_resamples=500, seed=i)
        assert low <= point <= high
        covered += low <= true <= high
    assert 0.82 <= covered / repeats <= 0.97, covered / repeats


def test_a_narrower_level_gives_a_narrower_interval():
    sample = np.random.default_rng(0).normal(10, 1, 30)
    _, lo50, hi50 = bootstrap_ci(sample, level=0.5)
    _, lo90, hi90 = bootstrap_ci(sample, level=0.9)
    assert lo90 <= lo50 < hi50 <= hi90


def test_other_statistics_and_determinism():
    sample = [1.0, 2.0, 3.0, 10.0]
    point, low, high = bootstrap_ci(sample, statistic=np.mean, seed=3)
    assert point == 4.0 and low < 4.0 < high
    assert bootstrap_ci(sample, seed=3) == bootstrap_ci(sample, seed=3)


def test_never_reached_counts_as_infinite_time():
    # Two of five failed: the median is the third value, still finite; a resample with
    # three failures has an infinite median, so the upper bound is infinite.
    point, low, high = bootstrap_ci([1.0, 2.0, 3.0, None, math.inf])
    assert point == 3.0 and low == 1.0 and high == math.inf
    # Three of five failed: the median itself is infinite.
    assert bootstrap_ci([1.0, None, None, None, 2.0])[0] == math.inf
    assert bootstrap_ci([None, None]) == (math.inf, math.inf, math.inf)


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1.0], level=90)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])


# -- paired_ratio_ci --------------------------------------------------------------------

def test_ratio_of_identical_arms_is_one_with_zero_width():
    times = [12.0, 30.0, 18.5, 22.0, 41.0]
    assert paired_ratio_ci(times, times) == (1.0, 1.0, 1.0, 5)


def test_pairing_removes_what_the_seed_does_to_both_arms():
    # Seeds move both arms by up to 3x; arm a is 0.8x of b on every seed, with 1 % noise.
    rng = np.random.default_rng(0)
    b = rng.uniform(10, 30, 10)
    a = 0.8 * b * rng.uniform(0.99, 1.01, 10)
    point, low, high, pairs = paired_ratio_ci(a, b)
    assert pairs == 10
    assert low <= point <= high
    assert 0.78 < low and high < 0.82
    # Unpaired medians of the same runs are far less certain.
    _, a_low, a_high = bootstrap_ci(a)
    assert (a_high - a_low) / np.median(a) > 5 * (high - low)


def test_ratio_with_runs_that_never_reached():
    point, low, high, pairs = paired_ratio_ci([None, 10.0, 20.0], [10.0, 10.0, None])
    # Seed 0: only a failed (inf); seed 1: 1.0; seed 2: only b failed (0.0).
    assert (point, pairs) == (1.0, 3)
    assert low == 0.0 and high == math.inf
    # Both failed on a seed: that seed has no ratio and is not counted.
    assert paired_ratio_ci([None, 5.0], [None, 10.0]) == (0.5, 0.5, 0.5, 1)
    with pytest.raises(ValueError, match="no seed"):
        paired_ratio_ci([None], [None])


def test_ratio_rejects_unpaired_or_zero_times():
    with pytest.raises(ValueError, match="one time per seed"):
        paired_ratio_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio_ci([1.0], [0.0])


# -- coefficient_of_variation -----------------------------------------------------------

def test_coefficient_of_variation():
    assert coefficient_of_variation([10.0, 10.0, 10.0]) == 0.0
    assert coefficient_of_variation([8.0, 12.0]) == pytest.approx(np.std([8, 12], ddof=1) / 10)
    assert coefficient_of_variation([1.0, None]) == math.inf
    assert math.isnan(coefficient_of_variation([5.0]))


# -- seed_interval: coverage against a known distribution --------------------------------

def _coverage(n, trials=2000, sigma=0.3, truth=0.8, seed=46):
    """How often `seed_interval` of ``n`` lognormal ratios (median ``truth``) holds
    ``truth``, and the kind of interval it gave."""
    from cluster_sim.report.stats import seed_interval
    rng = np.random.default_rng(seed)
    hits, kinds = 0, set()
    for sample in truth * np.exp(rng.normal(0.0, sigma, (trials, n))):
        interval = seed_interval(sample, level=0.9)
        hits += interval[1] <= truth <= interval[2]
        kinds.add(interval.kind)
    return hits / trials, kinds


def test_the_interval_from_five_seeds_covers_the_truth_as_often_as_it_says():
    # A t interval on the logs: 90 % nominal, measured within a generous band.
    for n in (5, 10):
        coverage, kinds = _coverage(n)
        assert kinds == {"t"} and 0.86 <= coverage <= 0.94, (n, coverage)
    # Under 5 seeds it is called a range: min-max of 3 covers the median 75 % of the time
    # (1 - 2 / 2**3), which no "90 % CI" may.
    coverage, kinds = _coverage(3)
    assert kinds == {"range"} and 0.71 <= coverage <= 0.79, coverage


def test_a_run_that_never_reached_gets_the_medians_distribution_free_interval():
    from cluster_sim.report.stats import seed_interval
    interval = seed_interval([3.0, None, 1.0, 2.0, 5.0, 4.0, 6.0, 7.0, 8.0, 9.0])
    # n = 10 at 90 %: x(3) to x(8) would cover 89 %, x(2) to x(9) covers 97.9 %.
    assert interval.kind == "order" and tuple(interval) == (5.5, 2.0, 9.0, 10)
    assert paired_ratio_ci([1.0, 2.0, 3.0, 4.0, None], [1.0] * 5)[2] == math.inf
