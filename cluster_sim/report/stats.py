"""Statistics for time to target: interpolated crossings, bootstrap intervals, spread.

Time to target (TTA) measured as "the first evaluation at or past the target" is
quantised by the evaluation interval, and a single seed says little when TTA moves
20-40 % between seeds. These functions make it low-noise and honest:

* `crossing_time`: the time a curve first crosses the target, linearly interpolated
  between the two evaluations around the crossing;
* `bootstrap_ci`: a statistic (median by default) over seeds with a percentile
  bootstrap interval;
* `seed_interval`: a time or ratio over seeds with an interval that has the coverage
  it claims, or says it has none: under 5 seeds the median and the range (min-max: a
  percentile bootstrap of 3 values is about that and covers the truth at most ~75 % of
  the time); from 5 seeds a t interval on the logs (times and ratios are
  multiplicative: their logs are near normal), around the geometric mean; with a run
  that never reached, a distribution-free interval of the median from order statistics;
* `paired_ratio_ci`: arm A over arm B, paired by seed (same initial weights and data
  order): `seed_interval` of the per-seed ratios;
* `coefficient_of_variation`: standard deviation over mean (BSP's TTA spread).

**Runs that never reach the target.** Pass them as ``None`` (or ``inf``): every function
here counts them as ``+inf``, a time longer than any measured one, never drops them
(dropping them would flatter a rule that often fails). So a median is finite while
fewer than half the runs failed and ``inf`` otherwise; an interval bound is ``inf`` when
the resamples that decide it have a failed median; a ratio is ``inf`` where only arm A
failed, ``0`` where only B failed, and a run where both failed has no ratio (``nan``,
which is left out of the ratio's median and said so by the ``pairs`` count).
``coefficient_of_variation`` of a sample with a failed run is ``inf``.

Pure numpy, no TensorFlow.

Example:

>>> crossing_time([0, 10, 20], [1.0, 0.6, 0.2], target=0.4)
15.0
>>> bootstrap_ci([10.0, 11.0, 12.0, 13.0, 14.0])  # five seeds: a wide interval
(12.0, 10.0, 14.0)
>>> bootstrap_ci([10.0, 10.5, 11.0, 11.5, 12.0] * 4)  # twenty seeds: narrower
(11.0, 10.5, 11.5)
"""

import math
from statistics import NormalDist

import numpy as np

__all__ = ["crossing_time", "bootstrap_ci", "seed_interval", "paired_ratio_ci", "Interval",
           "interval_label",
           "MIN_SEEDS_FOR_INTERVAL", "coefficient_of_variation", "as_times"]

#: Below this many seeds no interval here has the coverage it would claim: a range.
MIN_SEEDS_FOR_INTERVAL = 5


def crossing_time(times, values, target, below=True):
    """When ``values`` (evaluated at ``times``) first reach ``target``, interpolated.

    ``below=True`` for a loss (reached when ``value <= target``), ``False`` for an
    accuracy (``value >= target``). Between the last evaluation short of the target and
    the first one past it, the curve is taken as a straight line. The first point
    counts: a curve already past the target at its first evaluation crossed at that
    time. Returns None if the target is never reached.

    >>> round(crossing_time([0, 100, 200], [0.5, 0.8, 0.9], target=0.7, below=False), 6)
    66.666667
    >>> crossing_time([5, 6], [0.1, 0.0], target=0.2)  # already past at the first point
    5.0
    >>> crossing_time([0, 1], [1.0, 0.9], target=0.5) is None
    True
    """
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError(f"times and values must be 1-D and of one length, got shapes "
                         f"{t.shape} and {v.shape}")
    if np.any(np.diff(t) < 0):
        raise ValueError("times must be non-decreasing (sort the curve by time first)")
    reached = v <= target if below else v >= target
    hits = np.flatnonzero(reached)
    if not len(hits):
        return None
    i = int(hits[0])
    if i == 0:
        return float(t[0])
    t0, t1, v0, v1 = t[i - 1], t[i], v[i - 1], v[i]
    # v0 is short of the target and v1 past it, so v1 != v0.
    return float(t0 + (t1 - t0) * (target - v0) / (v1 - v0))


