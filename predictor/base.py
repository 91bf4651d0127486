"""The forecaster interface shared by every model in ``predictor``.

A forecaster maps each worker's recent speeds to its next ``horizon`` speeds,
for many workers at once. Parameters go in ``__init__``; ``fit`` learns from
training series; ``predict`` takes explicit histories, or uses the buffers
filled online by ``update``; ``refit`` re-learns from those buffers and
records how long it took; ``save``/``load`` round-trip exactly.

Example:

>>> import numpy as np
>>> from predictor.baselines import LastValue
>>> f = LastValue().fit([np.array([1.0, 2.0, 3.0])])
>>> f.predict([np.array([4.0, 5.0]), np.array([2.0])], horizon=3).tolist()
[[5.0, 5.0, 5.0], [2.0, 2.0, 2.0]]
>>> f.update([6.0, 1.0]).predict(horizon=1).tolist()
[[6.0], [1.0]]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .checks import InvalidSpeedWarning, clean_histories, clean_series
from .persist import ForecasterFileError, read_file, write_file
from .windows import recent_matrix

__all__ = ["Forecaster", "NotFittedError", "load"]

_REGISTRY: dict[str, type] = {}


class NotFittedError(ValueError, AttributeError):
    """``predict`` was called on a forecaster that needs ``fit`` first."""


class Forecaster:
    """Base class. Subclasses set ``_param_names`` and implement ``_predict``.

    Optional hooks: ``_fit`` (learn from cleaned series), ``_get_state`` /
    ``_set_state`` (fitted arrays for persistence) and ``context`` (how many
    recent points ``_predict`` needs).
    """

    _param_names: tuple[str, ...] = ()
    #: values of parameters added after release, for files that do not name them.
    _legacy_params: dict = {}
    #: recent points handed to ``_predict``; also what ``update`` must keep.
    context: int = 256
    #: points per worker kept by ``update`` for ``refit``.
    max_buffer: int = 4096
    needs_fit: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    # -- parameters -------------------------------------------------------
    def get_params(self) -> dict:
        return {k: getattr(self, k) for k in self._param_names}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    @property
    def is_fitted(self) -> bool:
        return getattr(self, "fitted_", False) or not self.needs_fit

    # -- learning ---------------------------------------------------------
    def fit(self, series, validation=None, **kwargs) -> "Forecaster":
        """Learn from training ``series`` (a list of 1-D speed arrays, or one array).

        ``validation`` (same form) is only used by models that early-stop or
        select hyper-parameters; it is never trained on.
        """
        train = clean_histories(series, "series")
        val = None if validation is None else clean_histories(validation, "validation")
        self._fit(train, val, **kwargs)
        self.fitted_ = True
        return self

    def _fit(self, series, validation, **kwargs) -> None:
        """Stateless forecasters learn nothing."""

    def refit(self, **kwargs) -> float:
        """Re-learn from the online buffers; return (and keep) the seconds it took."""
        if not getattr(self, "_buffers", None):
            raise ValueError("nothing to refit on: call update(observations) first")
        start = time.perf_counter()
        self._refit(list(self._buffers), **kwargs)
        self.fitted_ = True
        self.last_refit_seconds_ = time.perf_counter() - start
        return self.last_refit_seconds_

    def _refit(self, series, **kwargs) -> None:
        self._fit(series, None, **kwargs)

    # -- forecasting ------------------------------------------------------
    def predict(self, histories=None, horizon: int = 1) -> np.ndarray:
        """Forecast the next ``horizon`` speeds: array ``[n_workers, horizon]``.

        ``histories`` is a list of 1-D speed arrays (lengths may differ), a 2-D
        array with one row per worker, or ``None`` for the ``update`` buffers.
        """
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        if not self.is_fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(series) "
                                 "or load(path) first")
        if histories is None:
            if not getattr(self, "_buffers", None):
                raise ValueError("no histories given and no update() buffers to forecast from")
            hist = self._buffers
        else:
            hist = clean_histories(histories)
        out = self._predict(recent_matrix(hist, self.context), int(horizon))
        return np.asarray(out, dtype=np.float64)

    def _predict(self, recent: np.ndarray, horizon: int) -> np.ndarray:
        raise NotImplementedError

    # -- online -----------------------------------------------------------
    def update(self, observations) -> "Forecaster":
        """Append new measurements: one value per worker, ``[n_workers, k]``, or a list
        of per-worker arrays. Invalid values are carried forward with a warning."""
        obs = _per_worker(observations)
        buffers = getattr(self, "_buffers", None) or []
        if buffers and len(obs) != len(buffers):
            raise ValueError(f"update got {len(obs)} workers, buffers hold {len(buffers)}; "
                             "call reset_buffers() if the worker set changed")
        if not buffers:
            buffers = [np.empty(0) for _ in obs]
        for i, new in enumerate(obs):
            if new.size == 0:
                continue
            prev = buffers[i][-1:]
            merged = np.concatenate([prev, new])
            bad = ~np.isfinite(merged) | (merged <= 0)
            if bad.all():
                warnings.warn(f"worker {i}: no valid speed yet, dropped {new.size} value(s)",
                              InvalidSpeedWarning, stacklevel=2)
                continue
            cleaned = clean_series(merged, f"worker {i} observations")[prev.size:]
            buffers[i] = np.concatenate([buffers[i], cleaned])[-self.max_buffer:]
        self._buffers = buffers
        return self

    def reset_buffers(self) -> None:
        self._buffers = []

    # -- persistence ------------------------------------------------------
    def _get_state(self) -> dict[str, np.ndarray]:
        return {}

    def _set_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore fitted arrays (subclasses check shapes and raise ``ValueError``)."""

    def save(self, path) -> None:
        """Write parameters, fitted state and online buffers to one ``.npz`` file."""
        arrays = {f"state_{k}": v for k, v in self._get_state().items()}
        buffers = getattr(self, "_buffers", None) or []
        arrays["buffer_values"] = np.concatenate(buffers) if buffers else np.empty(0)
        arrays["buffer_lengths"] = np.array([len(b) for b in buffers], dtype=np.int64)
        header = {"class": type(self).__name__, "params": self.get_params(),
                  "fitted": bool(getattr(self, "fitted_", False))}
        write_file(path, header, arrays)

    @classmethod
    def load(cls, path) -> "Forecaster":
        """Load a file written by ``save``; ``Forecaster.load`` accepts any forecaster."""
        header, arrays = read_file(path)
        name = header.get("class")
        klass = _REGISTRY.get(name)
        if klass is None:
            # Only classes whose module was imported are registered; predictor.load imports
            # them all, so the base class never imports its subclasses' modules.
            raise ForecasterFileError(
                f"{path!r} holds a {name!r}, which is not imported; load it with "
                "predictor.load(path) or the matching class")
        if not issubclass(klass, cls):
            raise ForecasterFileError(
                f"{path!r} holds a {name!r}, not a {cls.__name__}; load it with "
                "predictor.load(path) or the matching class")
        try:
            obj = klass(**{**klass._legacy_params, **header["params"]})
            obj._set_state({k[6:]: v for k, v in arrays.items() if k.startswith("state_")})
            lengths = arrays["buffer_lengths"]
            values = arrays["buffer_values"]
            if int(lengths.sum()) != values.size:
                raise ValueError("buffer lengths do not match buffer values")
        except (KeyError, TypeError, ValueError) as exc:
            raise ForecasterFileError(
                f"{path!r} does not match {name} in this version of ksync ({exc}); re-create "
                "it with fit(...) and save(path)") from exc
        obj._buffers = list(np.split(values, np.cumsum(lengths)[:-1])) if lengths.size else []
        obj.fitted_ = bool(header.get("fitted", False))
        return obj


def _per_worker(observations) -> list[np.ndarray]:
    if isinstance(observations, np.ndarray):
        if observations.ndim == 1:
            return [np.array([v], dtype=np.float64) for v in observations]
        if observations.ndim == 2:
            return [np.asarray(r, dtype=np.float64) for r in observations]
        raise ValueError(f"observations must be 1-D or 2-D, got shape {observations.shape}")
    return [np.atleast_1d(np.asarray(o, dtype=np.float64)).ravel() for o in observations]
