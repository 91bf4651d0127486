"""The lean-path profile's comparison of allocation arms with equal batches (pure:
no cluster)."""

from cluster_sim.cli import overhead


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
