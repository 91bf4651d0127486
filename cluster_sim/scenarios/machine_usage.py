"""Co-located load from the Alibaba 2018 machine-usage trace, as speed schedules.

A training worker on a machine shared with other jobs gets what they leave: its speed is
the machine's available CPU, ``(100 - cpu_util_percent) / 100`` (1.0 = an idle machine,
the reference), averaged over each ``grid_s`` window of the trace (it samples
irregularly, ~60 s median) by `predictor.regime.machine_usage_speeds`, the same reading
the forecaster is trained and judged on. `usage_schedules` turns chosen machines into
`SpeedSchedule`s played ``1 / time_unit_s`` times faster than the trace (a 300 s window
lasts 10 s of a run at ``time_unit_s = 1/30``), looping after the trace's end.

The trace has no licence that allows redistributing it, so it is never shipped with
ksync: it is read by path (``../shared/traces/alibaba2018_machine_usage`` next to this
checkout by default), and a missing file is a `FileNotFoundError` naming the path and the
way to pass another.

Example (needs the trace; skipped without it):

>>> if usage_file(None).exists():
...     names, speeds = machine_speeds(usage_file(None), grid_s=300.0)
...     schedules = usage_schedules(names, speeds, ["m_1934"], 300.0, time_unit_s=1 / 30)
...     s = schedules[0]
...     assert s.speed(5.0) == speeds[names.index("m_1934")][0] and s.speed(15.0) == s.speeds[1]
"""

from __future__ import annotations

import functools
import pathlib

from cluster_sim.scenarios.model import SpeedSchedule

__all__ = ["DEFAULT_MACHINE_USAGE_DIR", "MACHINE_USAGE_FILE", "usage_file", "machine_speeds",
           "usage_schedules"]

MACHINE_USAGE_FILE = "machine_usage_16machines.csv"
# The shared traces beside the checkout (``<checkout>/..`` -> ``../shared/traces``).
DEFAULT_MACHINE_USAGE_DIR = (pathlib.Path(__file__).resolve().parents[3] / "shared" / "traces"
                             / "alibaba2018_machine_usage")


def usage_file(path) -> pathlib.Path:
    """The machine-usage CSV for ``path`` (the CSV, its directory, or None: the default).

    >>> usage_file("/data/usage").name
    'machine_usage_16machines.csv'
    """
    path = pathlib.Path(path) if path is not None else DEFAULT_MACHINE_USAGE_DIR
    return path if path.suffix == ".csv" else path / MACHINE_USAGE_FILE


def machine_speeds(path, grid_s: float) -> tuple[list[str], list]:
    """``(machine names, [machine][window] available capacity)`` of the CSV at ``path``,
    for the machines that cover 90 % of the trace (read once per file and grid)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"the Alibaba 2018 machine-usage trace is not at {str(path)!r}; it is not shipped "
            "with ksync (no licence allows it): pass its directory (machine_usage=... in "
            "Python, e.g. ../shared/traces/alibaba2018_machine_usage) or set dir under "
            "[slowdowns.machine_usage]")
    stat = path.stat()
    return _read(str(path.resolve()), stat.st_mtime_ns, stat.st_size, float(grid_s))


@functools.lru_cache(maxsize=4)
def _read(path, _mtime, _size, grid_s):
    # The file key includes mtime and size, so a changed file is read again.
    from predictor.regime import machine_usage_speeds
    names, speeds = machine_usage_speeds(path, grid_s=grid_s)
    return list(names), [_backfill(tuple(map(float, row))) for row in speeds]


def _backfill(row: tuple) -> tuple:
    """``row`` with its leading windows of exactly 1.0 replaced by the first real one.

    `predictor.regime.machine_usage_speeds` fills an empty window with the previous one;
    a machine whose samples start a few windows after the common start has no previous
    one and reads 0 % CPU there (speed exactly 1.0, which no busy machine's 300 s mean
    ever is): the gap takes the first measured value instead.

    >>> _backfill((1.0, 1.0, 0.7, 1.0, 0.6))
    (0.7, 0.7, 0.7, 1.0, 0.6)
    """
    lead = next((i for i, v in enumerate(row) if v != 1.0), 0)
    return (row[lead],) * lead + row[lead:]


def usage_schedules(names, speeds, machines, grid_s: float, time_unit_s: float,
                    start_s: float = 0.0) -> list[SpeedSchedule]:
    """One looping `SpeedSchedule` per machine of ``machines``: its window speeds from
    ``start_s`` seconds into the trace, each window lasting ``grid_s * time_unit_s``
    seconds of the run. Raises ``ValueError`` naming an unknown machine or a start past
    the trace's end."""
    first = int(start_s // grid_s)
    out = []
    for machine in machines:
        if machine not in names:
            raise ValueError(f"no machine {machine!r} covering the trace (have "
                             f"{', '.join(names)})")
        row = speeds[names.index(machine)][first:]
        if not row:
            raise ValueError(f"start_s {start_s:g} is past the trace's end "
                             f"({len(speeds[0]) * grid_s:g} s)")
        window = grid_s * time_unit_s
        out.append(SpeedSchedule(tuple(i * window for i in range(len(row))), tuple(row),
                                 period_s=len(row) * window))
    return out
