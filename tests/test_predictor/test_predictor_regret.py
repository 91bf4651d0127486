"""Allocation regret, regime-change traces, job folds and the regret CLI (no ../shared traces needed)."""

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import predictor
from cluster_sim.__main__ import main as cluster_sim_main
from predictor.baselines import (ChangePointSmoothing, ExponentialSmoothing, LastValue,
                                 MovingAverage)
from predictor.heldout import make_folds
from predictor.regime import machine_usage_speeds, measured, regime_sets, true_speeds
from predictor.regret import allocation_regret, round_times, window_speeds
from predictor.traces import load_traces
from predictor.windows import changepoint_levels

SAMPLE = Path(predictor.__file__).parent / "data" / "job_2_norm_sample.csv"

HEADER = "workers = 4\ntime_budget_s = {budget}\n[slowdowns]\n"
HETERO = "speeds = [1.0, 1.0, 0.5, 0.25]\n[[events]]\n"
SCENARIOS = {
    "colocated": HEADER + "speeds = [1.0, 1.0, 1.0, 1.0]\n[[slowdowns.schedule]]\n"
                          "workers = [1]\ntimes_s = [0.0, 3.0]\nspeeds = [0.5, 1.0]\n"
                          "period_s = 6.0\n",
    "pause": HEADER + HETERO + 'action = "pause"\nworker = 2\nat_s = 2.0\nduration_s = 4.0\n',
    "churn": HEADER + HETERO + 'action = "kill"\nworker = 3\nat_s = 4.0\nrestart_at_s = 9.0\n',
}


