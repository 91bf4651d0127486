"""The policy benchmark's matrix: arms and grids, the oracle-tuned rows, the table's
statistics, and the command end to end in the simulator on a tiny configuration."""

import json
import math
import time

import pytest

from cluster_sim.cli.arm_grid import (FAMILIES, ORDER, bench_arms, check_arms, oracle_choices,
                                      parse_families)
from cluster_sim.cli.bench_costs import injected_us_per_sample
from cluster_sim.cli.bench_table import bench_table


def test_arms_parse_into_the_matrix_order_with_bsp_always_in():
    assert parse_families("ringmaster,asp") == ["bsp", "asp", "ringmaster"]
    assert parse_families("all") == list(ORDER)
    with pytest.raises(ValueError, match=r"arm 'kasnyc': unknown name 'kasnyc'; choose from"):
        parse_families("bsp,kasnyc")


def test_an_arm_can_pin_its_grid_value():
    from cluster_sim.cli.arm_grid import pinned_values
    text = "kasync=64, adaptive"
    assert parse_families(text) == ["bsp", "kasync", "adaptive"]
    assert [a.arm.label for a in bench_arms(parse_families(text), 256,
                                            pinned_values(text))] == \
        ["BSP", "KAsync(k=64)", "Adaptive"]
    for bad, problem in (("asp=2", "asp takes no value"), ("kasync=0", ">= 1"),
                         ("kasync=many", ">= 1")):
        with pytest.raises(ValueError, match=problem):
            parse_families(bad)


def test_grids_scale_with_the_workers_and_skip_asp_and_bsp_duplicates():
    labels = lambda family, n: [a.arm.label for a in bench_arms([family], n)]
    assert labels("ksync", 8) == ["KSync(k=2)", "KSync(k=4)", "KSync(k=6)"]
    assert labels("ksync", 4) == ["KSync(k=2)", "KSync(k=3)"]  # k = 1 is ASP, k = 4 BSP
    assert labels("kasync", 64) == ["KAsync(k=16)", "KAsync(k=32)", "KAsync(k=48)"]
    assert labels("rennala", 8) == ["Rennala(B=4)", "Rennala(B=8)", "Rennala(B=16)"]
    assert labels("ringmaster", 8) == ["Ringmaster(R=4)", "Ringmaster(R=8)", "Ringmaster(R=16)"]
    assert labels("backup", 8) == ["Backup(b=1)", "Backup(b=2)"]
    # The two-stage schedules: the update they switch at, as a share of BSP's ~1,100.
    assert labels("syncswitch", 8) == ["Sync-Switch(after=128)", "Sync-Switch(after=256)",
                                       "Sync-Switch(after=512)"]
    assert [a.arm.policy for a in bench_arms(["ashl"], 8)][0] == "ashl:switch_after=128"
    # Every arm of the full matrix builds its policy, at every simulated size.
    for n in (8, 64, 256):
        check_arms(bench_arms(ORDER, n), n)
    tuned = bench_arms(["bsp", "ssp", "ksync"], 8, tuned={"ssp": 4})
    assert [a.arm.policy for a in tuned] == ["bsp", "ssp:max_staleness=4", "ksync:k=2",
                                            "ksync:k=4", "ksync:k=6"]


def test_a_bad_arm_is_named_before_any_run():
    from cluster_sim.cli.arm_grid import BenchArm
    from cluster_sim.harness.config import Arm
    with pytest.raises(ValueError, match=r"arm KSync\(k=9\) \('ksync:k=9'\)"):
        check_arms([BenchArm("ksync", Arm("KSync(k=9)", "ksync:k=9"), 9)], 8)


def test_injected_compute_is_the_ratio_times_the_framework_cost():
    # 40 ms framework cost, batch 32, fastest worker at speed 1: 4 x 40 ms = 160 ms a step.
    us = injected_us_per_sample(0.04, 32, 1.0, ratio=4.0)
    assert 32 * us * 1e-6 >= 4 * 0.04 and us == 5000.0
    assert injected_us_per_sample(0.04, 32, 2.0) == 10000.0  # a faster fastest worker
    assert injected_us_per_sample(0.001, 32, 1.0, at_least=300.0) == 300.0


def runs(label, ttas, loss=0.5):
    return [{"policy": label, "seed": s, "tta_s": t, "final_loss": loss,
             "final_accuracy": 0.9, "version": 100, "dropped": 0} for s, t in enumerate(ttas)]


