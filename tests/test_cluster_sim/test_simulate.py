"""The discrete-event simulator: determinism, PS invariants, semantics of the rules.

Small worker counts and few pushes: the whole file runs in seconds and never starts
TensorFlow.
"""

import dataclasses
import json

import numpy as np
import pytest

import ksync
import predictor
from cluster_sim.__main__ import main
from cluster_sim.sim.engine import SimConfig, Simulation, simulate
from cluster_sim.numpy_mlp import MLP
from cluster_sim.scenarios import DEFAULT_TRACE_DIR
from cluster_sim.sim.speeds import make_speed_model
from cluster_sim.report import SCHEMA_VERSION, RunResult
from cluster_sim.workloads import digits


@pytest.fixture(scope="module")
def data():
    return digits(seed=0)


def quick(**kw):
    base = dict(num_workers=4, max_pushes=120, eval_every=20, stop_at_target=False)
    base.update(kw)
    return SimConfig(**base)


def test_same_seed_same_run_other_seed_other_run(data):
    runs = [simulate(ksync.Adaptive(refresh_every=5), quick(seed=s, scenario="shifted_exp"),
                     data) for s in (3, 3, 4)]
    assert runs[0]["curve"] == runs[1]["curve"]
    assert runs[0]["worker_pushes"] == runs[1]["worker_pushes"]
    assert runs[0]["wall_s"] == runs[1]["wall_s"]
    assert runs[0]["wall_s"] != runs[2]["wall_s"]


@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.ASP(), ksync.SSP(max_staleness=1),
                                    ksync.KSync(k=2), ksync.KAsync(k=3),
                                    ksync.BackupWorkers(backups=1), ksync.Adaptive(refresh_every=4)])
def test_every_push_is_counted_and_versions_are_commits(policy, data):
    sim = Simulation(policy, quick(max_pushes=97, scenario="mixture", slow_fraction=0.3), data)
    r = sim.run()
    assert r["pushed"] == 97 == sum(r["worker_pushes"])
    assert r["applied"] + r["dropped"] + r["pending"] == r["pushed"]
    assert r["version"] == sim.commits == sim.state.version
    assert len(sim.staleness) == r["pushed"]
    # The histogram and medians kept as pushes come equal those rebuilt from scratch.
    assert r["staleness_histogram"] == np.bincount(np.clip(sim.staleness, 0, None)).tolist()
    assert sim._recent_medians() == tuple(float(np.median(d)) if d else None
                                          for d in sim.recent)


def test_bsp_is_large_batch_sgd_on_the_same_samples(data):
    # Unequal per-worker batches (from the allocator) check the sample weighting too.
    alloc = predictor.BatchAllocator(global_batch=128, min_batch=8, hysteresis=0.0)
    config = quick(max_pushes=48, speeds=(1.0, 1.0, 0.5, 0.25), allocate_every=2)
    sim = Simulation(ksync.BSP(), config, data, batch_allocation=alloc, record_batches=True)
    sim.run()
    assert sim.state.version == 12 and sim.state.dropped == 0
    sizes = {len(rows) for _, _, rows, _ in sim.batches}
    assert len(sizes) > 1, "the allocator should have made batch sizes unequal"
    reference = MLP(data.num_features, data.num_classes, config.hidden, seed=config.seed)
    for version in range(sim.state.version):
        rows = np.concatenate([r for v, _, r, _ in sim.batches if v == version])
        x, y = data.x_train[rows][None], data.y_train[rows][None]
        g = reference.gradients(reference.params, x, y, np.full((1, len(rows)), 1 / len(rows)))
        reference.apply(g[0], config.learning_rate, config.momentum)
    np.testing.assert_allclose(sim.model.params, reference.params, rtol=1e-4, atol=1e-5)


def test_a_slow_worker_sets_the_pace_of_bsp(data):
    def wall(speeds):
        config = quick(max_updates=10, max_pushes=None, speeds=speeds, bandwidth_gbps=None,
                       latency_s=0.0)
        return simulate(ksync.BSP(), config, data)["wall_s"]

    step = 32 * 300e-6
    assert wall((1.0, 1.0, 1.0, 1.0)) == pytest.approx(10 * step)
    assert wall((1.0, 1.0, 1.0, 0.25)) == pytest.approx(10 * step / 0.25)
    # ASP does not wait for it: the fast workers' steps set the pace.
    asp = simulate(ksync.ASP(), quick(max_updates=40, max_pushes=None,
                                      speeds=(1.0, 1.0, 1.0, 0.25), latency_s=0.0,
                                      bandwidth_gbps=None), data)
    assert asp["wall_s"] < 40 * step / 3.0 + 1e-9