def as_times(values) -> np.ndarray:
    """``values`` as a float array with ``None`` (never reached) as ``+inf``.

    >>> as_times([1, None, float("inf")])
    array([ 1., inf, inf])
    """
    out = np.array([math.inf if v is None else v for v in values], dtype=float)
    if out.ndim != 1:
        raise ValueError(f"expected a flat sequence of times, got shape {out.shape}")
    if np.isnan(out).any():
        raise ValueError("NaN among the times: pass None for a run that never reached "
                         "the target")
    return out


def _median(x, axis=None):
    # np.median of a sample with inf is inf or finite as expected; nan never occurs here.
    return np.median(x, axis=axis)


def bootstrap_ci(values, statistic=_median, level=0.9, n_resamples=4000, seed=0):
    """``(point, low, high)``: ``statistic`` of ``values`` and its percentile bootstrap
    interval at ``level`` (0.9: the 5th and 95th percentiles of the statistic over
    ``n_resamples`` resamples of the values with replacement).

    ``statistic(array, axis=...)`` must reduce along ``axis`` (``np.median``,
    ``np.mean``). ``None`` values count as ``+inf`` (see the module docstring). A sample
    of identical values has a zero-width interval. With few values the interval is
    coarse: five seeds can only give one of five values as a bound of a median.

    >>> bootstrap_ci([3.0, 3.0, 3.0])
    (3.0, 3.0, 3.0)
    >>> point, low, high = bootstrap_ci([1.0, 2.0, None, 4.0, 5.0])
    >>> point, low <= point <= high
    (4.0, True)
    """
    x = as_times(values)
    if not len(x):
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), e.g. 0.9, got {level!r}")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    point = float(statistic(x, axis=0))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(int(n_resamples), len(x)))
    with np.errstate(invalid="ignore"):  # mean of [inf, inf] is inf; no nan from medians
        stats = np.asarray(statistic(x[idx], axis=1), dtype=float)
    alpha = (1 - level) / 2
    # method="lower"/"higher" keeps the bounds at attained values, so inf stays inf
    # instead of turning into nan by interpolation between a finite value and inf.
    low = float(np.quantile(stats, alpha, method="lower"))
    high = float(np.quantile(stats, 1 - alpha, method="higher"))
    return point, low, high


class Interval(tuple):
    """``(point, low, high, n)`` of `seed_interval`, and how it was made: ``kind`` is
    "range" (fewer than `MIN_SEEDS_FOR_INTERVAL` values: the median and min-max), "t"
    (the geometric mean and a t interval on the logs at ``level``) or "order" (the
    median and its distribution-free interval, for samples with a 0 or a never);
    ``label`` says it in a table header ("range", "90% CI")."""

    def __new__(cls, point, low, high, n, kind, level=0.9):
        self = super().__new__(cls, (point, low, high, n))
        self.kind, self.level = kind, level
        return self

    @property
    def label(self) -> str:
        return "range" if self.kind == "range" else f"{100 * self.level:g}% CI"


def interval_label(intervals) -> str:
    """A column's header for its `Interval`s (None: no value): "range", "90% CI", or
    both when its rows differ in seeds.

    >>> interval_label([seed_interval([1.0, 2.0]), None, seed_interval([1.0] * 6)])
    'range / 90% CI'
    """
    labels = list(dict.fromkeys(i.label for i in intervals if i is not None))
    return " / ".join(labels) if labels else "range"


