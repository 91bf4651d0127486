"""The discrete-event simulator: determinism, PS invariants, semantics of the rules.

Small worker counts and few pushes: the whole file runs in seconds and never starts
TensorFlow.
"""

import json

import numpy as np
import pytest

import ksync
import predictor
from cluster_sim import simulate as cli
from cluster_sim.sim_engine import SimConfig, Simulation, simulate
from cluster_sim.sim_model import MLP
from cluster_sim.scenarios import DEFAULT_TRACE_DIR
from cluster_sim.sim_workers import make_scenario
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


def test_bsp_is_large_batch_sgd_on_the_same_samples(data):
    # Unequal per-worker batches (from the allocator) check the sample weighting too.
    alloc = predictor.BatchAllocator(global_batch=128, min_batch=8, hysteresis=0.0)
    config = quick(max_pushes=48, speeds=(1.0, 1.0, 0.5, 0.25))
    sim = Simulation(ksync.BSP(), config, data, allocator=alloc, record_batches=True)
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
    policy = ksync.Adaptive(refresh_every=5)
    sim = Simulation(policy, quick(max_pushes=200, speeds=(1.0, 1.0, 1.0, 0.2)), data)
    sim.run()
    assert sim.policy is policy
    assert type(sim.state) is ksync.UpdateState
    assert len(policy.history) > 1, "Adaptive.observe was never given a measurement"
    assert sim.state.rule == policy.history[-1][1] == sim.rule
    assert not sim.rule.wait  # a persistent straggler drives it to k-async


def test_staleness_scaling_speeds_up_adaptive_over_many_workers(data):
    """16 workers on the vendored trace: K-async gradients weighted 1 / (1 + staleness)
    reach the target in fewer simulated seconds than the same gradients at full weight,
    which act like extra momentum on top of the optimizer's 0.9."""
    def tta(scaling):
        config = quick(num_workers=16, scenario="trace", traces=str(DEFAULT_TRACE_DIR),
                       max_pushes=None, max_updates=600, eval_every=120, stop_at_target=True)
        return simulate(ksync.Adaptive(staleness_scaling=scaling), config, data)["tta_s"]
    scaled, plain = tta(True), tta(False)
    assert scaled is not None and (plain is None or scaled < 0.8 * plain), (scaled, plain)


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


def test_trace_workers_follow_series_i_mod_n(tmp_path):
    (tmp_path / "job_9_norm.csv").write_text(
        ",worker,gpu,time,batch_time_norm\n0,0,1,1,100\n1,1,1,1,200\n2,2,1,1,200\n"
        "3,0,1,11,50\n4,1,1,11,200\n5,2,1,11,200\n")
    (tmp_path / "notes.csv").write_text("a,b\n1,2\n")  # no trace columns: ignored
    sc = make_scenario("trace", 4, us_per_sample=100, traces=tmp_path, time_unit_s=1.0)
    # The median of 1/time over the file is 1/200: worker 0 runs at 2 then 4, the others
    # at 1; simulated worker 3 follows trace worker 0 again.
    assert [sc.speed(w, 0.0) for w in range(4)] == [2.0, 1.0, 1.0, 2.0]
    assert sc.speed(0, 10.5) == 4.0 == sc.speed(3, 10.5) and sc.speed(1, 10.5) == 1.0
    assert sc.compute_time(0, 0.0, 10) == pytest.approx(10 * 100e-6 / 2.0)


def test_a_harness_scenario_runs_with_its_own_speeds_over_time(data):
    from cluster_sim.scenarios import load_scenario, parse_scenario
    trace = load_scenario("trace")
    sc = make_scenario(trace, 4, us_per_sample=300)
    for t in (0.0, 0.5, 3.0):
        assert [sc.speed(w, t) for w in range(4)] == trace.speeds_at(t)
    r = simulate(ksync.BSP(), quick(scenario=trace), data)
    assert r["pushed"] == 120 and r["scenario"] == trace.summary()
    with pytest.raises(ValueError, match="has 4 workers, the simulation 8"):
        make_scenario(trace, 8)
    paused = parse_scenario({"name": "p", "workers": 2, "events": [
        {"action": "pause", "worker": 0, "at_s": 1.0, "duration_s": 1.0}]})
    with pytest.raises(ValueError, match="pause/kill events"):
        make_scenario(paused, 2)


def test_bad_input_is_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown scenario"):
        make_scenario("lunar", 4)
    with pytest.raises(ValueError, match="num_workers"):
        Simulation(ksync.ASP(), SimConfig(num_workers=0))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_scenario("trace", 4, traces=tmp_path / "missing")
    with pytest.raises(ValueError, match="no CSV"):
        make_scenario("trace", 4, traces=tmp_path)
    with pytest.raises(ValueError, match="cluster has only"):
        Simulation(ksync.KSync(k=5), SimConfig(num_workers=4))
    assert cli.main(["--workers", "0", "--out", str(tmp_path)]) == 2
    assert cli.main(["--scenario", "trace", "--traces", str(tmp_path / "x"),
                     "--out", str(tmp_path)]) == 2


def test_cli_writes_harness_shaped_results_and_plots(tmp_path):
    code = cli.main(["--workers", "6", "--policies", "bsp,ksync:k=3", "--seeds", "2",
                     "--max-pushes", "60", "--eval-every", "30", "--out", str(tmp_path)])
    assert code == 0
    out = json.loads((tmp_path / "results.json").read_text())
    assert len(out["results"]) == 4 and len(out["summary"]) == 2
    harness_keys = {"policy", "tta_s", "final_accuracy", "wall_s", "samples_per_s",
                    "staleness_p50", "staleness_p95", "pushed", "applied", "dropped",
                    "pending", "version", "rule", "k_history", "worker_pushes", "curve"}
    for r in out["results"]:
        assert harness_keys <= set(r)
        assert set(r["curve"][0]) == {"wall_s", "pushes", "version", "loss", "accuracy"}
    assert (tmp_path / "accuracy.png").stat().st_size > 0
    assert (tmp_path / "staleness.png").stat().st_size > 0