def test_fit_chunks_and_the_gate_cost_what_they_say(data):
    step, gate, chunk = 32 * 300e-6, 0.002, 1.0
    config = quick(max_pushes=16, speeds=(1.0,), bandwidth_gbps=None, latency_s=0.0,
                   chunk_pushes=8, chunk_overhead_s=chunk, gate_latency_s=gate)
    r = simulate(ksync.BSP(), config, data)
    # Two chunks of two rounds; a worker released by the gate starts `gate` later, one
    # starting a new chunk does not wait at the gate.
    assert r["wall_s"] == pytest.approx(2 * (2 * step + gate + chunk))
    assert [c["pushes"] for c in r["curve"]] == [8, 16]
    assert r["curve"][0]["wall_s"] == pytest.approx(2 * step + gate + chunk)


def test_ksync_drops_the_late_gradients_of_a_round(data):
    sim = Simulation(ksync.KSync(k=2), quick(max_pushes=100, speeds=(1.0, 1.0, 0.5, 0.25)),
                     data)
    r = sim.run()
    assert r["dropped"] > 0
    stale = np.array(sim.staleness)
    assert (stale > 0).sum() == r["dropped"]  # dropped exactly when from an old round
    # The two fast workers make every round; the slow ones' gradients arrive late.
    assert r["applied"] == 2 * r["version"]


def test_the_product_objects_drive_the_simulation(data):
    seen = []

    class Recording(ksync.Adaptive):
        def observe(self, observation, context):
            seen.append(observation)
            return super().observe(observation, context)

    policy = Recording(refresh_every=5)
    sim = Simulation(policy, quick(max_pushes=200, speeds=(1.0, 1.0, 1.0, 0.2)), data)
    sim.run()
    assert sim.policy is policy
    assert type(sim.state) is ksync.UpdateState
    assert seen, "Adaptive.observe was never given a measurement"
    # The straggler's measured step time is about 5x the others'.
    times = seen[-1].iteration_times
    assert times[3] > 3 * max(times[:3])
    history = sim.rule_history()
    assert sim.state.rule == history[-1][1] == sim.rule
    assert not sim.rule.wait  # nobody waits for the persistent straggler


def test_step_jitter_breaks_the_lockstep_of_the_workers(data):
    """K-async K = 2 on speeds 1, 1, 0.5, 0.25: without spread the workers keep a fixed
    phase and a gradient's staleness takes a few exact values (none is 4 updates
    stale); with the harness's spread (`HARNESS_STEP_JITTER`) it takes the values in
    between too, as on the real cluster, and the same seed gives the same run."""
    from cluster_sim.sim.mirror import HARNESS_STEP_JITTER

    def histogram(jitter):
        config = quick(speeds=(1.0, 1.0, 0.5, 0.25), us_per_sample=3000.0, max_pushes=400,
                       step_jitter=jitter)
        return simulate(ksync.KAsync(k=2), config, data)["staleness_histogram"]

    lockstep, spread = histogram(0.0), histogram(HARNESS_STEP_JITTER)
    assert lockstep[4] == 0 and spread[4] > 0, (lockstep, spread)
    assert sum(c > 0 for c in spread) > sum(c > 0 for c in lockstep)
    assert histogram(HARNESS_STEP_JITTER) == spread
    with pytest.raises(ValueError, match="step_jitter"):
        quick(step_jitter=-0.1).check()


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    model = MLP(5, 3, hidden=(4,), seed=1, dtype=np.float64)
    x = rng.normal(size=(2, 6, 5))
    y = rng.integers(0, 3, size=(2, 6))
    w = np.zeros((2, 6))
    w[0, :6], w[1, :4] = 1 / 6, 1 / 4  # worker 1 has 4 real samples and 2 padding rows
    grads = model.gradients(model.params, x, y, w)

    def loss(params, j):
        logits = model.logits(params, x[j])
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        return -(w[j] * logp[np.arange(6), y[j]]).sum()

    for j in range(2):
        for i in rng.choice(model.num_params, 12, replace=False):
            e = np.zeros(model.num_params)
            e[i] = 1e-6
            numeric = (loss(model.params + e, j) - loss(model.params - e, j)) / 2e-6
            assert grads[j, i] == pytest.approx(numeric, rel=1e-4, abs=1e-7)