def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion (within 0.001 of the exact
    value from 4 degrees of freedom on; numpy has none, and scipy is no dependency).

    >>> round(_t_quantile(0.95, 4), 3), round(_t_quantile(0.95, 9), 3)
    (2.132, 1.833)
    """
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3)
            + (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z)
            / (92160 * v ** 4))


def _median_order_interval(x: np.ndarray, level: float) -> tuple:
    """``[x(k), x(n+1-k)]`` of the sorted sample with the largest k whose coverage of
    the median, 1 - 2 P(Binomial(n, 1/2) < k), is at least ``level`` (whatever the
    distribution, so a never-reached +inf is just the largest value)."""
    s, n = np.sort(x), len(x)
    below = 0.0  # P(B <= k - 1)
    k = 0
    while True:
        below += math.comb(n, k) / 2.0 ** n
        if 1 - 2 * below < level:
            break
        k += 1
    k = max(k, 1)
    return float(s[k - 1]), float(s[n - k])


def seed_interval(values, level=0.9) -> Interval:
    """``(point, low, high, n)`` over seeds (module docstring), as an `Interval`.

    >>> seed_interval([2.0, 4.0, 1.0])            # 3 seeds: median and range
    (2.0, 1.0, 4.0, 3)
    >>> i = seed_interval([1.0, 2.0, 4.0, 2.0, 1.0, 4.0])
    >>> i.kind, round(i[0], 3), [round(v, 2) for v in i[1:3]], i.label
    ('t', 2.0, [1.2, 3.33], '90% CI')
    >>> seed_interval([1.0, 2.0, None, 3.0, 4.0]).kind   # a miss: the median's interval
    'order'
    """
    x = as_times(values)
    n = len(x)
    if not n:
        raise ValueError("seed_interval needs at least one value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), e.g. 0.9, got {level!r}")
    median = float(np.median(x))
    if n < MIN_SEEDS_FOR_INTERVAL:
        return Interval(median, float(x.min()), float(x.max()), n, "range", level)
    if np.all(np.isfinite(x)) and np.all(x > 0):
        logs = np.log(x)
        half = _t_quantile(1 - (1 - level) / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n)
        mean = float(logs.mean())
        return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n,
                        "t", level)
    low, high = _median_order_interval(x, level)
    return Interval(median, low, high, n, "order", level)


def paired_ratio_ci(a, b, level=0.9) -> Interval:
    """Arm ``a`` over arm ``b``, paired by seed: `seed_interval` of the per-seed ratios
    ``a[i] / b[i]`` (``(point, low, high, pairs)``, with ``kind`` and ``label``).

    ``a[i]`` and ``b[i]`` are the two arms' times for seed i (same initial weights and
    data order). Pairing removes what the seed does to both arms alike, so the interval
    is narrower than one from unpaired medians. ``None``/``inf`` count as never reached
    (module docstring); a seed where both never reached has no ratio and is left out,
    ``pairs`` counts the seeds used.

    >>> paired_ratio_ci([10, 20, 30], [10, 20, 30])
    (1.0, 1.0, 1.0, 3)
    >>> paired_ratio_ci([5, 10, 15, 20], [10, 20, 30, 40])[:3]
    (0.5, 0.5, 0.5)
    """
    x, y = as_times(a), as_times(b)
    if x.shape != y.shape:
        raise ValueError(f"paired arms need one time per seed in each, got {len(x)} and "
                         f"{len(y)}")
    if np.any(y == 0) or np.any(x < 0) or np.any(y < 0):
        raise ValueError("times must be positive (a ratio over a zero time is undefined)")
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = x / y  # inf/inf -> nan: both never reached
    ratios = ratios[~np.isnan(ratios)]
    if not len(ratios):
        raise ValueError("no seed where at least one arm reached the target: no ratio")
    return seed_interval(ratios, level=level)


def coefficient_of_variation(values) -> float:
    """Sample standard deviation (``ddof=1``) over the mean; ``inf`` if a run never
    reached the target, ``nan`` for fewer than two values.

    >>> round(coefficient_of_variation([9.0, 10.0, 11.0]), 4)
    0.1
    >>> coefficient_of_variation([4.0, 4.0])
    0.0
    """
    x = as_times(values)
    if len(x) < 2:
        return math.nan
    if np.isinf(x).any():
        return math.inf
    mean = float(x.mean())
    if mean == 0:
        raise ValueError("coefficient of variation of values with mean 0 is undefined")
    return float(x.std(ddof=1) / mean)
