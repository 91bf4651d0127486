"""Synthetic regime-switching speed series, to teach a forecaster what a regime change is.

The real training traces hold few regime changes (a straggler episode or two per
PAI job), so a network trained on them alone learns mean reversion and
distrusts level shifts. These series are piecewise-constant speeds (a co-located
job starts or stops, a node is throttled or paused) with multiplicative noise;
every parameter is drawn at random per series, so they describe no particular
scenario.

Example:

>>> from predictor.synthetic import regime_switching
>>> series = regime_switching(n_series=3, length=500, seed=0)
>>> len(series), series[0].shape, bool(min(s.min() for s in series) > 0)
(3, (500,), True)
"""

from __future__ import annotations

import numpy as np

__all__ = ["regime_switching"]


def regime_switching(n_series: int = 40, length: int = 2000, seed: int = 0,
                     mean_segment=(10, 200), slowdown=(0.02, 1.0), noise=(0.01, 0.15)):
    """``n_series`` positive speed series of ``length`` points.

    Per series: segment lengths are geometric with a mean drawn from
    ``mean_segment``; each segment runs at a speed factor drawn log-uniformly from
    ``slowdown`` with probability 1/2, else at full speed; log-normal noise with a
    standard deviation drawn from ``noise``.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_series):
        mean_len = rng.uniform(*mean_segment)
        sigma = rng.uniform(*noise)
        level = np.empty(length)
        t = 0
        while t < length:
            seg = int(rng.geometric(1.0 / mean_len))
            slow = rng.random() < 0.5
            level[t:t + seg] = (np.exp(rng.uniform(*np.log(slowdown))) if slow else 1.0)
            t += seg
        base = np.exp(rng.uniform(np.log(0.5), np.log(50.0)))  # any speed unit
        out.append(base * level * np.exp(sigma * rng.standard_normal(length)))
    return out
