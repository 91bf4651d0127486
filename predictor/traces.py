"""Reading per-worker step-time traces and splitting them by whole workers.

Input: a directory of CSV files in the long format of the Alibaba PAI
``job_N_norm.csv`` traces: a header with at least ``worker``, ``time`` and a
step-time column (``batch_time_norm`` by default); other columns are ignored.
Each (file, worker) pair is one series; speed is ``1000 / step_time``.

Example:

>>> import os, tempfile
>>> from predictor.traces import load_traces
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "job.csv"), "w") as fh:
...     _ = fh.write(",worker,gpu,time,batch_time_norm\\n0,0,20,1,500\\n1,0,20,11,250\\n")
>>> [(s.job, s.worker, s.speed.tolist()) for s in load_traces(d)]
[('job', '0', [2.0, 4.0])]
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Series", "load_traces", "split_by_worker"]


@dataclass
class Series:
    job: str
    worker: str
    speed: np.ndarray

    @property
    def name(self) -> str:
        return f"{self.job}/w{self.worker}"


def load_traces(directory, value_column: str = "batch_time_norm") -> list[Series]:
    """All series in ``directory/*.csv`` that have the needed columns, sorted by time.

    Files without ``worker``/``time``/``value_column`` columns are skipped (e.g.
    ``coefficient_variation.csv``). Raises ``ValueError`` if nothing is usable.
    """
    files = sorted(Path(directory).glob("*.csv"))
    if not files:
        raise ValueError(f"no CSV files in {directory!s}")
    out = []
    for path in files:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not {"worker", "time", value_column} <= set(reader.fieldnames):
                continue
            rows: dict[str, list[tuple[float, float]]] = {}
            for row in reader:
                try:
                    value = float(row[value_column])
                except ValueError:
                    value = np.nan  # kept as a gap; forecasters clean it with a warning
                rows.setdefault(row["worker"], []).append((float(row["time"]), value))
        for worker in sorted(rows, key=_natural):
            pts = sorted(rows[worker])
            times = np.array([p[1] for p in pts])
            with np.errstate(divide="ignore", invalid="ignore"):
                speed = np.where(times > 0, 1000.0 / times, np.nan)
            out.append(Series(path.stem, worker, speed))
    if not out:
        raise ValueError(f"no CSV in {directory!s} has columns worker, time, {value_column}")
    return out


def _natural(key: str):
    return (0, int(key)) if key.isdigit() else (1, key)


def split_by_worker(series: list[Series], test_fraction: float = 0.3,
                    val_fraction: float = 0.1, seed: int = 0):
    """Split whole workers, within each job, into train / validation / test.

    Per job with ``n`` workers (fixed-seed shuffle): ``round(test_fraction * n)``
    test workers (at least 1 when ``n >= 2``), ``round(val_fraction * n)``
    validation workers (at least 1 when ``n >= 3``), the rest train. A job with a
    single worker goes to training. Returns three lists of ``Series``.
    """
    rng = np.random.default_rng(seed)
    jobs: dict[str, list[Series]] = {}
    for s in series:
        jobs.setdefault(s.job, []).append(s)
    train, val, test = [], [], []
    for job in sorted(jobs):
        members = jobs[job]
        n = len(members)
        order = rng.permutation(n)
        n_test = max(1 if n >= 2 else 0, int(round(test_fraction * n)))
        n_val = max(1 if n >= 3 else 0, int(round(val_fraction * n)))
        test += [members[i] for i in order[:n_test]]
        val += [members[i] for i in order[n_test:n_test + n_val]]
        train += [members[i] for i in order[n_test + n_val:]]
    if not train or not test:
        raise ValueError("need at least one job with two or more workers to hold out a test "
                         "worker and keep a training worker")
    return train, val, test
