"""Worker-speed matrices with regime changes, for replaying allocation (see ``regret``).

Every source is a ``[n_workers, n_windows]`` speed matrix, one column per allocation
window (1.0 = nominal speed):

* ``machine_usage_speeds``: the Alibaba cluster-trace-v2018 ``machine_usage`` CSV
  (co-located online services and batch jobs). A training worker on a machine gets
  what the co-located jobs leave, so its speed is taken proportional to the available
  CPU capacity ``(100 - cpu_util_percent) / 100`` (at least 0.01), with the load
  averaged over each ``grid_s`` window of a regular grid (the trace samples
  irregularly, ~60 s median; an empty window repeats the previous one).
* a scenario's schedule, as a matrix the caller passes (``regime_sets(scenarios=...)``):
  the lab makes one from a ``cluster_sim`` scenario
  (``cluster_sim.scenarios.windows.speed_matrix``, 0 while a worker is paused or
  killed; ``python -m cluster_sim speeds`` writes them to a file for
  ``python -m predictor.evaluate --regimes``). `true_speeds` turns a stopped worker
  into ``MIN_SPEED``: it still holds its share of the global batch, so the round waits.
  ``measured`` adds seeded log-normal noise (timing jitter) to what the forecaster
  sees. This package reads no scenario file and imports nothing from ``cluster_sim``.

Example:

>>> import numpy as np
>>> from predictor.regime import regime_sets, true_speeds
>>> schedule = np.array([[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.0, 0.5]])  # w1 paused in window 2
>>> true_speeds(schedule).tolist()
[[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.01, 0.5]]
>>> sorted(regime_sets(scenarios={"pause": schedule}, seeds=(0, 1)))
['pause/seed0', 'pause/seed1']
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

__all__ = ["MIN_SPEED", "machine_usage_speeds", "split_machines", "true_speeds",
           "measured", "regime_sets"]

#: speed of a stopped (paused, killed, fully loaded) worker relative to nominal.
MIN_SPEED = 0.01

MACHINE_USAGE_FILE = "machine_usage_16machines.csv"
SAMPLE = Path(__file__).resolve().parent / "data" / "job_2_norm_sample.csv"


def _missing(path: Path, what: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{what} not found at {path}; pass the directory that holds it (in the ksync "
        f"checkout's neighbours: ../shared/traces/...), or try the vendored sample {SAMPLE}")


def machine_usage_speeds(path, grid_s: float = 300.0, min_coverage: float = 0.9):
    """``(names, speeds)``: machines covering ``min_coverage`` of the trace, on one grid.

    ``path`` is the CSV or its directory. Speeds are ``max(100 - mean cpu, 1) / 100``.
    """
    path = Path(path)
    if path.is_dir():
        path = path / MACHINE_USAGE_FILE
    if not path.exists():
        raise _missing(path, "Alibaba 2018 machine_usage CSV")
    rows: dict[str, list[tuple[float, float]]] = {}
    with open(path, newline="") as fh:
        for rec in csv.reader(fh):
            if len(rec) < 3 or not rec[2]:
                continue
            rows.setdefault(rec[0], []).append((float(rec[1]), float(rec[2])))
    if not rows:
        raise ValueError(f"{path}: no machine_id,time_stamp,cpu_util_percent rows")
    t_end = max(r[-1][0] for r in rows.values())
    spans = {m: (r[0][0], r[-1][0]) for m, r in rows.items()}
    keep = sorted(m for m, (a, b) in spans.items() if b - a >= min_coverage * t_end)
    t0 = max(spans[m][0] for m in keep)
    t1 = min(spans[m][1] for m in keep)
    n_bins = int((t1 - t0) // grid_s)
    speeds = []
    for m in keep:
        times, cpu = np.array(rows[m]).T
        b = np.floor((times - t0) / grid_s).astype(int)
        ok = (b >= 0) & (b < n_bins)
        count = np.bincount(b[ok], minlength=n_bins)
        mean_cpu = np.bincount(b[ok], cpu[ok], minlength=n_bins) / np.maximum(count, 1)
        # An empty bin (a gap in the trace) repeats the previous bin's load.
        filled = np.maximum.accumulate(np.where(count > 0, np.arange(n_bins), 0))
        speeds.append(np.maximum(100.0 - mean_cpu[filled], 1.0) / 100.0)
    return keep, np.array(speeds)


def true_speeds(speeds) -> np.ndarray:
    """A ``[workers, windows]`` speed matrix as the replay takes it: a stopped worker
    (speed 0, paused or killed) runs at ``MIN_SPEED``. Raises ValueError on a matrix
    that is not 2-D or holds a negative or non-finite speed.

    >>> true_speeds([[1.0, 0.0]]).tolist()
    [[1.0, 0.01]]
    """
    speeds = np.asarray(speeds, dtype=float)
    if speeds.ndim != 2 or not speeds.size:
        raise ValueError(f"expected a [workers, windows] speed matrix, got shape {speeds.shape}; "
                         "make one from a scenario with "
                         "cluster_sim.scenarios.windows.speed_matrix")
    if not np.all(np.isfinite(speeds)) or np.any(speeds < 0):
        raise ValueError("speeds must be finite and >= 0 (0: a stopped worker), got "
                         f"{speeds[~(np.isfinite(speeds) & (speeds >= 0))][:3].tolist()}")
    return np.maximum(speeds, MIN_SPEED)


def measured(speeds: np.ndarray, noise: float, seed: int = 0) -> np.ndarray:
    """``speeds`` times log-normal noise of standard deviation ``noise`` (per window)."""
    return speeds * np.exp(noise * np.random.default_rng(seed).standard_normal(speeds.shape))


def split_machines(machine_usage) -> tuple[dict, dict]:
    """Machine-usage series split by whole machines: first half train, second half test."""
    machines, speeds = machine_usage_speeds(machine_usage)
    half = len(machines) // 2
    named = dict(zip(machines, speeds))
    return dict(list(named.items())[:half]), dict(list(named.items())[half:])


def regime_sets(machine_usage=None, scenarios: dict | None = None, seeds=(0, 1, 2),
                noise: float = 0.1) -> dict[str, tuple]:
    """The regime-change traces the regret evaluation replays: name -> (true, measured).

    Machine usage: the held-out machines of ``split_machines`` as one cluster (the
    trace is the measurement); scenarios: ``{name: [workers, windows] speeds}`` (e.g.
    ``cluster_sim.scenarios.windows.speed_matrix`` of ``colocated``, ``pause`` and
    ``churn``), the exact schedule as truth (`true_speeds`), with ``noise`` for each
    seed as the measurement.
    """
    out = {}
    if machine_usage is not None:
        test = split_machines(machine_usage)[1]
        speeds = np.array(list(test.values()))
        out[f"machine_usage/{min(test)}..{max(test)}"] = (speeds, speeds)
    for name, speeds in (scenarios or {}).items():
        true = true_speeds(speeds)
        for seed in seeds:
            out[f"{name}/seed{seed}"] = (true, measured(true, noise, seed))
    return out
