"""GRU forecasters, online refit, evaluation CLI and benchmark (tiny models, synthetic data)."""

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import predictor
from predictor import ForecasterFileError, InvalidSpeedWarning
from predictor.gru import DEFAULT_MODEL_PATH, GRUOnly, GRUSmoothingForecaster
from predictor.windows import forecast_origins

TINY = dict(window=8, units=4, horizon=5, epochs=2, batch_size=64)
SAMPLE = Path(predictor.__file__).parent / "data" / "job_2_norm_sample.csv"


def regime_series(n_series=4, length=300, seed=0):
    """Speeds with per-series scale, AR(1) noise and occasional slow episodes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_series):
        z = np.zeros(length)
        for t in range(1, length):
            z[t] = 0.7 * z[t - 1] + 0.05 * rng.standard_normal()
        slow = np.zeros(length)
        start = rng.integers(length // 6, length - length // 5)
        slow[start:start + length // 8] = np.log(0.4)
        out.append((2.0 + 3 * i) * np.exp(z + slow))
    return out


@pytest.fixture(scope="module")
def fitted():
    return GRUSmoothingForecaster(**TINY).fit(regime_series(), validation=regime_series(2, seed=9))


def test_predict_shape_scale_and_long_horizon(fitted):
    series = regime_series(seed=3)
    out = fitted.predict(series, horizon=12)
    assert out.shape == (4, 12) and np.all(np.isfinite(out)) and np.all(out > 0)
    # Beyond the trained horizon the last direct step is repeated.
    assert np.array_equal(out[:, 5:], np.repeat(out[:, 4:5], 7, axis=1))
    # Log-ratio inputs: scaling every speed scales the forecast by the same factor.
    assert np.allclose(fitted.predict([100 * s for s in series], horizon=3),
                       100 * fitted.predict(series, horizon=3), rtol=1e-4)
    # Short histories are edge-padded rather than rejected.
    assert fitted.predict([np.array([3.0])], horizon=2).shape == (1, 2)


def test_untrained_head_equals_exponential_smoothing():
    series = regime_series()
    f = GRUSmoothingForecaster(alpha=0.3, changepoint=None, **dict(TINY, epochs=0)).fit(series)
    es = predictor.ExponentialSmoothing(alpha=0.3).predict(series, horizon=5)
    assert np.allclose(f.predict(series, horizon=5), es, rtol=1e-6)


def test_untrained_changepoint_head_equals_changepoint_smoothing():
    series = regime_series()
    f = GRUSmoothingForecaster(alpha=0.2, changepoint=3.0, **dict(TINY, epochs=0)).fit(series)
    cp = predictor.baselines.ChangePointSmoothing(alpha=0.2, threshold=3.0)
    assert np.allclose(f.predict(series, horizon=5), cp.predict(series, horizon=5), rtol=1e-6)
    # The slow episodes are followed within a few steps, unlike plain smoothing's level.
    start = int(np.argmax(np.diff(np.log(series[0])) < -0.5)) + 1
    hist = [series[0][:start + 3]]
    drop = series[0][start + 2]
    plain = GRUSmoothingForecaster(alpha=0.2, changepoint=None, **dict(TINY, epochs=0)).fit(series)
    assert abs(f.predict(hist)[0, 0] / drop - 1) < 0.2 < abs(plain.predict(hist)[0, 0] / drop - 1)
    with pytest.raises(ValueError, match="changepoint"):
        GRUSmoothingForecaster(changepoint=0.0)


def test_training_beats_the_untrained_reference():
    train, test = regime_series(6, 400, seed=1), regime_series(3, 400, seed=2)
    hist, truth, _ = forecast_origins(test, min_history=8, horizon=5, stride=3)
    err = lambda f: np.mean(np.abs(f.predict(hist, horizon=5) / truth - 1))  # noqa: E731
    untrained = GRUSmoothingForecaster(alpha=0.5, **dict(TINY, epochs=0)).fit(train)
    trained = GRUSmoothingForecaster(alpha=0.5, **dict(TINY, epochs=6, units=8)).fit(train)
    assert err(trained) < err(untrained)


@pytest.mark.parametrize("cls", [GRUSmoothingForecaster, GRUOnly])
def test_save_load_round_trip_and_mismatch(cls, tmp_path):
    series = regime_series()
    f = cls(**TINY).fit(series)
    f.update(np.stack([s[:20] for s in series]))
    f.save(tmp_path / "gru.npz")
    g = predictor.load(tmp_path / "gru.npz")
    assert type(g) is cls and g.get_params() == f.get_params()
    assert np.array_equal(g.predict(series, horizon=5), f.predict(series, horizon=5))
    assert np.array_equal(g.predict(horizon=2), f.predict(horizon=2))
    other = GRUOnly if cls is GRUSmoothingForecaster else GRUSmoothingForecaster
    with pytest.raises(ForecasterFileError, match="gru.npz.*holds a"):
        other.load(tmp_path / "gru.npz")


def test_weights_that_do_not_fit_the_network_are_reported(tmp_path):
    f = GRUSmoothingForecaster(**TINY).fit(regime_series())
    f.save(tmp_path / "a.npz")
    header_swap = GRUSmoothingForecaster(**dict(TINY, units=6))
    header_swap.model_ = f.model_  # weights of a 4-unit net under a 6-unit header
    header_swap.alpha_ = f.alpha_
    header_swap.save(tmp_path / "b.npz")
    with pytest.raises(ForecasterFileError, match="b.npz.*does not match GRUSmoothingForecaster"):
        predictor.load(tmp_path / "b.npz")
    data = (tmp_path / "a.npz").read_bytes()
    (tmp_path / "c.npz").write_bytes(data[:100])
    with pytest.raises(ForecasterFileError, match="c.npz.*truncated"):
        GRUSmoothingForecaster.load(tmp_path / "c.npz")


def test_unfitted_gru_and_bad_input(fitted):
    with pytest.raises(predictor.NotFittedError):
        GRUSmoothingForecaster(**TINY).predict([np.ones(10)])
    bad = regime_series(1)[0].copy()
    bad[[5, 20]] = [np.nan, -1.0]
    with pytest.warns(InvalidSpeedWarning):
        out = fitted.predict([bad], horizon=3)
    assert np.all(np.isfinite(out))


def test_online_refit_is_measured_and_changes_the_model(fitted, tmp_path):
    fitted.save(tmp_path / "m.npz")
    model = predictor.load(tmp_path / "m.npz")
    online = predictor.OnlineForecaster(model, refit_every=30)
    before = model.predict(regime_series(seed=4), horizon=5)
    for row in np.stack(regime_series(seed=5, length=60)).T:
        online.update(row)
    cost = online.cost_summary()
    assert cost["refits"] == 2 and cost["median_refit_s"] > 0
    assert online.predict(horizon=5).shape == (4, 5)
    assert not np.allclose(model.predict(regime_series(seed=4), horizon=5), before)


def test_default_model_is_small_and_loads():
    assert DEFAULT_MODEL_PATH.exists(), "run python -m predictor.train_default"
    assert DEFAULT_MODEL_PATH.stat().st_size < 64 * 1024
    f = GRUSmoothingForecaster.default()
    out = f.predict(np.full((64, 40), 3.0), horizon=10)
    assert out.shape == (64, 10) and np.allclose(out, 3.0, rtol=0.2)


def test_evaluate_cli_on_vendored_sample(tmp_path, capsys):
    from predictor.evaluate import main
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(SAMPLE, traces / "job_2_norm_sample.csv")
    (traces / "notes.csv").write_text("a,b\n1,2\n")  # other CSVs are skipped
    main(["--traces", str(traces), "--out", str(tmp_path / "out"), "--min-history", "16",
          "--epochs", "1", "--units", "4", "--window", "8"])
    printed = capsys.readouterr().out
    assert "| GRUSmoothing |" in printed and "MAPE h=10" in printed
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(report["metrics"]) == {"GRUSmoothing", "LastValue", "MovingAverage",
                                      "ExpSmoothing", "GRUOnly", "LagRegressor", "CPSmoothing"}
    assert not set(report["split"]["test"]) & set(report["split"]["train"])
    assert (tmp_path / "out" / "forecasts.png").stat().st_size > 1000


def test_bench_latency_runs(fitted, tmp_path):
    from predictor.bench import latency_ms, refit_seconds
    fitted.save(tmp_path / "m.npz")
    copy = predictor.load(tmp_path / "m.npz")  # refit must not alter the shared fixture
    stats = latency_ms(copy, 64, repeats=5)
    assert 0 < stats["median_ms"] < 1000
    assert refit_seconds(copy, 4, points=40, repeats=1) > 0