def test_oracle_rows_pick_each_rules_best_grid_value_and_ratios_pair_by_seed():
    arms = bench_arms(["bsp", "ksync"], 8)
    results = (runs("BSP", [10.0, 20.0, 30.0]) + runs("KSync(k=2)", [9.0, 18.0, None]) +
               runs("KSync(k=4)", [5.0, 10.0, 15.0]) + runs("KSync(k=6)", [None] * 3))
    assert oracle_choices(results, arms) == {"ksync": "KSync(k=4)"}
    text, data = bench_table(results, arms, title="static")
    assert "| KSync oracle-tuned = KSync(k=4) | 10.0 [5.0, 15.0] | 3/3 | 0.50 [0.50, 0.50]" in text
    rows = {r["arm"]: r for r in data["rows"]}
    # Paired by seed: 9/10 and 18/20 are 0.9, the miss is infinite; the median is 0.9.
    assert rows["KSync(k=2)"]["ratio"][0] == pytest.approx(0.9)
    # Never reached where BSP did: an infinite ratio, said as "never".
    assert rows["KSync(k=6)"]["ratio"][:3] == (math.inf,) * 3
    assert "| KSync(k=6) | never [never, never] | 0/3 | never [never, never] |" in text
    assert data["bsp_tta_cv"] == pytest.approx(0.5)
    assert "BSP's TTA coefficient of variation: 50.0 %" in text
    # All grid values missing: the lowest final loss decides.
    tie = runs("BSP", [1.0]) + runs("KSync(k=2)", [None], 0.4) + runs("KSync(k=4)", [None], 0.3)
    assert oracle_choices(tie, arms) == {"ksync": "KSync(k=4)"}
    # One value (tuned beforehand, `--arms ksync=4`): it is the tuned one, and the table
    # does not repeat its row.
    one = bench_arms(["bsp", "ksync"], 8, tuned={"ksync": 4})
    assert oracle_choices(results, one) == {"ksync": "KSync(k=4)"}
    text, data = bench_table(results, one)
    assert "oracle-tuned" not in text and data["oracle"] == {"ksync": "KSync(k=4)"}


# Far from divergence and from the push limit on any CPU: at the default momentum 0.9,
# ASP (stale gradients) diverged on some machines; at 0.5 every arm of these tests
# reaches the target within about 250 of the 400 pushes (seeds 0-2).
TINY = """
name = "tiny"
workers = 4
data = "digits"
target_accuracy = 0.85
max_pushes = 400
us_per_sample = 300.0
[training]
momentum = 0.5
[slowdowns]
speeds = [1.0, 1.0, 0.5, 0.25]
"""


def assert_same_run(a, b, rel=1e-6):
    """Two runs of one (arm, seed) are the same run: the same identity, the same curve,
    and the same time to target, a run that never reached it included (both None)."""
    key = ("policy", "seed", "family", "grid_value", "version")
    assert [a[k] for k in key] == [b[k] for k in key]
    assert (a["tta_s"] is None) == (b["tta_s"] is None), \
        f"{a['policy']} seed {a['seed']}: time to target {a['tta_s']} against {b['tta_s']}"
    if a["tta_s"] is not None:
        assert a["tta_s"] == pytest.approx(b["tta_s"], rel=rel)
    assert [c["loss"] for c in a["curve"]] == pytest.approx([c["loss"] for c in b["curve"]],
                                                            rel=rel)


def test_runs_compare_whole_and_never_reached_is_a_value():
    run = {"policy": "ASP", "seed": 0, "family": "asp", "grid_value": None, "version": 9,
           "tta_s": None, "curve": [{"loss": 2.0}, {"loss": 1.5}]}
    assert_same_run(run, dict(run))  # neither reached the target: the same run
    with pytest.raises(AssertionError, match="ASP seed 0: time to target None against 1.5"):
        assert_same_run(run, dict(run, tta_s=1.5))


ZERO_COSTS = {"chunk_overhead_s": 0.0, "step_overhead_s": 0.0, "read_overhead_s": 0.0,
              "gate_latency_s": 0.0}


@pytest.fixture
def tiny(tmp_path):
    """The TINY scenario, its run settings and its workload."""
    from cluster_sim.harness.config import RunConfig, load_data
    from cluster_sim.scenarios import load_scenario
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    scenario = load_scenario(path)
    return scenario, RunConfig.from_scenario(scenario), load_data(scenario)


