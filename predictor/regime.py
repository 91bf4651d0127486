"""Worker-speed matrices with regime changes, for replaying allocation (see ``regret``).

Three sources, each turned into ``[n_workers, n_windows]`` speeds, one column per
allocation window:

* ``machine_usage_speeds``: the Alibaba cluster-trace-v2018 ``machine_usage`` CSV
  (co-located online services and batch jobs). A training worker on a machine gets
  what the co-located jobs leave, so its speed is taken proportional to the available
  CPU capacity ``(100 - cpu_util_percent) / 100`` (at least 0.01), with the load
  averaged over each ``grid_s`` window of a regular grid (the trace samples
  irregularly, ~60 s median; an empty window repeats the previous one).
* ``scenario_speeds``: a ``cluster_sim/scenarios/*.toml`` file's speed schedule
  (base speeds times periodic schedules; a paused or killed worker runs at
  ``MIN_SPEED``: it still holds its share of the global batch, so the round waits),
  sampled once per allocation window of ``allocate_every`` updates at nominal speed,
  exactly; ``measured`` adds seeded log-normal noise (timing jitter) to what the
  forecaster sees. Read with ``tomllib``; nothing from ``cluster_sim`` is imported.
* PAI jobs: ``predictor.traces.load_traces`` grouped by job (``pai_speeds``).

Example:

>>> import os, tempfile
>>> from predictor.regime import scenario_speeds
>>> path = os.path.join(tempfile.mkdtemp(), "two.toml")
>>> with open(path, "w") as fh:
...     _ = fh.write('workers = 2\\ntime_budget_s = 4.0\\n[slowdowns]\\nspeeds = [1.0, 0.5]\\n'
...                  '[[events]]\\naction = "pause"\\nworker = 1\\nat_s = 2.0\\n'
...                  'duration_s = 1.0\\n')
>>> s = scenario_speeds(path, window_s=1.0)
>>> s.tolist()
[[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.01, 0.5]]
"""

from __future__ import annotations

import csv
import math
import tomllib
from pathlib import Path

import numpy as np

__all__ = ["MIN_SPEED", "machine_usage_speeds", "split_machines", "scenario_speeds",
           "measured", "pai_speeds", "regime_sets"]

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


def _piecewise(times, speeds, period, t: np.ndarray) -> np.ndarray:
    """Value of a piecewise-constant schedule at times ``t`` (repeating every ``period``)."""
    t = np.mod(t, period) if period else t
    return np.asarray(speeds, dtype=float)[np.searchsorted(times, t, side="right") - 1]


def scenario_speeds(path, window_s: float | None = None, allocate_every: int = 20) -> np.ndarray:
    """True speeds per allocation window of a scenario TOML, ``[workers, windows]``.

    ``window_s`` defaults to the time of ``allocate_every`` updates at speed 1
    (``allocate_every * batch_size * us_per_sample``).
    """
    path = Path(path)
    if not path.exists():
        raise _missing(path, "scenario TOML")
    with open(path, "rb") as fh:
        spec = tomllib.load(fh)
    n = int(spec["workers"])
    if window_s is None:
        batch = spec.get("training", {}).get("batch_size", 32)
        window_s = allocate_every * batch * spec.get("us_per_sample", 300.0) * 1e-6
    t = np.arange(0.0, spec.get("time_budget_s", 120.0), window_s) + window_s / 2
    slow = spec.get("slowdowns", {})
    if "trace" in slow:
        raise ValueError(f"{path}: trace-driven scenarios replay real traces; use "
                         "pai_speeds on the trace directory instead")
    speeds = np.ones((n, t.size)) * np.asarray(slow.get("speeds", [1.0] * n), float)[:, None]
    for sch in slow.get("schedule", []):
        factor = _piecewise(sch["times_s"], sch["speeds"], sch.get("period_s"), t)
        speeds[sch["workers"]] *= factor
    for ev in spec.get("events", []):
        end = ev.get("at_s", 0.0) + ev.get("duration_s", 0.0) if ev["action"] == "pause" \
            else ev.get("restart_at_s", math.inf)
        stopped = (t >= ev["at_s"]) & (t < end)
        speeds[ev["worker"], stopped] = MIN_SPEED
    return speeds


def measured(speeds: np.ndarray, noise: float, seed: int = 0) -> np.ndarray:
    """``speeds`` times log-normal noise of standard deviation ``noise`` (per window)."""
    return speeds * np.exp(noise * np.random.default_rng(seed).standard_normal(speeds.shape))


def pai_speeds(directory) -> dict[str, np.ndarray]:
    """Each PAI job of ``directory`` as ``[workers, points]`` (cut to the shortest worker)."""
    from .checks import clean_series
    from .traces import load_traces

    jobs: dict[str, list[np.ndarray]] = {}
    for s in load_traces(directory):
        jobs.setdefault(s.job, []).append(clean_series(s.speed, s.name))
    return {job: np.array([x[:min(map(len, xs))] for x in xs]) for job, xs in jobs.items()}


def split_machines(machine_usage) -> tuple[dict, dict]:
    """Machine-usage series split by whole machines: first half train, second half test."""
    machines, speeds = machine_usage_speeds(machine_usage)
    half = len(machines) // 2
    named = dict(zip(machines, speeds))
    return dict(list(named.items())[:half]), dict(list(named.items())[half:])


def regime_sets(machine_usage=None, scenarios=None, names=("colocated", "pause", "churn"),
                seeds=(0, 1, 2), noise: float = 0.1) -> dict[str, tuple]:
    """The regime-change traces the regret evaluation replays: name -> (true, measured).

    Machine usage: the held-out machines of ``split_machines`` as one cluster (the
    trace is the measurement); scenarios: each named TOML under ``scenarios``, the
    exact schedule as truth, with ``noise`` for each seed as the measurement.
    """
    out = {}
    if machine_usage is not None:
        test = split_machines(machine_usage)[1]
        speeds = np.array(list(test.values()))
        out[f"machine_usage/{min(test)}..{max(test)}"] = (speeds, speeds)
    if scenarios is not None:
        for name in names:
            true = scenario_speeds(Path(scenarios) / f"{name}.toml")
            for seed in seeds:
                out[f"{name}/seed{seed}"] = (true, measured(true, noise, seed))
    return out
