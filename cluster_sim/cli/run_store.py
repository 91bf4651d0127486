"""Finished runs of a benchmark matrix kept on disk, so a matrix of many hours can be
stopped (``--stop-after``, Ctrl-C, the end of a session) and resumed where it stopped.

A store is a directory holding ``conditions.json`` (what every run in it was made under:
the scenario, the injected compute, the run settings, the framework costs) and
``runs.jsonl`` (one finished run per line, written as soon as the run ends). A run is
identified by its arm label and seed: the same command run again takes the runs already
there instead of repeating them. Runs made under other conditions are never mixed in:
opening the store with different conditions is an error naming what differs.

Example:

>>> import tempfile
>>> tmp = tempfile.mkdtemp()
>>> store = RunStore(tmp, {"scenario": "static", "us_per_sample": 5000.0})
>>> store.add({"policy": "BSP", "seed": 0, "tta_s": 700.0})
>>> RunStore(tmp, {"scenario": "static", "us_per_sample": 5000.0}).get("BSP", 0)["tta_s"]
700.0
>>> RunStore(tmp, {"scenario": "static", "us_per_sample": 9000.0})
Traceback (most recent call last):
...
ValueError: ... holds runs made under other conditions (us_per_sample: 5000.0 there, 9000.0 now); resume with the same settings, pass --fresh to discard those runs, or choose another --out
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

__all__ = ["RunStore", "saved_conditions"]

_CONDITIONS = "conditions.json"
_RUNS = "runs.jsonl"


def _canonical(value):
    """``value`` as it reads back from JSON (tuples become lists, NaN null)."""
    from cluster_sim.report.writer import json_safe
    return json.loads(json.dumps(json_safe(value)))


def _flat(conditions: dict, prefix: str = "") -> dict:
    """Nested settings as ``{"run_config.batch_size": 32, ...}``: an error names the
    setting that differs, not the whole group."""
    out = {}
    for key, value in conditions.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _differences(saved: dict, now: dict) -> str:
    """The settings ``saved`` and ``now`` give differently ("" for none), each named
    with both values. A setting one side lacks and the other holds at None is the same:
    a setting added since the store was made (or dropped), at None, means what its
    absence meant (e.g. ``run_config.target``: the workload's default target).

    >>> _differences({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": None})
    'b.c: 2 there, 3 now'
    >>> _differences({"a": 1}, {"a": 1, "e": 0.5})
    'e: absent there, 0.5 now'
    """
    absent = object()
    there, here = _flat(saved), _flat(now)
    show = lambda v: "absent" if v is absent else repr(v)
    return "; ".join(f"{k}: {show(there.get(k, absent))} there, {show(here.get(k, absent))} now"
                     for k in sorted(set(there) | set(here))
                     if there.get(k) != here.get(k))


def saved_conditions(directory) -> dict | None:
    """The conditions of the store in ``directory`` (None: there is none)."""
    path = pathlib.Path(directory) / _CONDITIONS
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a run store's conditions ({err}); pass --fresh to "
                         "start over there") from None


class RunStore:
    """The runs made under ``conditions`` in ``directory`` (created if missing;
    ``fresh=True`` discards what is there first)."""

    def __init__(self, directory, conditions: dict, fresh: bool = False):
        self.directory = pathlib.Path(directory)
        if fresh and self.directory.exists():
            shutil.rmtree(self.directory)
        self.conditions = _canonical(conditions)
        saved = saved_conditions(self.directory)
        differ = _differences(saved, self.conditions) if saved is not None else ""
        if differ:
            raise ValueError(f"{self.directory} holds runs made under other conditions "
                             f"({differ}); resume with the same settings, pass --fresh to "
                             "discard those runs, or choose another --out")
        self.directory.mkdir(parents=True, exist_ok=True)
        if saved is None:
            (self.directory / _CONDITIONS).write_text(json.dumps(self.conditions, indent=1))
        self._runs = {}
        path = self.directory / _RUNS
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    run = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the last line of a process killed while writing it
                self._runs[(run["policy"], int(run["seed"]))] = run

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, label: str, seed: int) -> dict | None:
        """The finished run of arm ``label`` with ``seed``, if there is one."""
        return self._runs.get((label, int(seed)))

    def add(self, run: dict) -> None:
        """Keep a finished run (``run["policy"]`` and ``run["seed"]`` identify it); on
        disk before this returns."""
        run = _canonical(run)
        with open(self.directory / _RUNS, "a") as f:
            f.write(json.dumps(run) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._runs[(run["policy"], int(run["seed"]))] = run