def test_the_command_runs_the_matrix_in_the_simulator_end_to_end(tmp_path, capsys):
    from cluster_sim.__main__ import main
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "out"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--arms", "asp,ksync", "--seeds", "2", "--workers", "4",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "KSync oracle-tuned = KSync(k=" in printed
    summary = json.loads((out / "results.json").read_text())
    table = summary["scenarios"]["tiny.toml@4"] if "tiny.toml@4" in summary["scenarios"] \
        else next(iter(summary["scenarios"].values()))
    assert set(table["oracle"]) == {"ksync"}
    assert [r["arm"] for r in table["rows"]][:4] == ["BSP", "ASP", "KSync(k=2)", "KSync(k=3)"]
    assert all(r["seeds"] == 2 for r in table["rows"])
    bench_md = (out / "bench.md").read_text()
    assert "TTA/BSP paired [range]" in bench_md and "oracle-tuned" in bench_md
    # Every run is in a per-scenario report (the demo's), with curves and plots.
    reports = [p for p in out.iterdir() if p.is_dir() and not p.name.endswith("_runs")]
    assert len(reports) == 1 and (reports[0] / "accuracy.png").exists()
    report = json.loads((reports[0] / "results.json").read_text())
    seeds = [run for policy in report["policies"] for run in policy["per_seed"]]
    assert len(seeds) == 2 * 4
    for run in seeds:  # the simulator evaluates at most 1 % of the pushes so far apart
        pushes = [p["pushes"] for p in run["curve"]]
        assert pushes[0] == 0 and all(b - a <= max(4, 0.01 * b) + 1 for a, b in
                                      zip(pushes, pushes[1:]))
        assert run["max_eval_gap"] is None or math.isfinite(run["max_eval_gap"])
    # The screen's tuned value, over more seeds: only that grid value runs.
    tuned = tmp_path / "tuned"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--arms", "asp,ksync", "--seeds", "3", "--workers", "4",
                 "--tuned-from", str(out), "--out", str(tuned)]) == 0
    rows = next(iter(json.loads((tuned / "results.json").read_text())["scenarios"]
                     .values()))["rows"]
    assert [r["arm"] for r in rows] == ["BSP", "ASP", table["oracle"]["ksync"]]
    assert all(r["seeds"] == 3 for r in rows)
    capsys.readouterr()
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--arms", "ksync", "--workers", "8", "--tuned-from",
                 str(out), "--out", str(tmp_path / "no")]) == 2
    assert "tiny.toml on 8 workers (it has" in capsys.readouterr().err


def test_real_runs_get_the_simulator_beside_them(tiny):
    """The calibration section of a real bench run: the same arms and seeds simulated
    with the probed costs, side by side (here the "real" runs are simulated too, with
    other costs, so the table must show the timing error those costs make)."""
    import dataclasses

    from cluster_sim.cli.bench_config import sim_config
    from cluster_sim.cli.bench_costs import calibration
    from cluster_sim.cli.bench_matrix import run_matrix
    scenario, run_config, data = tiny
    zero = ZERO_COSTS
    arms = bench_arms(["bsp"], 4)
    slow = dict(zero, step_overhead_s=0.0096)  # 9.6 ms more per step
    real = run_matrix(arms, scenario, 1, run_config, data=data, sim_config=dataclasses.replace(
        sim_config(slow, scenario, run_config, data, 4), stop_at_target=False))
    # An unfinished matrix (ASP not run yet) is calibrated on the runs made so far.
    text = calibration(real, bench_arms(["bsp", "asp"], 4), scenario, run_config, zero, data)
    assert "against 1 real run(s)" in text and not any(
        line.startswith("ASP") for line in text.splitlines())
    row = next(line.split() for line in text.splitlines() if line.startswith("BSP"))
    # A BSP round waits for the quarter-speed worker: 38.4 ms of compute, 48 ms with the
    # overhead, so without it the same update count comes 20 % sooner.
    assert row[4] == "-20%", text


