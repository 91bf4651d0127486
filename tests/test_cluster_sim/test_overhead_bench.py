"""The lean-path profile's comparison of allocation arms with equal batches (pure:
no cluster)."""

import argparse
import json

from cluster_sim.cli import overhead
from cluster_sim.report.stats import paired_ratio_ci


def _runs(rate, cpu_ms, samples_per_step, n=5):
    return [(rate, {"total": cpu_ms + 0.01 * i, "samples_per_step": samples_per_step}, {})
            for i in range(n)]


def test_allocation_is_compared_with_equal_batches_per_sample(capsys):
    runs = {"stock": _runs(100, 20.0, 32), "bsp": _runs(50, 22.0, 32),
            # allocation: steps of 48 samples at 1.65x the CPU, i.e. 1.10x per sample
            "bsp+alloc": _runs(50, 36.3, 48), "asp+alloc": _runs(60, 30.0, 40)}
    overhead._print_allocation(runs)
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("bsp+alloc / bsp"))
    cells = row.split()
    assert cells[3:5] == ["2400", "1600"]  # samples/s: rate x samples per step
    assert cells[5] == "1.500" and cells[10] == "1.100"
    assert "asp+alloc" not in out  # no equal-batch ASP arm ran: nothing to pair with


def test_no_allocation_arm_prints_nothing(capsys):
    overhead._print_allocation({"stock": _runs(100, 20.0, 32), "bsp": _runs(50, 22.0, 32)})
    assert capsys.readouterr().out == ""


def _saved(path, stock_cpu, asp_cpu, workers=3):
    def run(cpu):
        ms = {"total": cpu, "chief": cpu / 3, "worker": cpu / 3, "ps": cpu / 3,
              "parts": {}, "samples_per_step": 32}
        return [100.0, ms, {"gate": 0.0, "refresh": 0.0}]
    path.write_text(json.dumps({"meta": {"workers": workers, "steps": 600}, "runs": {
        "stock": [run(c) for c in stock_cpu], "asp": [run(c) for c in asp_cpu]}}))
    return str(path)


def test_pool_pairs_each_run_with_its_own_files_stock(tmp_path, capsys):
    """Two saved benches pooled: each file's run i stays paired with that file's stock
    run i (ratios 1.1, 1.2 and 1.3, 1.4, whatever the other file's stock)."""
    a = _saved(tmp_path / "a.json", [10.0, 20.0], [11.0, 24.0])
    b = _saved(tmp_path / "b.json", [5.0, 40.0], [6.5, 56.0])
    args = argparse.Namespace(pool=[a, b])
    assert overhead.run(args) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("asp "))
    expected = paired_ratio_ci([11.0, 24.0, 6.5, 56.0], [10.0, 20.0, 5.0, 40.0])
    assert f"{expected[0]:.3f} [{expected[1]:.2f}, {expected[2]:.2f}]" in row
    assert "median of 4 interleaved runs" in out


def test_pool_refuses_files_of_other_settings(tmp_path, capsys):
    a = _saved(tmp_path / "a.json", [10.0], [11.0])
    b = _saved(tmp_path / "b.json", [10.0], [11.0], workers=8)
    assert overhead.run(argparse.Namespace(pool=[a, b])) == 2
    assert "b.json was measured with" in capsys.readouterr().err
    assert overhead.run(argparse.Namespace(pool=[str(tmp_path / "nope.json")])) == 2
