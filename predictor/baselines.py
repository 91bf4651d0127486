"""Baseline forecasters every evaluation must sit beside (no TensorFlow here).

``MovingAverage`` and ``ExponentialSmoothing`` pick their window / smoothing
factor on the training series when constructed with ``None`` (the default), so
the baselines are tuned as fairly as the neural models.

Example:

>>> import numpy as np
>>> from predictor.baselines import ExponentialSmoothing, MovingAverage
>>> MovingAverage(window=2).predict([np.array([1.0, 2.0, 4.0])], horizon=2).tolist()
[[3.0, 3.0]]
>>> ExponentialSmoothing(alpha=0.5).predict([np.array([2.0, 4.0])]).tolist()
[[3.0]]
"""

from __future__ import annotations

import numpy as np

from .base import Forecaster, NotFittedError
from .metrics import log_mae
from .windows import (CHANGEPOINT_CONTEXT, changepoint_levels, check_jump, edge_fill,
                      exp_smooth, forecast_origins, recent_matrix)

__all__ = ["LastValue", "MovingAverage", "ExponentialSmoothing", "ChangePointSmoothing",
           "LagRegressor"]

#: horizons over which model selection scores candidates (the allocator's R).
SELECTION_HORIZON = 10


def _select(series, grid, score_fn, context: int, max_origins: int = 4000):
    """Grid value with the lowest log-MAE over horizons 1..R on training origins."""
    hist, truth, _ = forecast_origins(series, min_history=1, horizon=SELECTION_HORIZON,
                                      max_history=context, max_origins=max_origins)
    if not hist:
        return None
    recent = recent_matrix(hist, context)
    scores = [log_mae(truth, score_fn(recent, v, SELECTION_HORIZON)) for v in grid]
    return grid[int(np.argmin(scores))]


def _flat(level: np.ndarray, horizon: int) -> np.ndarray:
    return np.repeat(level[:, None], horizon, axis=1)


class LastValue(Forecaster):
    """Next speeds equal the last measured one (persistence forecast).

    >>> import numpy as np
    >>> LastValue().predict([np.array([3.0, 2.0])], horizon=2).tolist()
    [[2.0, 2.0]]
    """

    context = 1

    def _predict(self, recent, horizon):
        return _flat(recent[:, -1], horizon)


class MovingAverage(Forecaster):
    """Mean of the last ``window`` speeds; ``window=None`` chooses it on ``fit``.

    >>> import numpy as np
    >>> MovingAverage(window=3).predict([np.array([1.0, 2.0, 3.0, 4.0])]).tolist()
    [[3.0]]
    """

    _param_names = ("window",)
    grid = (2, 3, 5, 10, 20, 50, 100)

    def __init__(self, window: int | None = None):
        if window is not None and (int(window) != window or window < 1):
            raise ValueError(f"window must be a positive integer or None, got {window!r}")
        self.window = window
        self.window_ = window
        self.context = window or max(self.grid)

    @property
    def needs_fit(self):
        return self.window is None

    @staticmethod
    def _mean(recent, window, horizon):
        return _flat(np.nanmean(recent[:, -window:], axis=1), horizon)

    def _fit(self, series, validation, **kwargs):
        if self.window is None:
            self.window_ = _select(series, self.grid, self._mean, max(self.grid)) or 10
        self.context = self.window_

    def _predict(self, recent, horizon):
        return self._mean(recent, self.window_, horizon)

    def _get_state(self):
        return {"window": np.array(self.window_ or 0)}

    def _set_state(self, arrays):
        if "window" in arrays and int(arrays["window"]) > 0:
            self.window_ = int(arrays["window"])
            self.context = self.window_