def test_grid_from_sim_tunes_each_rule_in_the_simulator_and_the_demo_gets_a_verdict(tiny):
    from cluster_sim.cli.bench_config import sim_config
    from cluster_sim.cli.bench_matrix import run_matrix
    from cluster_sim.cli.bench_table import table_and_verdict
    from cluster_sim.cli.bench_tuning import tune_in_sim
    scenario, run_config, data = tiny
    zero = ZERO_COSTS
    arms = bench_arms(["bsp", "ksync"], 4)
    said = []
    tuned = tune_in_sim(arms, scenario, run_config, zero, data, 2, said.append)
    results = run_matrix(arms, scenario, 2, run_config, data=data,
                         sim_config=sim_config(zero, scenario, run_config, data, 4))
    k = int(oracle_choices(results, arms)["ksync"][8:-1])
    assert set(tuned) == {"ksync"} and tuned["ksync"].text == f"ksync={k}"
    # A K at an end of the grid (2 or 3 on 4 workers) is said to be there.
    assert said == [f"tuned in the simulator: {tuned['ksync'].described}"]
    assert tuned["ksync"].edges == ("value lowest" if k == 2 else "value highest",)
    assert [a.arm.label for a in bench_arms(["bsp", "ksync"], 4, tuned)] == \
        ["BSP", f"KSync(k={k})"]
    text = table_and_verdict(results, arms, title="tiny")
    assert text.startswith("### tiny") and "reached the target fastest" in text


def test_a_stopped_matrix_resumes_from_its_store_without_repeating_a_run(tiny, tmp_path):
    """``--stop-after``/Ctrl-C and the same command again: finished runs come from the
    store (here simulated runs; the real branch uses the same `run_matrix`), the rest
    run, and a store made under other conditions is refused, not mixed in."""
    import time

    from cluster_sim.cli.bench_config import sim_config
    from cluster_sim.cli.bench_matrix import run_matrix
    from cluster_sim.cli.run_store import RunStore
    scenario, run_config, data = tiny
    arms = bench_arms(["bsp", "asp"], 4)
    config = sim_config(ZERO_COSTS, scenario, run_config, data, 4)
    conditions = {"scenario": scenario.summary(), "us_per_sample": 300.0}
    store = RunStore(tmp_path, conditions)
    first = run_matrix(arms[:1], scenario, 2, run_config, data=data, sim_config=config,
                       store=store)
    assert len(first) == 2 and len(store) == 2
    # A deadline already past: nothing new starts, the stored runs still come back.
    again = RunStore(tmp_path, conditions)
    seen = []
    partial = run_matrix(arms, scenario, 2, run_config, data=data, sim_config=config,
                         store=again, deadline=time.monotonic() - 1.0, on_result=seen.append)
    assert [(r["policy"], r["seed"]) for r in partial] == [("BSP", 0), ("BSP", 1)]
    assert [r["sim_run_s"] for r in partial] == [r["sim_run_s"] for r in first]
    assert len(seen) == 2
    full = run_matrix(arms, scenario, 2, run_config, data=data, sim_config=config,
                      store=RunStore(tmp_path, conditions))
    assert [(r["policy"], r["seed"]) for r in full] == [("BSP", 0), ("ASP", 0), ("BSP", 1),
                                                        ("ASP", 1)]
    assert full[0]["sim_run_s"] == first[0]["sim_run_s"] and len(RunStore(tmp_path, conditions)) == 4
    with pytest.raises(ValueError, match="us_per_sample: 300.0 there, 600.0 now.*--fresh"):
        RunStore(tmp_path, dict(conditions, us_per_sample=600.0))
    assert len(RunStore(tmp_path, dict(conditions, us_per_sample=600.0), fresh=True)) == 0


def test_simulations_in_several_processes_give_the_same_runs_in_matrix_order(tiny):
    """--jobs: the simulated matrix spread over spawned processes is the same matrix
    (a simulation is deterministic for its seed, up to the last bits of BLAS sums with
    one thread per process), in the same order."""
    from cluster_sim.cli.bench_config import sim_config
    from cluster_sim.cli.bench_matrix import run_matrix
    scenario, run_config, data = tiny
    arms = bench_arms(["bsp", "asp"], 4)
    config = sim_config(ZERO_COSTS, scenario, run_config, data, 4)
    alone = run_matrix(arms, scenario, 2, run_config, data=data, sim_config=config)
    seen = []
    spread = run_matrix(arms, scenario, 2, run_config, data=data, sim_config=config, jobs=2,
                        on_result=seen.append)
    assert len(spread) == len(alone)
    for a, b in zip(spread, alone):
        assert_same_run(a, b)
    assert len(seen) == len(alone) == 2 * len(arms)
    # A deadline passed: no process starts a run (--stop-after).
    assert run_matrix(arms, scenario, 2, run_config, data=data, sim_config=config, jobs=2,
                      deadline=time.monotonic() - 1.0) == []