def test_a_scenario_name_means_the_demos_speeds_tiled_over_the_workers(data):
    from cluster_sim.scenarios import load_scenario, parse_scenario
    trace = load_scenario("trace")
    by_name = make_speed_model("trace", 8, us_per_sample=300)
    by_object = make_speed_model(trace, 4, us_per_sample=300)
    for t in (0.0, 0.5, 3.0):
        assert [by_object.speed(w, t) for w in range(4)] == trace.speeds_at(t)
        assert [by_name.speed(w, t) for w in range(8)] == trace.speeds_at(t) * 2
    static = make_speed_model("static", 6, speeds=(1.0, 0.5))
    assert [static.speed(w, 0.0) for w in range(6)] == [1.0, 0.5] * 3
    r = simulate(ksync.BSP(), quick(scenario=trace), data)
    assert r["pushed"] == 120 and r["scenario"] == trace.summary()
    paused = parse_scenario({"name": "p", "workers": 2, "events": [
        {"action": "pause", "worker": 0, "at_s": 1.0, "duration_s": 1.0}]})
    # A pause stops the worker's compute, as SIGSTOP stops its process in the harness.
    speeds = make_speed_model(paused, 2, us_per_sample=1000)
    assert speeds.compute_time(0, 0.99, 20) == pytest.approx(1.02)  # 10 ms, 1 s, 10 ms
    assert speeds.compute_time(1, 0.99, 20) == pytest.approx(0.02)


def test_evaluations_at_a_relative_spacing_and_the_loss_target_end_the_run(data):
    """With eval_relative_gap (what the bench and the harness use) the curve starts at
    the initial weights and evaluations are at most that fraction of the pushes so far
    apart; a target loss ends the run and its time is curve_tta's interpolated
    crossing; the controller sees the latest validation loss (AdaSync raises K)."""
    from cluster_sim.report.results import curve_tta
    config = quick(max_pushes=2000, eval_every=4, eval_relative_gap=0.05,
                   target_loss=0.5, stop_at_target=True)
    r = simulate(ksync.BSP(), config, data)
    pushes = [p["pushes"] for p in r["curve"]]
    assert pushes[0] == 0 and r["curve"][0]["wall_s"] == 0.0
    assert all(b - a <= max(4, 0.05 * a) + 1 for a, b in zip(pushes, pushes[1:]))
    assert r["tta_s"] is not None and r["pushed"] < 2000
    assert r["tta_s"] == curve_tta(r["curve"], target_loss=0.5, target_accuracy=0.93)["tta_s"]
    # It stops at the first evaluation where the mean of the last five is past the target.
    from cluster_sim.report.results import trailing_mean
    means = trailing_mean([p["loss"] for p in r["curve"]])
    assert means[-2] > 0.5 >= means[-1]
    assert r["target_loss"] == 0.5 and r["final_loss"] == r["curve"][-1]["loss"]
    sim = Simulation(ksync.AdaSync(k0=1, refresh_every=8), dataclasses.replace(
        config, stop_at_target=False, max_pushes=400), data)
    sim.run()
    assert max(rule.k for _v, rule, _why in sim.rule_history()) > 1, \
        "AdaSync never saw the validation loss fall"


def test_the_trace_directory_is_the_demos_traces_option(tmp_path):
    rows = [(1, 1, 100), (1, 11, 50), (2, 1, 200), (2, 11, 200), (3, 1, 200), (3, 11, 200),
            (5, 1, 200), (5, 11, 200)]
    (tmp_path / "job_2_norm.csv").write_text(",worker,gpu,time,batch_time_norm\n" + "".join(
        f"{i},{w},1,{t},{v}\n" for i, (w, t, v) in enumerate(rows)))
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")  # no trace columns: ignored
    sc = make_speed_model("trace", 4, us_per_sample=100, traces=tmp_path)
    # As the TOML says: workers 1, 2, 3, 5 of job 2, 9.6 ms per time unit, the fastest
    # median (worker 1: 2 and 4 times the file's median speed) becomes 1.0.
    assert [sc.speed(w, 0.0) for w in range(4)] == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert sc.speed(0, 10 * 0.0096 + 1e-9) == pytest.approx(4 / 3)
    assert sc.compute_time(1, 0.0, 10) == pytest.approx(10 * 100e-6 * 3)