class ExponentialSmoothing(Forecaster):
    """Simple exponential smoothing: flat forecast at the smoothed level.

    ``alpha=None`` chooses the smoothing factor on ``fit``. The level is computed
    over the last ``context`` points (weight of older points < 1e-5 for alpha >= 0.05).

    >>> import numpy as np
    >>> ExponentialSmoothing(alpha=1.0).predict([np.array([5.0, 7.0])]).tolist()
    [[7.0]]
    """

    _param_names = ("alpha",)
    grid = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
    context = 256

    def __init__(self, alpha: float | None = None):
        if alpha is not None and not (0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be in (0, 1] or None, got {alpha!r}")
        self.alpha = alpha
        self.alpha_ = alpha

    @property
    def needs_fit(self):
        return self.alpha is None

    @staticmethod
    def _level(recent, alpha, horizon):
        return _flat(exp_smooth(recent, alpha), horizon)

    def _fit(self, series, validation, **kwargs):
        if self.alpha is None:
            self.alpha_ = _select(series, self.grid, self._level, self.context) or 0.3

    def _predict(self, recent, horizon):
        return self._level(recent, self.alpha_, horizon)

    def _get_state(self):
        return {"alpha": np.array(self.alpha_ or 0.0)}

    def _set_state(self, arrays):
        if "alpha" in arrays and float(arrays["alpha"]) > 0:
            self.alpha_ = float(arrays["alpha"])


class ChangePointSmoothing(Forecaster):
    """Exponential smoothing that restarts at change points (``windows.changepoint_levels``).

    Flat forecast at the level; ``alpha=None`` chooses the smoothing factor on ``fit``.
    Not one of the classical baselines the GRU must beat: it is the GRU's level,
    reported alone to show what the network adds.

    >>> import numpy as np
    >>> f = ChangePointSmoothing(alpha=0.1)
    >>> f.predict([np.array([1.0, 1.02, 0.98, 1.0, 0.5, 0.5])]).round(2).tolist()
    [[0.5]]
    """

    _param_names = ("alpha", "threshold", "jump")
    _legacy_params = {"jump": None}
    grid = ExponentialSmoothing.grid
    context = CHANGEPOINT_CONTEXT

    def __init__(self, alpha: float | None = None, threshold: float = 3.0,
                 jump: float | None = 8.0):
        if alpha is not None and not (0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be in (0, 1] or None, got {alpha!r}")
        check_jump(jump, threshold)
        self.alpha, self.alpha_, self.threshold = alpha, alpha, float(threshold)
        self.jump = jump

    @property
    def needs_fit(self):
        return self.alpha is None

    def _level(self, recent, alpha, horizon):
        return _flat(changepoint_levels(recent, alpha, self.threshold, jump=self.jump)[:, -1],
                     horizon)

    def _fit(self, series, validation, **kwargs):
        if self.alpha is None:
            self.alpha_ = _select(series, self.grid, self._level, self.context,
                                  max_origins=1000) or 0.1

    def _predict(self, recent, horizon):
        return self._level(recent, self.alpha_, horizon)

    _get_state = ExponentialSmoothing._get_state
    _set_state = ExponentialSmoothing._set_state


def lag_features(recent: np.ndarray, lags: int) -> np.ndarray:
    """Log-ratios of the last ``lags`` speeds to the latest one (scale-free)."""
    x = edge_fill(recent[:, -lags:])
    return np.log(x[:, :-1] / x[:, -1:])


class LagRegressor(Forecaster):
    """scikit-learn ridge regression on lag features, one output per horizon step.

    Predicts ``log(y[t+k] / y[t])`` for ``k = 1..horizon`` from the log-ratios of
    the last ``lags`` speeds to ``y[t]`` (direct multi-step, no error feedback).
    Forecasts past ``horizon`` repeat the last step.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> series = [np.exp(0.1 * rng.standard_normal(300)) for _ in range(3)]
    >>> LagRegressor(lags=8, horizon=5).fit(series).predict(series, horizon=5).shape
    (3, 5)
    """

    _param_names = ("lags", "horizon", "ridge_alpha")
    needs_fit = True

    def __init__(self, lags: int = 16, horizon: int = 10, ridge_alpha: float = 1.0):
        if lags < 2 or horizon < 1:
            raise ValueError("need lags >= 2 and horizon >= 1")
        self.lags, self.horizon, self.ridge_alpha = int(lags), int(horizon), float(ridge_alpha)
        self.context = self.lags

    def _fit(self, series, validation, max_origins: int = 200_000, **kwargs):
        from sklearn.linear_model import Ridge  # heavy import, only when fitting

        hist, truth, _ = forecast_origins(series, min_history=self.lags, horizon=self.horizon,
                                          max_history=self.lags, max_origins=max_origins)
        if not hist:
            raise ValueError(f"series too short: LagRegressor needs at least "
                             f"{self.lags + self.horizon} points in one series")
        recent = recent_matrix(hist, self.lags)
        model = Ridge(alpha=self.ridge_alpha).fit(lag_features(recent, self.lags),
                                                  np.log(truth / recent[:, -1:]))
        self.coef_ = np.asarray(model.coef_, dtype=np.float64)
        self.intercept_ = np.asarray(model.intercept_, dtype=np.float64)

    def _predict(self, recent, horizon):
        if not hasattr(self, "coef_"):
            raise NotFittedError("LagRegressor is not fitted: call fit(series) first")
        log_ratio = lag_features(recent, self.lags) @ self.coef_.T + self.intercept_
        steps = np.minimum(np.arange(horizon), self.horizon - 1)
        return recent[:, -1:] * np.exp(log_ratio[:, steps])

    def _get_state(self):
        return {"coef": self.coef_, "intercept": self.intercept_} if hasattr(self, "coef_") else {}

    def _set_state(self, arrays):
        if "coef" not in arrays:
            return
        if arrays["coef"].shape != (self.horizon, self.lags - 1):
            raise ValueError(f"coef shape {arrays['coef'].shape} != {(self.horizon, self.lags - 1)}")
        self.coef_, self.intercept_ = arrays["coef"], arrays["intercept"]
