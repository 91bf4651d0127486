"""The README's main command, end to end: its own local cluster, a report, a clean exit."""

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import processes_with

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cluster
def test_demo_command_writes_the_report_and_exits_cleanly(tmp_path):
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
    assert "reached target loss 1.3" in done.stderr or "target loss 1.3 not reached" in done.stderr
    # The demo's own workload and target, said before the first run.
    assert "teacher data, target validation loss 1.3" in done.stdout
    # The table ends with a verdict computed from the runs (one seed: say so).
    assert "BSP reached the target fastest" in done.stdout or "No rule reached" in done.stdout
    assert "one seed cannot separate the rules" in done.stdout or "No rule" in done.stdout
    # Its cluster is gone (its own processes only: other programs may run servers).
    assert processes_with(token) == []


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