def test_a_deadline_stops_the_processes_taking_new_runs_not_the_runs_under_way(
        tiny, monkeypatch):
    import types

    from cluster_sim.cli import bench_config, bench_matrix
    scenario, run_config, data = tiny
    arms = bench_arms(["bsp", "asp"], 4)
    config = bench_config.sim_config(ZERO_COSTS, scenario, run_config, data, 4)
    reads = []  # the clock passes the deadline after the two processes took a run each

    def monotonic():
        reads.append(1)
        return 0.0 if len(reads) <= 2 else 10.0

    monkeypatch.setattr(bench_matrix, "time",
                        types.SimpleNamespace(monotonic=monotonic, perf_counter=time.perf_counter))
    made = bench_matrix.run_matrix(arms, scenario, 2, run_config, data=data,
                                   sim_config=config, jobs=2, deadline=5.0)
    assert [(r["policy"], r["seed"]) for r in made] == [(a.arm.label, 0) for a in arms[:2]]


def test_a_simulated_matrix_is_kept_and_resumed_as_a_real_one_is(tmp_path, capsys):
    from cluster_sim.__main__ import main
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out = tmp_path / "out"
    command = ["bench", "policies", "--simulate", "--costs", "none", "--scenario",
               str(scenario), "--arms", "asp", "--seeds", "2", "--workers", "4",
               "--out", str(out)]
    assert main(command + ["--stop-after", "0"]) == 0
    assert "Incomplete: 4 of 4 runs not made yet" in (out / "bench.md").read_text()

    def runs():
        report = json.loads(next(out.glob("*_sim4/results.json")).read_text())
        return {(r["policy"], r["seed"]): r["sim_run_s"]
                for p in report["policies"] for r in p["per_seed"]}

    assert main(command) == 0
    made, table = runs(), (out / "bench.md").read_text()
    assert len(made) == 4 and "Incomplete" not in table
    capsys.readouterr()
    assert main(command) == 0  # every run from the store: none made again
    assert "4 run(s) already in" in capsys.readouterr().out and runs() == made
    assert (out / "bench.md").read_text() == table
    # A probed matrix resumes with the costs its runs were made with.
    from cluster_sim.cli.bench_costs import stored_sim_costs
    assert stored_sim_costs(out) == dict(ZERO_COSTS, framework_step_s=0.0)  # --costs none
    assert stored_sim_costs(tmp_path) is None
    # Other settings are refused, not mixed in; --fresh starts over.
    assert main(command + ["--max-pushes", "40"]) == 2
    assert "max_pushes" in capsys.readouterr().err
    assert main(command + ["--max-pushes", "40", "--fresh"]) == 0
    report = json.loads(next(out.glob("*_sim4/results.json")).read_text())
    assert {r["pushed"] for p in report["policies"] for r in p["per_seed"]} == {40}


def test_compute_before_the_read_leaves_only_the_framework_cost_stale(tmp_path, capsys):
    from cluster_sim.__main__ import main
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    p95 = {}
    for flag in (["--compute-before-read"], []):
        out = tmp_path / f"out{len(flag)}"
        assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                     str(scenario), "--arms", "asp", "--seeds", "1", "--workers", "4",
                     "--out", str(out), *flag]) == 0
        report = json.loads(next(out.glob("*/results.json")).read_text())
        asp = next(p for p in report["policies"] if p["policy"] == "ASP")
        p95["before" if flag else "after"] = asp["per_seed"][0]["staleness_p95"]
    # Before the read only the (zero) framework cost exposes a gradient; after it (the
    # default, as in the real harness), the whole step does: with 4 workers under ASP,
    # about 3 updates.
    assert p95["before"] == 0 and p95["after"] >= 2
    assert "--compute-before-read changes the simulator only" in _refusal(main, scenario)


def _refusal(main, scenario):
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        code = main(["bench", "policies", "--scenario", str(scenario), "--compute-before-read"])
    assert code != 0
    return err.getvalue()


def test_simulation_processes_end_with_a_bench_that_is_killed(tmp_path):
    # The bench's process pool, built as `bench_matrix._simulate_in_processes` builds it; the bench
    # is then killed outright (no chance to shut its pool down): its processes must go.
    import os
    import signal
    import subprocess
    import sys
    import time
    from conftest import proc_state
    script, out = tmp_path / "bench.py", tmp_path / "pids"
    script.write_text(
        "import concurrent.futures, multiprocessing, os, sys, time\n"
        "from cluster_sim.cli import bench_matrix\n"
        "if __name__ == '__main__':\n"
        "    pool = concurrent.futures.ProcessPoolExecutor(\n"
        "        2, mp_context=multiprocessing.get_context('spawn'),\n"
        "        initializer=bench_matrix._init_sim_process, initargs=(None, os.getpid()))\n"
        "    pids = {pool.submit(os.getpid).result() for _ in range(8)}\n"
        "    busy = [pool.submit(time.sleep, 60) for _ in range(2)]\n"
        "    open(sys.argv[1], 'w').write(' '.join(map(str, pids)))\n"
        "    os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, str(script), str(out)], timeout=120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = [int(p) for p in out.read_text().split()]
    assert pids
    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in pids if proc_state(p) not in (None, "Z")]   # a zombie has ended
    for pid in alive:  # the failure's own clean-up
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"simulation processes {alive} outlived their bench"


