"""Online use during training: feed measurements, refit periodically, account the cost.

Example:

>>> import numpy as np
>>> from predictor.baselines import LagRegressor
>>> from predictor.online import OnlineForecaster
>>> online = OnlineForecaster(LagRegressor(lags=4, horizon=2), refit_every=20)
>>> rng = np.random.default_rng(0)
>>> for _ in range(40):
...     _ = online.update(np.exp(0.1 * rng.standard_normal(3)))
>>> online.predict(horizon=2).shape, len(online.refit_seconds)
((3, 2), 2)
"""

from __future__ import annotations

import time

import numpy as np

from .base import Forecaster

__all__ = ["OnlineForecaster"]


class OnlineForecaster:
    """Wrap a forecaster so it learns from the run's own telemetry.

    Args:
        forecaster: Any ``predictor`` forecaster (typically the pretrained default).
        refit_every: Updates between refits; ``0`` never refits.
        refit_kwargs: Passed to ``forecaster.refit`` (e.g. ``epochs=1`` for the GRU).

    ``refit_seconds`` lists the wall time of every refit, and ``update_seconds``
    the time spent in ``update`` (excluding refits), so a training loop can
    report what online learning costs it.
    """

    def __init__(self, forecaster: Forecaster, refit_every: int = 500, **refit_kwargs):
        self.forecaster = forecaster
        self.refit_every = int(refit_every)
        self.refit_kwargs = refit_kwargs
        self.refit_seconds: list[float] = []
        self.update_seconds = 0.0
        self._since_refit = 0

    def update(self, observations) -> "OnlineForecaster":
        start = time.perf_counter()
        self.forecaster.update(observations)
        self.update_seconds += time.perf_counter() - start
        self._since_refit += 1
        if self.refit_every and self._since_refit >= self.refit_every:
            self.refit_seconds.append(self.forecaster.refit(**self.refit_kwargs))
            self._since_refit = 0
        return self

    def predict(self, horizon: int = 1) -> np.ndarray:
        return self.forecaster.predict(horizon=horizon)

    def cost_summary(self) -> dict:
        """Refit count, median and max seconds, and total seconds spent learning online."""
        r = np.array(self.refit_seconds)
        return {"refits": int(r.size),
                "median_refit_s": float(np.median(r)) if r.size else 0.0,
                "max_refit_s": float(r.max()) if r.size else 0.0,
                "total_s": float(r.sum() + self.update_seconds)}
