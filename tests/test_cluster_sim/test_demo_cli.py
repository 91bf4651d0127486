"""The README's main command, end to end: its own local cluster, a report, a clean exit;
what its first run compares (read from the fair race's committed store) and what it says
when that store is missing."""

import argparse
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import processes_with

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.cluster
def test_demo_command_writes_the_report_and_exits_cleanly(tmp_path):
    from cluster_sim.cli.demo_race import load_demo_race
    target = str(load_demo_race().target_loss)  # the first run's: the race's target
    token = uuid.uuid4().hex  # marks the demo's processes (its servers inherit it)
    done = subprocess.run(
        [sys.executable, "-m", "cluster_sim", "demo", "--arms", "bsp", "--seeds", "1",
         "--max-pushes", "60", "--out", str(tmp_path / "demo")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        # As a user runs it: no log level of the test session's.
        env={**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
             "KSYNC_TEST_RUN": token})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "report in" in done.stdout and "BSP" in done.stdout
    results = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert [p["policy"] for p in results["policies"]] == ["BSP"]
    assert (tmp_path / "demo" / "report.md").exists()
    # TensorFlow's exit-time noise about the stopped servers does not bury the table.
    assert "Failed to remove function remotely" not in done.stderr
    # Nor its start-up noise: no C++ ERROR line, absl ERROR or traceback at all.
    noise = re.findall(r"^(?:E\d{4} .*|.*\bERROR\b.*|Traceback.*)$", done.stderr, re.M)
    assert noise == [], noise[:10]
    assert "cudart_stub" not in done.stderr and "absl::InitializeLog" not in done.stderr
    # The bar ends with the outcome, not at a fraction of the push budget.
    assert (f"reached target loss {target}" in done.stderr
            or f"target loss {target} not reached" in done.stderr)
    # The demo's own workload and target, said before the first run.
    assert f"teacher data, target validation loss {target}" in done.stdout
    # The table ends with a verdict computed from the runs (one seed: say so).
    assert "BSP reached the target fastest" in done.stdout or "No rule reached" in done.stdout
    assert "one seed cannot separate the rules" in done.stdout or "No rule" in done.stdout
    # Its cluster is gone (its own processes only: other programs may run servers).
    assert processes_with(token) == []


def plan(*argv):
    from cluster_sim.cli import demo
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return demo._plan(parser.parse_args(list(argv)))


def test_the_first_run_is_tuned_bsp_and_asp_against_adaptive_as_the_race_tuned_them():
    from cluster_sim.cli.demo_race import PAGE
    specs, seeds, target, race = plan()
    assert [s.name for s in specs] == ["bsp", "asp", "adaptive"] and seeds == 2
    bsp, asp, adaptive = specs
    assert bsp.lr is not None and asp.lr is not None  # tuned, from the store
    assert adaptive.lr is None and adaptive.momentum is None  # the base rate
    assert target == race.target_loss
    # The settings are those of the generated table's "tuned setting" column.
    page = (ROOT / PAGE).read_text()
    base = ksync_base()
    for spec, rule in ((bsp, "BSP"), (asp, "ASP")):
        label = spec.arm(4, base, 32).label
        assert f"| {rule} | {label} |" in page, (label, PAGE)
    assert race.verdict.endswith(".") and race.reported_seeds and not (
        set(race.reported_seeds) & set(race.tune_seeds))


def ksync_base():
    from cluster_sim.scenarios import load_scenario
    from ksync.learning_rate import LearningRate
    scenario = load_scenario("demo")
    return LearningRate(scenario.learning_rate, momentum=scenario.momentum)


def test_full_is_the_longer_comparison_and_arms_and_seeds_still_win():
    specs, seeds, target, race = plan("--full")
    assert [s.name for s in specs] == ["bsp", "asp", "kasync", "adaptive"]
    assert seeds == 3 and target is None and race is None  # the scenario's target
    specs, seeds, target, _ = plan("--arms", "bsp@0.1,asp", "--seeds", "4")
    assert [s.text for s in specs] == ["bsp@0.1", "asp"] and seeds == 4
    assert target is not None  # the first run's target, with arms of one's own
    specs, seeds, target, race = plan("--scenario", "static")
    assert len(specs) == 4 and seeds == 3 and target is None and race is None


def test_a_missing_or_malformed_store_is_named_with_the_commands_that_make_it(tmp_path):
    from cluster_sim.cli.demo_race import DemoRaceError, load_demo_race
    with pytest.raises(DemoRaceError, match="meta.json: no such file") as missing:
        load_demo_race(tmp_path)
    assert "bench policies --simulate" in str(missing.value)
    assert "bench tables cluster_sim/results/race_demo" in str(missing.value)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(DemoRaceError, match="meta.json: not a compact store"):
        load_demo_race(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"stores": {"other_sim8": {}}}))
    (tmp_path / "other_sim8.jsonl").write_text("")
    with pytest.raises(DemoRaceError, match="has no 'demo_sim4' entry"):
        load_demo_race(tmp_path)


def test_demo_refuses_unknown_arms_with_the_choices():
    done = subprocess.run([sys.executable, "-m", "cluster_sim", "demo", "--arms", "bsp,nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown name 'nope'" in done.stderr
    assert "nbsgd" in done.stderr


def test_allocation_bench_refuses_bad_arms_and_scenarios(capsys):
    from cluster_sim.__main__ import main
    assert main(["bench", "allocation", "--arms", "bsp,nope"]) == 2
    assert "unknown name 'nope'" in capsys.readouterr().err
    assert main(["bench", "allocation", "--scenario", "no-such-scenario"]) == 2
    assert "no-such-scenario" in capsys.readouterr().err
    assert main(["bench", "allocation", "--pushes", "60"]) == 2  # no second half to measure
    assert "--pushes >= 120" in capsys.readouterr().err
