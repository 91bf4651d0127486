"""GRU forecasters (tf_keras): exponential smoothing + GRU, and the GRU-alone ablation.

Both models see the last ``window`` speeds as log-ratios to a reference value
and output ``log(y[t+k] / reference)`` for ``k = 1..horizon`` directly (one head
per step, no error feedback). Working in log-ratios makes one model serve
workers whose speeds differ by orders of magnitude. The default loss is MAPE,
|forecast / truth - 1|, the evaluation metric itself (``loss="mape"``);
``loss="l1_log"`` makes it forecast the conditional median instead.

* ``GRUSmoothingForecaster``: the reference is the exponential-smoothing level
  (by default restarted at change points, ``windows.changepoint_levels``, so it
  follows a co-located job starting or a pause within two steps), and the
  level's path is a second input channel; with a zero-initialised head the
  untrained model *is* that smoothing, and the GRU learns the correction (mean
  reversion after spikes, persistence of slow episodes).
* ``GRUOnly``: the reference is the last value and the only channel is the raw
  window, i.e. the same network without smoothing.

Example:

>>> import numpy as np
>>> from predictor.gru import GRUSmoothingForecaster
>>> rng = np.random.default_rng(0)
>>> series = [np.exp(0.1 * rng.standard_normal(200)) for _ in range(4)]
>>> f = GRUSmoothingForecaster(window=8, units=4, horizon=5, epochs=1).fit(series)
>>> f.predict(series, horizon=5).shape
(4, 5)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .base import Forecaster, NotFittedError
from .windows import (CHANGEPOINT_CONTEXT, changepoint_levels, check_jump, edge_fill,
                      forecast_origins, recent_matrix, smoothing_weights)

__all__ = ["GRUSmoothingForecaster", "GRUOnly", "DEFAULT_MODEL_PATH"]

DEFAULT_MODEL_PATH = Path(__file__).resolve().parent / "data" / "gru_smoothing_default.npz"


def _keras():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras as keras
    return tf, keras


# Losses on log-ratio outputs ``p`` and targets ``y``. "mape" is |forecast / truth - 1|,
# the evaluation metric itself (it rewards forecasting slightly below the median of a
# right-skewed speed); "l1_log" targets the median.
def _mape_loss(tf, p, y):
    return tf.reduce_mean(tf.abs(tf.exp(p - y) - 1.0))


def _l1_log_loss(tf, p, y):
    return tf.reduce_mean(tf.abs(p - y))


_LOSSES = {"mape": _mape_loss, "l1_log": _l1_log_loss}


class _GRUForecaster(Forecaster):
    """Shared network, training loop, inference and persistence."""

    _param_names = ("window", "units", "horizon", "epochs", "batch_size", "learning_rate",
                    "patience", "refit_epochs", "loss", "seed")
    needs_fit = True
    n_channels = 1

    def __init__(self, window: int = 32, units: int = 32, horizon: int = 10, epochs: int = 40,
                 batch_size: int = 256, learning_rate: float = 3e-3, patience: int = 6,
                 refit_epochs: int = 2, loss: str = "mape", seed: int = 0):
        if window < 2 or units < 1 or horizon < 1 or epochs < 0:
            raise ValueError("need window >= 2, units >= 1, horizon >= 1, epochs >= 0")
        if loss not in _LOSSES:
            raise ValueError(f"loss must be one of {sorted(_LOSSES)}, got {loss!r}")
        self.loss = loss
        self.window, self.units, self.horizon = int(window), int(units), int(horizon)
        self.epochs, self.batch_size = int(epochs), int(batch_size)
        self.learning_rate, self.patience = float(learning_rate), int(patience)
        self.refit_epochs, self.seed = int(refit_epochs), int(seed)
        self.context = self.window
        self.model_ = None

    # -- features ---------------------------------------------------------
    def _features(self, recent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(reference [n], inputs [n, window, channels])`` from NaN-padded history."""
        raise NotImplementedError

    def _training_arrays(self, series):
        hist, truth, _ = forecast_origins(series, min_history=1, horizon=self.horizon,
                                          max_history=self.context)
        if not hist:
            raise ValueError(f"series too short: {type(self).__name__} needs a series with at "
                             f"least {self.horizon + 1} points")
        ref, x = self._features(recent_matrix(hist, self.context))
        return x.astype(np.float32), np.log(truth / ref[:, None]).astype(np.float32)

    # -- network ----------------------------------------------------------
    def _build(self):
        tf, keras = _keras()
        init = keras.initializers
        inp = keras.Input((self.window, self.n_channels))
        h = keras.layers.GRU(self.units, kernel_initializer=init.GlorotUniform(self.seed),
                             recurrent_initializer=init.Orthogonal(seed=self.seed))(inp)
        # Zero head: the untrained model forecasts the reference value itself.
        out = keras.layers.Dense(self.horizon, kernel_initializer="zeros")(h)
        self.model_ = keras.Model(inp, out)
        self._infer = tf.function(
            lambda x: self.model_(x, training=False), reduce_retracing=True,
            input_signature=[tf.TensorSpec([None, self.window, self.n_channels], tf.float32)])

    def _train(self, x, y, val, epochs, verbose):
        tf, keras = _keras()
        opt = keras.optimizers.Adam(self.learning_rate)
        model = self.model_

        loss_fn = _LOSSES[self.loss]

        @tf.function(reduce_retracing=True)
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(tf, model(xb, training=True), yb)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            return loss

        rng = np.random.default_rng(self.seed)
        best, best_weights, stale = np.inf, None, 0
        self.history_ = []
        for epoch in range(epochs):
            start = time.perf_counter()
            order = rng.permutation(len(x))
            losses = [float(step(x[idx], y[idx])) for idx in
                      np.array_split(order, max(1, len(x) // self.batch_size))]
            val_loss = self._loss(*val) if val is not None else float(np.mean(losses))
            self.history_.append({"epoch": epoch + 1, "loss": float(np.mean(losses)),
                                  "val_loss": val_loss})
            if verbose:
                print(f"  epoch {epoch + 1}/{epochs}  train {self.loss} {np.mean(losses):.4f}  "
                      f"{'val' if val is not None else 'train'} {self.loss} {val_loss:.4f}  "
                      f"({time.perf_counter() - start:.1f}s)", flush=True)
            if val_loss < best - 1e-5:
                best, best_weights, stale = val_loss, model.get_weights(), 0
            else:
                stale += 1
                if val is not None and stale >= self.patience:
                    break
        if val is not None and best_weights is not None:
            model.set_weights(best_weights)  # early stopping: keep the best validation epoch

    def _loss(self, x, y) -> float:
        tf, _ = _keras()
        return float(_LOSSES[self.loss](tf, tf.constant(self._raw_predict(x)), tf.constant(y)))

    def _raw_predict(self, x: np.ndarray) -> np.ndarray:
        # Chunked so evaluating thousands of origins does not build one huge tensor.
        return np.concatenate([self._infer(x[i:i + 8192]).numpy()
                               for i in range(0, len(x), 8192)]) if len(x) else \
            np.empty((0, self.horizon), np.float32)

    # -- Forecaster hooks -------------------------------------------------
    def _fit(self, series, validation, verbose: int = 0, **kwargs):
        self._prepare(series)
        self._build()
        x, y = self._training_arrays(series)
        val = self._training_arrays(validation) if validation else None
        if verbose:
            print(f"{type(self).__name__}: {len(x)} training windows"
                  + (f", {len(val[0])} validation windows" if val else ""), flush=True)
        self._train(x, y, val, self.epochs, verbose)

    def _prepare(self, series) -> None:
        """Choose data-dependent settings before the network is built."""

    def _refit(self, series, epochs: int | None = None, verbose: int = 0, **kwargs):
        """Fine-tune the current weights on ``series`` (cheap online refitting)."""
        if self.model_ is None:
            self._fit(series, None, verbose=verbose)
            return
        x, y = self._training_arrays(series)
        self._train(x, y, None, self.refit_epochs if epochs is None else epochs, verbose)

    def _predict(self, recent, horizon):
        if self.model_ is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(series), "
                                 "load(path) or GRUSmoothingForecaster.default()")
        ref, x = self._features(recent)
        log_ratio = self._infer(x.astype(np.float32)).numpy().astype(np.float64)
        steps = np.minimum(np.arange(horizon), self.horizon - 1)
        return ref[:, None] * np.exp(log_ratio[:, steps])

    def _get_state(self):
        if self.model_ is None:
            return {}
        return {f"w{i}": w for i, w in enumerate(self.model_.get_weights())}

    def _set_state(self, arrays):
        weights = [arrays[f"w{i}"] for i in range(len(arrays)) if f"w{i}" in arrays]
        if not weights:
            return
        self._build()
        expected = [w.shape for w in self.model_.get_weights()]
        if [w.shape for w in weights] != expected:
            raise ValueError(f"weight shapes {[w.shape for w in weights]} do not fit a "
                             f"window={self.window}, units={self.units}, horizon={self.horizon} "
                             f"network ({expected})")
        self.model_.set_weights(weights)


class GRUSmoothingForecaster(_GRUForecaster):
    """Exponential-smoothing level corrected by a small GRU (the ksync default).

    Args:
        window: Recent speeds the GRU sees.
        units: GRU width (16-32 keeps 64-worker inference around a millisecond).
        horizon: Steps forecast directly; later steps repeat the last one.
        alpha: Smoothing factor of the level; ``None`` picks it on the training
            series, as ``ExponentialSmoothing`` does. The default 0.1 was chosen on
            the validation workers of the Alibaba PAI traces (see evaluate.py).
        context: History used for the level (weights beyond it are negligible).
        changepoint: Restart the level at change points (``run`` = 2 consecutive
            points beyond ``changepoint`` times the noise scale, see
            ``windows.changepoint_levels``), so it follows a regime change in two
            steps instead of ~``1 / alpha``; ``None``: plain smoothing.
        jump: With ``changepoint``, one point beyond ``jump`` times the noise scale
            restarts the level at once (a large shift is followed in one step);
            ``None``: every change waits for its second point. The default 8 was
            measured in `predictor.evaluate`'s regret replay (see predictor/data).
        epochs, batch_size, learning_rate, patience: Training; ``patience`` epochs
            without validation improvement stop training when validation is given.
        refit_epochs: Epochs of fine-tuning per ``refit()`` during training runs.
        seed: Initialisation and shuffling seed.

    Example:

    >>> import numpy as np
    >>> f = GRUSmoothingForecaster.default()
    >>> f.predict(np.full((64, 40), 3.0), horizon=10).shape
    (64, 10)
    >>> f.update(np.full(64, 3.0)).predict(horizon=1).shape    # online use
    (64, 1)
    """

    _param_names = _GRUForecaster._param_names + ("alpha", "context", "changepoint", "jump")
    # Files saved before the change-point level existed keep plain smoothing, and
    # those saved before one-point jumps keep waiting for a second point.
    _legacy_params = {"changepoint": None, "jump": None}
    n_channels = 2

    def __init__(self, window: int = 32, units: int = 32, horizon: int = 10,
                 alpha: float | None = 0.1, context: int = 256,
                 changepoint: float | None = 3.0, jump: float | None = 8.0, **kwargs):
        super().__init__(window=window, units=units, horizon=horizon, **kwargs)
        if alpha is not None and not (0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be in (0, 1] or None, got {alpha!r}")
        if context < window:
            raise ValueError("context must be >= window")
        if changepoint is not None and not changepoint > 0:
            raise ValueError(f"changepoint must be a positive threshold or None, got "
                             f"{changepoint!r}")
        check_jump(jump, changepoint)
        self.alpha, self.context, self.changepoint = alpha, int(context), changepoint
        self.jump = jump
        self.alpha_ = alpha
        self._weights_cache = None

    @classmethod
    def default(cls) -> "GRUSmoothingForecaster":
        """The pretrained model shipped in ``predictor/data`` (see its README)."""
        return cls.load(DEFAULT_MODEL_PATH)

    def _prepare(self, series):
        if self.alpha is None:
            from .baselines import ExponentialSmoothing
            self.alpha_ = ExponentialSmoothing().fit(series).alpha_
        self._weights_cache = None

    def _features(self, recent):
        if self.alpha_ is None:
            raise NotFittedError("GRUSmoothingForecaster is not fitted")
        if self._weights_cache is None:
            self._weights_cache = smoothing_weights(self.context, self.alpha_, self.window)
        filled = edge_fill(recent)
        if self.changepoint is None:
            path = filled @ self._weights_cache       # level after each window step
        else:
            tail = recent[:, -max(self.window, CHANGEPOINT_CONTEXT):]
            path = changepoint_levels(tail, self.alpha_, self.changepoint,
                                      jump=self.jump)[:, -self.window:]
        level = path[:, -1]
        log_level = np.log(level)[:, None]
        x = np.stack([np.log(filled[:, -self.window:]) - log_level, np.log(path) - log_level],
                     axis=-1)
        return level, x

    def _get_state(self):
        state = super()._get_state()
        if self.alpha_ is not None:
            state["alpha"] = np.array(self.alpha_)
        return state

    def _set_state(self, arrays):
        if "alpha" in arrays:
            self.alpha_ = float(arrays.pop("alpha"))
            self._weights_cache = None
        super()._set_state(arrays)


class GRUOnly(_GRUForecaster):
    """The same GRU without smoothing: inputs and outputs relative to the last value.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> series = [np.exp(0.1 * rng.standard_normal(200)) for _ in range(2)]
    >>> GRUOnly(window=8, units=4, horizon=3, epochs=1).fit(series).predict(series).shape
    (2, 1)
    """

    def _features(self, recent):
        filled = edge_fill(recent[:, -self.window:])
        last = filled[:, -1]
        return last, np.log(filled / last[:, None])[:, :, None]