def write_scenarios(directory: Path, budget: float = 12.0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in SCENARIOS.items():
        (directory / f"{name}.toml").write_text(text.format(budget=budget))
    return directory


def two_jobs(tmp_path: Path) -> Path:
    """A traces directory with the vendored sample as two jobs, job_a and job_b."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for job in ("job_a", "job_b"):
        shutil.copy(SAMPLE, traces / f"{job}.csv")
    return traces


def step_speeds(length=60, change=30, noise=0.0, seed=0):
    """Four workers; worker 1 drops to a third of its speed at ``change``."""
    true = np.ones((4, length))
    true[1, change:] = 1 / 3
    return true, measured(true, noise, seed) if noise else true


def test_window_speed_is_samples_per_time():
    s = np.array([[1.0, 0.5, 2.0, 2.0, 9.0]])
    # Two windows of two points; the fifth point does not fill a window.
    assert np.allclose(window_speeds(s, 2), [[2 / 3, 2.0]])
    with pytest.raises(ValueError, match="two allocation windows"):
        window_speeds(s, 3)
    assert np.allclose(round_times(np.array([[10, 20], [30, 40]]), np.array([[1.0, 2.0],
                                                                            [3.0, 4.0]])),
                       [10.0, 10.0])


def test_regret_is_zero_when_speeds_hold_and_paid_once_per_change():
    true, _ = step_speeds()
    flat = allocation_regret(np.ones((4, 40)), LastValue(), global_batch=120, min_batch=1)
    assert flat["windows"] == 39 and flat["mean_regret"] == 0.0
    r = allocation_regret(true, LastValue(), global_batch=120, min_batch=1)
    late = np.flatnonzero(r["regret"] > 1e-9)
    # Window 30 runs at the old sizes; from the next window on LastValue has caught up.
    assert late.tolist() == [29] and r["regret"][29] > 0.5
    assert r["time_regret"] > 0


def test_changepoint_smoothing_halves_last_values_regret_under_noise():
    true, seen = step_speeds(length=200, change=100, noise=0.1, seed=3)
    last = allocation_regret(true, LastValue(), measured=seen)["mean_regret"]
    cp = allocation_regret(true, ChangePointSmoothing(alpha=0.1), measured=seen)["mean_regret"]
    es = allocation_regret(true, ExponentialSmoothing(alpha=0.05), measured=seen)
    assert cp < 0.6 * last
    # Plain slow smoothing trails the change for many windows.
    assert es["regret"][100:110].mean() > 3 * allocation_regret(
        true, ChangePointSmoothing(alpha=0.05), measured=seen)["regret"][100:110].mean()


def test_changepoint_levels_ignore_a_spike_and_follow_a_shift():
    x = np.r_[np.ones(20), 3.0, np.ones(10), np.full(10, 2.0)] * \
        np.exp(0.01 * np.random.default_rng(0).standard_normal(41))
    levels = changepoint_levels(x[None, :], alpha=0.1)[0]
    assert abs(levels[25] - 1.0) < 0.15       # one spike barely moves the level
    assert abs(levels[33] - 2.0) < 0.05       # two points into the shift it has jumped
    assert np.all(levels > 0)


def test_a_jump_restarts_the_level_at_once_and_a_spike_is_left_at_the_next_point():
    x = np.r_[np.ones(20), 3.0, np.ones(10), np.full(10, 0.5)] * \
        np.exp(0.01 * np.random.default_rng(0).standard_normal(41))
    waits = changepoint_levels(x[None, :], alpha=0.1)[0]
    jumps = changepoint_levels(x[None, :], alpha=0.1, jump=8.0)[0]
    assert abs(jumps[31] - 0.5) < 0.02 and abs(waits[31] - 0.5) > 0.3   # first point of the shift
    assert abs(waits[32] - 0.5) < 0.02                                  # the second confirms it
    assert abs(jumps[20] - 3.0) < 0.1 and abs(jumps[21] - 1.0) < 0.05   # the spike, and back
    small = np.r_[np.ones(20), np.full(10, 1.1)] * np.exp(0.01 * np.random.default_rng(1)
                                                          .standard_normal(30))
    # A shift above the change-point threshold but below the jump still waits a point.
    assert np.allclose(changepoint_levels(small[None, :], 0.1, jump=50.0),
                       changepoint_levels(small[None, :], 0.1))


def test_one_point_jumps_cut_regret_after_large_shifts():
    true, seen = step_speeds(length=200, change=100, noise=0.05, seed=3)
    waits = allocation_regret(true, ChangePointSmoothing(alpha=0.1, jump=None), measured=seen,
                              horizon=1)
    jumps = allocation_regret(true, ChangePointSmoothing(alpha=0.1), measured=seen, horizon=1)
    last = allocation_regret(true, LastValue(), measured=seen, horizon=1)
    # LastValue and the jump are one window late at the shift, the wait two.
    assert jumps["regret"][100] < 0.1 < waits["regret"][100]
    assert jumps["time_regret"] < min(waits["time_regret"], last["time_regret"])


def test_a_step_cost_makes_measured_speeds_follow_the_batch():
    true = np.ones((3, 30)) * np.array([[1.0], [1.0], [0.5]])
    free = allocation_regret(true, LastValue(), global_batch=96, min_batch=1, hysteresis=0.0)
    costly = allocation_regret(true, LastValue(), global_batch=96, min_batch=1, hysteresis=0.0,
                               step_cost=32.0)
    # Without the cost last value is right after profiling; with it the profile's
    # speeds (measured at equal sizes) understate the spread and it settles over windows.
    assert free["time_regret"] == 0.0
    assert costly["regret"][0] > costly["regret"][1] > costly["regret"][-1]
    assert costly["regret"][-1] < 0.02                  # integer sizes: 1.4 % off the oracle


def test_a_jump_at_or_below_the_change_point_threshold_is_refused():
    from predictor.gru import GRUSmoothingForecaster
    for make in (GRUSmoothingForecaster, ChangePointSmoothing):
        with pytest.raises(ValueError, match="above the change-point threshold"):
            make(jump=2.0)
    assert GRUSmoothingForecaster(changepoint=None).changepoint is None  # jump unused


def test_scenario_speed_matrices(tmp_path):
    """A scenario's speeds per window come from the lab's scenario model
    (`cluster_sim.scenarios.windows.speed_matrix`: 0 while stopped), and the replay
    takes a stopped worker at MIN_SPEED."""
    from cluster_sim.scenarios import load_scenario
    from cluster_sim.scenarios.windows import speed_matrix
    d = write_scenarios(tmp_path)
    matrix = lambda name, **kw: speed_matrix(load_scenario(str(d / f"{name}.toml")), **kw)
    c = matrix("colocated", window_s=1.0)
    assert c.shape == (4, 12)
    assert c[1].tolist() == [0.5] * 3 + [1.0] * 3 + [0.5] * 3 + [1.0] * 3
    p = true_speeds(matrix("pause", window_s=1.0))
    assert p[2].tolist() == [0.5] * 2 + [0.01] * 4 + [0.5] * 6 and p[3].tolist() == [0.25] * 12
    k = true_speeds(matrix("churn", window_s=1.0))
    assert k[3, 3] == 0.25 and np.all(k[3, 4:9] == 0.01) and k[3, 9] == 0.25
    # Default window: 20 updates of 32 samples at 300 us per sample.
    assert matrix("colocated").shape[1] == int(np.ceil(12.0 / 0.192))
    sets = regime_sets(scenarios={n: matrix(n, window_s=1.0) for n in SCENARIOS},
                       seeds=(0, 1), noise=0.1)
    (t0, m0), (t1, m1) = sets["pause/seed0"], sets["pause/seed1"]
    assert np.array_equal(t0, t1) and np.array_equal(t0, p) and not np.array_equal(m0, m1)
    assert np.allclose(np.log(m0 / t0).std(), 0.1, atol=0.02)
    for bad, why in (([1.0, 0.5], "shape"), ([[1.0, -0.5]], ">= 0"), ([[np.nan]], "finite")):
        with pytest.raises(ValueError, match=why):
            true_speeds(bad)


def test_machine_usage_speeds_average_bins_and_fill_gaps(tmp_path):
    rows = []
    for t, cpu in [(0, 20), (100, 40), (250, 60), (700, 10), (900, 0)]:
        rows.append(f"m_1,{t},{cpu},50,,,1,1,1")
    rows += [f"m_2,{t},30,50,,,1,1,1" for t in (0, 400, 900)]
    rows += ["m_3,800,99,50,,,1,1,1", "m_3,900,99,50,,,1,1,1"]  # covers too little: dropped
    (tmp_path / "machine_usage_16machines.csv").write_text("\n".join(rows) + "\n")
    names, speeds = machine_usage_speeds(tmp_path, grid_s=300.0)
    assert names == ["m_1", "m_2"]
    # Bins [0, 300) mean cpu 40, [300, 600) empty -> repeats, [600, 900) cpu 10.
    assert np.allclose(speeds[0], [0.6, 0.6, 0.9]) and np.allclose(speeds[1], 0.7)
    with pytest.raises(FileNotFoundError, match=r"machine_usage.*empty.*job_2_norm_sample"):
        machine_usage_speeds(tmp_path / "empty")


def test_job_folds_never_test_on_training_jobs(tmp_path):
    traces = two_jobs(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        series = load_traces(traces)
        folds = make_folds(series, "job", extra_train=[np.ones(30)], with_all=True)
    assert [f.name for f in folds] == ["job_a", "job_b", "all"]
    for f in folds[:2]:
        assert list(f.test) == [f.name] and len(f.test[f.name]) == 10
        assert not any(n.startswith(f.name + "/") for n in f.names["train"] + f.names["validation"])
        assert len(f.train) == 9 + 1 and len(f.val) == 1   # + the extra training series
    assert folds[2].test == {} and len(folds[2].train) + len(folds[2].val) == 21
    with pytest.raises(ValueError, match="two or more jobs.*--holdout worker"):
        make_folds([s for s in series if s.job == "job_a"], "job")


def small_forecasters(gru_kwargs=None):
    """Baselines only: GRU fitting in the CLI is covered by test_predictor_gru, and
    three GRU fits (one per fold) would take most of the test budget."""
    return {"LastValue": LastValue(), "MovingAverage": MovingAverage(window=5),
            "ExpSmoothing": ExponentialSmoothing(), "CPSmoothing": ChangePointSmoothing(alpha=0.1)}


def test_regret_cli_on_vendored_sample_and_scenarios(tmp_path, capsys, monkeypatch):
    from predictor import evaluate
    monkeypatch.setattr(evaluate, "make_forecasters", small_forecasters)
    traces = two_jobs(tmp_path)
    scen = write_scenarios(tmp_path / "scenarios", budget=6.0)
    regimes = tmp_path / "regimes.npz"
    assert cluster_sim_main(["speeds", "--out", str(regimes), "--scenarios",
                             ",".join(str(scen / f"{n}.toml") for n in SCENARIOS)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        evaluate.main(["--traces", str(traces), "--out", str(tmp_path / "out"),
                       "--min-history", "16", "--holdout", "job",
                       "--metric", "both", "--regimes", str(regimes)])
    printed = capsys.readouterr().out
    assert "| job_a (held-out job) |" in printed and "fold job_b:" in printed
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(report["folds"]) == {"job_a", "job_b", "all"}
    assert {"colocated/seed0", "pause/seed2", "job_b (held-out job)"} <= set(report["regret"])
    row = report["regret"]["pause/seed1"]
    assert set(row) == set(report["metrics"]) and "CPSmoothing" in row
    assert all(r["windows"] == 31 and r["mean_regret"] >= -0.05 for r in row.values())
    assert set(report["fold_metrics"]) == {"job_a", "job_b"}


def test_tables_compare_the_gru_with_the_best_classical_baseline():
    from predictor.evaluate import format_regret, format_table
    regret = {"colocated/seed0": {
        "GRUSmoothing": {"mean_regret": 0.03, "windows": 9},
        "LastValue": {"mean_regret": 0.10, "windows": 9},
        "ExpSmoothing": {"mean_regret": 0.06, "windows": 9},
        "CPSmoothing": {"mean_regret": 0.02, "windows": 9}}}
    text = format_regret(regret)
    assert "| colocated/seed0 | 9 | 3.00% | 10.00% | 6.00% | **2.00%** |" in text
    # CPSmoothing is not a classical baseline: the ratio is to ExpSmoothing's 6 %.
    assert "colocated/seed0: 0.30x LastValue, 0.50x best classical" in text
    cell = lambda m: {"MAPE": m, "RMSE": 1.0}  # noqa: E731
    row = lambda m: {c: cell(m) for c in ("h=1", "h=5", "h=10", "mean10")}  # noqa: E731
    table = format_table({"GRUSmoothing": row(4.5), "LastValue": row(5.0), "GRUOnly": row(4.0)})
    assert "vs best other forecaster: h=1: -12.5%" in table
    assert "best classical baseline's (LastValue): h=1: 0.900x" in table


def test_files_from_before_the_changepoint_level_load_as_plain_smoothing(tmp_path):
    from predictor.gru import GRUSmoothingForecaster
    from predictor.persist import read_file, write_file
    series = [np.exp(0.1 * np.random.default_rng(i).standard_normal(80)) for i in range(3)]
    old = GRUSmoothingForecaster(window=8, units=4, horizon=3, epochs=0, changepoint=None)
    old.fit(series).save(tmp_path / "old.npz")
    header, arrays = read_file(tmp_path / "old.npz")
    del header["params"]["changepoint"]          # as written by ksync before issue 21
    del header["params"]["jump"]
    write_file(tmp_path / "old.npz", header, arrays)
    loaded = predictor.load(tmp_path / "old.npz")
    assert loaded.changepoint is None and GRUSmoothingForecaster().changepoint == 3.0
    assert loaded.jump is None
    assert np.array_equal(loaded.predict(series, horizon=3), old.predict(series, horizon=3))


def test_train_default_saves_a_loadable_model(tmp_path, monkeypatch):
    from predictor import gru
    from predictor.train_default import main
    class Tiny(gru.GRUSmoothingForecaster):
        """The default forecaster, small enough to train in a second."""

        def __init__(self, **kwargs):
            super().__init__(**{**dict(window=8, units=4, horizon=3, epochs=1), **kwargs})

    monkeypatch.setattr(gru, "GRUSmoothingForecaster", Tiny)
    traces = two_jobs(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main(["--traces", str(traces), "--out", str(tmp_path / "m.npz"), "--synthetic", "2"])
    model = predictor.load(tmp_path / "m.npz")
    assert model.window == 8 and model.changepoint == 3.0
    assert model.predict(np.full((2, 20), 4.0), horizon=3).shape == (2, 3)
