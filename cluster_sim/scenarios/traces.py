"""The one reader of Alibaba-PAI-format step-time traces in `cluster_sim`, and their
conversion into looping speed schedules.

Input: a directory of CSV files in the long format of the Alibaba PAI ``job_N_norm.csv``
traces (columns ``worker``, ``time``, ``batch_time_norm``; other columns ignored). A
worker's speed is proportional to ``1 / batch_time_norm``. `load_trace_series` reads
every (file, worker) series with its times (`predictor.traces.load_traces` reads the same
files for the forecaster but keeps no time column and keeps bad rows as NaN gaps, which a
speed schedule cannot hold); `trace_schedules` turns chosen series into
`SpeedSchedule`s that loop, normalised so the fastest chosen worker's median is 1.0: a
trace only ever slows the reference machine down.

Example:

>>> series = load_trace_series(DEFAULT_TRACE_DIR)
>>> name, times, speeds = series[0]
>>> name, len(times) == len(speeds)
('job_2_norm_sample/w0', True)
>>> schedules = trace_schedules([series[1][1:], series[2][1:]], time_unit_s=0.01)
>>> max(float(np.median(s.speeds)) for s in schedules)
1.0
"""

from __future__ import annotations

import csv
import math
import pathlib

import numpy as np

from cluster_sim.scenarios.model import SpeedSchedule

__all__ = ["DEFAULT_TRACE_DIR", "load_trace_series", "trace_schedules"]

# A 60-point slice of a real Alibaba PAI trace (CC BY 4.0, see predictor/data/README.md),
# so the trace scenario works from a fresh clone without ../shared.
DEFAULT_TRACE_DIR = pathlib.Path(__file__).parent.parent.parent / "predictor" / "data"


def load_trace_series(directory, value_column: str = "batch_time_norm"):
    """``[(name, times, speeds)]`` for every (file, worker) series of ``directory/*.csv``,
    ``name`` being ``"<file stem>/w<worker>"``.

    Speeds are ``1 / value`` divided by the median over the file, so the typical worker of
    each job has speed 1.0; rows with a missing or non-positive value are skipped. Files
    without the needed columns (e.g. ``coefficient_variation.csv``) are ignored.
    """
    path = pathlib.Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"trace directory {str(directory)!r} does not exist")
    files = sorted(path.glob("*.csv"))
    series = []
    for file in files:
        with open(file, newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not {"worker", "time", value_column} <= set(
                    reader.fieldnames):
                continue
            rows = {}
            for row in reader:
                try:
                    t, v = float(row["time"]), float(row[value_column])
                except (TypeError, ValueError):
                    continue
                if v > 0 and math.isfinite(v) and math.isfinite(t):
                    rows.setdefault(row["worker"], []).append((t, 1.0 / v))
        if not rows:
            continue
        median = float(np.median([s for pts in rows.values() for _, s in pts]))
        for worker in sorted(rows, key=lambda k: (0, int(k)) if k.isdigit() else (1, k)):
            pts = sorted(rows[worker])
            series.append((f"{file.stem}/w{worker}", np.array([p[0] for p in pts]),
                           np.array([p[1] for p in pts]) / median))
    if not series:
        raise ValueError(f"no CSV file in {str(directory)!r} has columns worker, time and "
                         f"{value_column} with positive values")
    return series


def trace_schedules(chosen, time_unit_s: float) -> list[SpeedSchedule]:
    """One looping `SpeedSchedule` per ``(times, speeds)`` series of ``chosen``, with
    ``time_unit_s`` seconds per unit of the trace's time column. Speeds are divided by
    the largest median of the chosen series; each series loops, its last point holding
    for one mean sampling interval."""
    top = max(float(np.median(s)) for _, s in chosen)
    out = []
    for times, speeds in chosen:
        # Real traces repeat a time now and then (job_2 worker 0): keep its last value.
        last = len(times) - 1 - np.unique(times[::-1], return_index=True)[1]
        times, speeds = times[last], speeds[last]
        start = times - times[0]
        step = (start[-1] / (len(start) - 1)) if len(start) > 1 else 1.0
        out.append(SpeedSchedule(tuple(start * time_unit_s), tuple(speeds / top),
                                 period_s=(start[-1] + step) * time_unit_s))
    return out
