"""Forecaster interface, baselines, input cleaning and persistence (no TensorFlow)."""

import warnings

import numpy as np
import pytest

import predictor
from predictor import ForecasterFileError, InvalidSpeedWarning
from predictor.baselines import (ChangePointSmoothing, ExponentialSmoothing, LagRegressor,
                                 LastValue, MovingAverage)
from predictor.windows import forecast_origins


def ar1_series(n_series=4, length=400, phi=0.8, sigma=0.1, seed=0):
    """Positive speeds whose log follows a mean-reverting AR(1) around a per-series level."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_series):
        z = np.zeros(length)
        for t in range(1, length):
            z[t] = phi * z[t - 1] + sigma * rng.standard_normal()
        out.append((1.0 + i) * np.exp(z))
    return out


ALL = [LastValue, lambda: MovingAverage(window=5), MovingAverage, ExponentialSmoothing,
       lambda: ExponentialSmoothing(alpha=0.3), lambda: LagRegressor(lags=8, horizon=5),
       ChangePointSmoothing, lambda: ChangePointSmoothing(alpha=0.2, threshold=2.0)]


@pytest.mark.parametrize("make", ALL)
def test_predict_shape_and_positive(make):
    series = ar1_series()
    f = make().fit(series)
    hist = [s[:50] for s in series] + [series[0][:3]]
    out = f.predict(hist, horizon=12)
    assert out.shape == (5, 12) and np.all(np.isfinite(out)) and np.all(out > 0)


@pytest.mark.parametrize("make", ALL)
def test_save_load_round_trips_exactly(make, tmp_path):
    series = ar1_series()
    f = make().fit(series)
    f.update(np.stack([s[:30] for s in series]))
    path = tmp_path / "model.bin"
    f.save(path)
    g = predictor.load(path)
    assert type(g) is type(f) and g.get_params() == f.get_params()
    assert np.array_equal(g.predict(series, horizon=7), f.predict(series, horizon=7))
    assert np.array_equal(g.predict(horizon=3), f.predict(horizon=3))
    assert path.exists() and not (tmp_path / "model.bin.npz").exists()


def test_missing_truncated_and_mismatched_files(tmp_path):
    with pytest.raises(ForecasterFileError, match="nope.npz.*does not exist.*save"):
        LastValue.load(tmp_path / "nope.npz")
    path = tmp_path / "m.npz"
    ExponentialSmoothing(alpha=0.2).save(path)
    with pytest.raises(ForecasterFileError, match="holds a 'ExponentialSmoothing'.*predictor.load"):
        MovingAverage.load(path)
    data = path.read_bytes()
    (tmp_path / "t.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ForecasterFileError, match="t.npz.*truncated"):
        predictor.load(tmp_path / "t.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(ForecasterFileError, match="junk.npz"):
        predictor.load(tmp_path / "junk.npz")


def test_mismatched_state_shape_is_reported(tmp_path):
    f = LagRegressor(lags=8, horizon=5).fit(ar1_series())
    f.coef_ = f.coef_[:, :3]
    f.save(tmp_path / "bad.npz")
    with pytest.raises(ForecasterFileError, match="bad.npz.*does not match LagRegressor"):
        predictor.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("bad", [np.nan, 0.0, -3.0, np.inf])
def test_invalid_values_are_cleaned_with_a_warning(bad):
    hist = np.array([2.0, 2.0, bad, 4.0, bad])
    with pytest.warns(InvalidSpeedWarning):
        out = ExponentialSmoothing(alpha=1.0).predict([hist])
    assert out[0, 0] == 4.0
    with pytest.warns(InvalidSpeedWarning):
        f = MovingAverage(window=3).update([2.0, bad]).update([bad, 6.0])
    assert np.all(np.isfinite(f.predict(horizon=2)))
    with pytest.raises(ValueError, match="no valid"):
        LastValue().predict([np.array([np.nan, -1.0])])


def test_unfitted_and_bad_arguments():
    with pytest.raises(predictor.NotFittedError):
        ExponentialSmoothing().predict([np.ones(5)])
    with pytest.raises(ValueError, match="horizon"):
        LastValue().predict([np.ones(5)], horizon=0)
    with pytest.raises(ValueError, match="update"):
        LastValue().predict(horizon=1)
    with pytest.raises(ValueError, match="workers"):
        LastValue().update([1.0, 2.0]).update([1.0, 2.0, 3.0])


def test_online_update_matches_explicit_histories():
    series = ar1_series(n_series=3, length=60)
    f = ExponentialSmoothing(alpha=0.3)
    for t in range(60):
        f.update(np.array([s[t] for s in series]))
    assert np.allclose(f.predict(horizon=2), f.predict(series, horizon=2))


def test_selection_adapts_to_the_data():
    rng = np.random.default_rng(1)
    noise = [5.0 * np.exp(0.2 * rng.standard_normal(500)) for _ in range(3)]
    walk = [np.exp(np.cumsum(0.05 * rng.standard_normal(500))) for _ in range(3)]
    assert ExponentialSmoothing().fit(noise).alpha_ <= 0.1
    assert ExponentialSmoothing().fit(walk).alpha_ >= 0.7
    assert MovingAverage().fit(noise).window_ >= 20
    assert MovingAverage().fit(walk).window_ <= 3


def test_lag_regressor_learns_mean_reversion():
    train, test = ar1_series(seed=0), ar1_series(seed=1)
    hist, truth, _ = forecast_origins(test, min_history=20, horizon=5, stride=7)
    lag = LagRegressor(lags=8, horizon=5).fit(train).predict(hist, horizon=5)
    last = LastValue().predict(hist, horizon=5)
    err = lambda p: np.mean(np.abs(np.log(p / truth)))  # noqa: E731
    assert err(lag) < 0.95 * err(last)


def test_refit_records_its_cost():
    f = LagRegressor(lags=8, horizon=5)
    f.update(np.stack(ar1_series(length=100)))
    seconds = f.refit()
    assert seconds > 0 and f.last_refit_seconds_ == seconds and f.is_fitted