def test_a_simulated_store_resumes_from_another_checkout(tmp_path):
    """The same scenario file at another path (a clone, a worktree) keeps the store's
    conditions: the scenario's digest is of what it is, not where its file sits (a
    64-worker store was refused from a second worktree, every run to be made again)."""
    import dataclasses
    from cluster_sim.cli import bench_config
    from cluster_sim.scenarios import load_scenario
    from cluster_sim.harness.config import RunConfig, load_data
    made = []
    for where in ("one", "two"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "tiny.toml").write_text(TINY)
        scenario = load_scenario(str(tmp_path / where / "tiny.toml"))
        run_config = RunConfig.from_scenario(scenario)
        config = bench_config.sim_config(ZERO_COSTS, scenario, run_config, load_data(scenario), 4)
        made.append(bench_config.sim_conditions(scenario, 300.0, run_config, ZERO_COSTS, config))
    assert made[0] == made[1]
    moved = dataclasses.replace(scenario, learning_rate=0.123)  # what it is still counts
    assert bench_config.sim_conditions(moved, 300.0, run_config, ZERO_COSTS, config) != made[1]


@pytest.mark.parametrize("store_name, name", [
    ("bench_real_static", "static"), ("bench_real_trace", "trace"),
    ("bench_real_colocated", "colocated"), ("race_real8", "static"),
    ("race_real8_colocated", "colocated"), ("race_real8_trace", "trace")])
def test_the_committed_real_stores_resume_under_the_command_that_made_them(
        store_name, name, tmp_path):
    """The real-run stores in cluster_sim/results/ open with the conditions their own
    command (results.json's argv) computes today: the same command resumes them (with
    the framework costs it probed, as the bench resumes a probed matrix)."""
    import argparse
    import pathlib
    import shutil

    from cluster_sim.cli import bench_costs, bench_policies
    from cluster_sim.cli.arm_grid import matrix_specs
    from cluster_sim.cli.run_store import RunStore, saved_conditions
    results = pathlib.Path(__file__).resolve().parents[2] / "cluster_sim/results"
    store = shutil.copytree(results / store_name, tmp_path / store_name)
    argv = json.loads((store / "results.json").read_text())["meta"]["argv"]
    parser = argparse.ArgumentParser()
    bench_policies.add_arguments(parser)
    args = parser.parse_args(argv[argv.index("policies") + 1:])
    costs = (bench_costs.costs_from_option(args.costs)
             or bench_policies.resumed_costs(saved_conditions(store / f"{name}_runs")))
    *_, conditions = bench_policies.real_conditions(args, name, costs,
                                                    matrix_specs(args.arms), lambda _: None)
    made = len((store / f"{name}_runs/runs.jsonl").read_text().splitlines())
    assert len(RunStore(store / f"{name}_runs", conditions)) == made > 0
    # What it guards: other conditions are refused, naming the setting.
    us_there = conditions["us_per_sample"]
    with pytest.raises(ValueError, match=rf"us_per_sample: {us_there} there, 99.0 now"):
        RunStore(store / f"{name}_runs", dict(conditions, us_per_sample=99.0))


def test_the_allocation_period_is_a_condition_only_of_a_matrix_that_allocates():
    from cluster_sim.cli import bench_config
    from cluster_sim.cli.arm_grid import matrix_specs
    from cluster_sim.harness.config import RunConfig
    from cluster_sim.scenarios import load_scenario
    scenario = load_scenario("bench/static")
    keyed = lambda arms: bench_config.conditions(
        scenario, 3200.0, RunConfig(), {}, bench_config.allocates(matrix_specs(arms)))
    assert "allocate_every" not in keyed("bsp,asp,adaptive")["run_config"]
    assert keyed("bsp,adaptive+alloc")["run_config"]["allocate_every"] == 20