def test_bad_input_is_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown scenario 'lunar'.*shifted_exp"):
        make_speed_model("lunar", 4)
    with pytest.raises(ValueError, match="num_workers"):
        Simulation(ksync.ASP(), SimConfig(num_workers=0))
    with pytest.raises(ValueError, match="does not exist"):
        make_speed_model("trace", 4, traces=tmp_path / "missing")
    with pytest.raises(ValueError, match="no CSV"):
        make_speed_model("trace", 4, traces=tmp_path)
    with pytest.raises(ValueError, match="cluster has only"):
        Simulation(ksync.KSync(k=5), SimConfig(num_workers=4))
    assert main(["simulate", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert main(["simulate", "--scenario", "trace", "--traces", str(tmp_path / "x"),
                     "--out", str(tmp_path)]) == 2


def test_cli_writes_the_demos_report_from_run_results(tmp_path, capsys):
    code = main(["simulate", "--workers", "6", "--arms", "bsp,ksync=3", "--seeds", "2",
                 "--max-pushes", "60", "--eval-every", "30", "--out", str(tmp_path)])
    assert code == 0
    out = json.loads((tmp_path / "results.json").read_text())
    runs = [r for p in out["policies"] for r in p["per_seed"]]
    assert len(runs) == 4 and len(out["policies"]) == 2
    assert {p["runs"] for p in out["policies"]} == {2}
    for r in runs:
        assert RunResult.from_dict(r).as_dict() == r  # exactly the schema's fields
        assert r["simulated"] and r["schema"] == SCHEMA_VERSION
        assert set(r["curve"][0]) == {"wall_s", "pushes", "version", "loss", "accuracy"}
    for name in ("report.md", "curves.csv", "accuracy.png", "staleness.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "TTA/BSP" in capsys.readouterr().out


def test_scale_reads_arms_as_simulate_does(capsys):
    # --arms through the one arm-spec parser (an arm's own rate is in its label);
    # --policies stays as the old name; a bad arm exits 2 naming it.
    assert main(["scale", "--workers", "4", "--arms", "bsp@0.05,kasync=2", "--updates", "20",
                 "--scenario", "static"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split()[1:3] for row in rows] == [["BSP", "@lr=0.05"], ["KAsync(k=2)", "20"]]
    assert main(["scale", "--workers", "4", "--policies", "ksync=5", "--updates", "20"]) == 2
    assert "cluster has only" in capsys.readouterr().err


def test_bsp_on_the_ctr_workload_is_large_batch_sgd_with_sparse_pushes():
    """The held-out workload in the simulator: gradients are sparse (the rows a batch
    touched), summed as the PS sums ``IndexedSlices``, and BSP is still one process's
    SGD with momentum on the round's batches concatenated."""
    from cluster_sim.numpy_ctr import SparseGradient
    from cluster_sim.workloads import load, numpy_model
    data = load("ctr", train_size=4000, test_size=500)
    config = quick(max_pushes=40, hidden=(16,), learning_rate=0.05, momentum=0.9)
    sim = Simulation(ksync.BSP(), config, data, record_batches=True)
    sim.run()
    assert sim.state.version == 10 and sim.state.dropped == 0
    assert all(isinstance(g, SparseGradient) for g in sim.grads if g is not None)
    reference = numpy_model(data, config.hidden, seed=config.seed)
    for version in range(sim.state.version):
        rows = np.concatenate([r for v, _, r, _ in sim.batches if v == version])
        x, y = data.x_train[rows][None], data.y_train[rows][None]
        (g,) = reference.gradients(None, x, y, np.full((1, len(rows)), 1 / len(rows)))
        reference.apply(g, config.learning_rate, config.momentum)
    np.testing.assert_allclose(sim.model.params, reference.params, rtol=1e-4, atol=1e-6)


def test_a_diverged_run_stops_at_the_evaluation_that_finds_nan_parameters():
    """NaN parameters stay NaN, so the run ends there, never reaching; a run with a
    finite but large loss goes on to its limit."""
    config = SimConfig(num_workers=4, max_pushes=2000, eval_every=40, learning_rate=1e5,
                       scenario="static", stop_at_target=False)
    with np.errstate(all="ignore"):
        run = Simulation(ksync.ASP(), config).run()
    assert run["pushed"] < config.max_pushes and run["tta_s"] is None
    assert not np.isfinite(run["final_loss"] if run["final_loss"] is not None else np.nan)
    steady = Simulation(ksync.ASP(), dataclasses.replace(config, learning_rate=0.02,
                                                         max_pushes=200)).run()
    assert steady["pushed"] >= 200
