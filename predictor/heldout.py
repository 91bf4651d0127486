"""Evaluation folds: hold out whole workers of every job, or whole jobs one at a time.

``holdout="worker"`` is the split of ``predictor.traces.split_by_worker`` (one
fold). ``holdout="job"`` gives one fold per job: every worker of that job is
test, the other jobs train (one validation worker each, for early stopping), so
a model is judged on a job it has never seen. ``extra_train`` series (e.g.
the training machines of the 2018 machine-usage trace) join every fold's training
set and are never tested on.

Example:

>>> import numpy as np
>>> from predictor.traces import Series
>>> series = [Series(job, str(w), np.ones(5)) for job in "ab" for w in range(3)]
>>> [(f.name, len(f.train), len(f.val), sorted(f.test)) for f in make_folds(series, "job")]
[('a', 2, 1, ['a']), ('b', 2, 1, ['b'])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import clean_series
from .traces import Series, split_by_worker

__all__ = ["Fold", "make_folds", "HOLDOUTS"]

HOLDOUTS = ("worker", "job")


@dataclass
class Fold:
    """Training, validation and test series of one fold (test grouped by job)."""

    name: str
    train: list[np.ndarray]
    val: list[np.ndarray]
    test: dict[str, list[np.ndarray]] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)


def _clean(part: list[Series]) -> list[np.ndarray]:
    return [clean_series(s.speed, s.name) for s in part]


def make_folds(series: list[Series], holdout: str = "worker", seed: int = 0,
               extra_train=(), with_all: bool = False) -> list[Fold]:
    """The folds for ``holdout``; ``with_all`` adds a fold ``"all"`` that trains on
    every job (minus validation workers) and tests nothing, for traces outside
    ``series`` such as regime-change schedules."""
    if holdout not in HOLDOUTS:
        raise ValueError(f"holdout must be one of {HOLDOUTS}, got {holdout!r}")
    extra = [np.asarray(x, dtype=np.float64) for x in extra_train]
    folds = []
    if holdout == "worker":
        train, val, test = split_by_worker(series, seed=seed)
        folds.append(_fold("workers", train, val, test, extra))
    else:
        jobs = sorted({s.job for s in series})
        if len(jobs) < 2:
            raise ValueError(f"holding out whole jobs needs two or more jobs (CSV files) in the "
                             f"traces directory, found {jobs}; use --holdout worker")
        for job in jobs:
            folds.append(_fold(job, *_train_val([s for s in series if s.job != job], seed),
                               [s for s in series if s.job == job], extra))
    if with_all:
        folds.append(_fold("all", *_train_val(series, seed), [], extra))
    return folds


def _train_val(series: list[Series], seed: int):
    # split_by_worker always holds out a test worker; here it trains like the rest.
    train, val, test = split_by_worker(series, test_fraction=0.0, seed=seed)
    return train + test, val


def _fold(name, train, val, test, extra) -> Fold:
    grouped: dict[str, list[Series]] = {}
    for s in test:
        grouped.setdefault(s.job, []).append(s)
    return Fold(name, _clean(train) + extra, _clean(val),
                {job: _clean(part) for job, part in grouped.items()},
                {"train": [s.name for s in train], "validation": [s.name for s in val],
                 "test": [s.name for s in test]})
