"""Reading scenarios from TOML: the built-ins in ``cluster_sim/scenarios/*.toml`` or any file.

Built-ins: ``homogeneous``, ``static``, ``slow3x``, ``trace``, ``colocated``, ``pause``,
``churn`` (4 workers, digits: the demo's and the tests'), ``ctr_small`` (the held-out
``ctr`` workload on 2 workers and 2 PS tasks, for tests), and the benchmark's 8-worker set
``bench/<name>`` (`bench_names`: the same seven names plus ``colocated_usage``, on the
``teacher`` workload, and each of them as ``bench/ctr_<name>``: the same cluster on the
held-out ``ctr`` workload, on 2 PS tasks, `HELD_OUT`; see ``bench/README.md``). Every
problem raises ``ValueError`` naming the file and the key.

TOML keys (all optional except ``workers``)::

    name = "static"          # default: the file's stem
    description = "..."
    workers = 4
    ps = 1                             # PS tasks of the real cluster (ctr shards its
                                       # embedding tables over them)
    data = "digits"                    # or "teacher", "ctr" (cluster_sim.workloads)
    target = "late"                    # which of the workload's targets (ctr: "early",
                                       # the default, or "late"); omit: its default
    target_loss = 0.5                  # a validation loss instead of the workload's
    target_accuracy = 0.93
    time_budget_s = 120.0
    max_pushes = 1200
    us_per_sample = 300.0
    [model]
    hidden = [64, 64]
    [training]
    batch_size = 32
    learning_rate = 0.05
    momentum = 0.9
    [slowdowns]
    inject = "delay"                   # or "sigstop": black-box SIGSTOP/SIGCONT duty cycle
    speeds = [1, 1, 0.5, 0.25]         # one static factor per worker
    [[slowdowns.schedule]]             # a piecewise-constant factor on some workers
    workers = [0, 1]
    times_s = [0, 15]                  # start of each piece; first must be 0
    speeds = [1.0, 0.5]
    period_s = 30                      # repeat (omit: the last piece holds forever)
    [slowdowns.trace]                  # worker i follows trace series workers[i]
    dir = "path"                       # relative to the TOML file; omit: vendored sample
    job = "job_2"                      # file stem or its prefix before "_"; omit: first file
    workers = [1, 2, 3, 5]             # omit: the first `workers` series of the job
    time_unit_s = 0.0096               # seconds per unit of the trace's time column
                                       # (omit: one nominal step, batch_size * us_per_sample)
    [slowdowns.machine_usage]          # Alibaba 2018 machine usage: speed = 1 - cpu / 100
    dir = "path"                       # the CSV or its directory, relative to the TOML file;
                                       # omit: ../shared/traces/alibaba2018_machine_usage
    machines = ["m_1934", "m_1935"]    # one machine per worker listed in workers
    workers = [0, 1]                   # omit: workers 0, 1, ... (one per machine)
    grid_s = 300                       # trace seconds averaged into one speed
    time_unit_s = 0.0333               # run seconds per trace second (1/30: 30x faster)
    start_s = 0                        # where in the trace (seconds after its start)
    [[events]]
    action = "pause"                   # or "kill" (with restart_at_s to restart)
    worker = 3
    at_s = 20
    duration_s = 20
    [[events]]                         # or at fractions of a reference run's duration
    action = "kill"                    # (restart_at_fraction to restart; a pause takes
    worker = 1                         # duration_fraction)
    at_fraction = 0.1
    restart_at_fraction = 0.2
    event_reference_s = 300.0          # top level: the reference's seconds, when known
                                       # (omit: `bench policies` measures it; anything
                                       # else refuses to play the scenario until given)

Example:

>>> s = load_scenario("static")
>>> s.num_workers, s.speeds_at(0.0)
(4, [1.0, 1.0, 0.5, 0.25])
>>> c = load_scenario("churn")
>>> [(e.at_s, e.worker, e.action) for e in c.events]
[(20.0, 3, 'kill'), (45.0, 3, 'restart')]
>>> c.effective_speed(3, 30.0), c.effective_speed(3, 50.0)
(0.0, 0.25)
>>> b = load_scenario("bench/static", overrides={"us_per_sample": 2000.0})
>>> b.name, b.num_workers, b.data, b.us_per_sample
('bench/static', 8, 'teacher', 2000.0)
>>> h = load_scenario("bench/ctr_trace")
>>> h.data, h.num_ps, h.speeds_at(0) == load_scenario("bench/trace").speeds_at(0)
('ctr', 2, True)
"""

from __future__ import annotations

import math
import pathlib
import tomllib

from cluster_sim.ctr import CTR_TARGETS, CTR_TRAINING
from cluster_sim.scenarios.machine_usage import machine_speeds, usage_file, usage_schedules
from cluster_sim.scenarios.model import (Event, RelativeEvent, Scenario, SpeedSchedule,
                                         check_event_order, event_order)
from cluster_sim.scenarios.traces import DEFAULT_TRACE_DIR, load_trace_series, trace_schedules
from cluster_sim.scenarios.training import TIME_BUDGET_S, TrainingConfig

__all__ = ["BUILTIN_DIR", "BENCH_DIR", "builtin_names", "bench_names", "load_scenario",
           "parse_scenario"]

BUILTIN_DIR = pathlib.Path(__file__).parent
BENCH_DIR = BUILTIN_DIR / "bench"

_TOP_KEYS = {"name", "description", "workers", "ps", "data", "target", "target_accuracy",
             "target_loss", "time_budget_s", "max_pushes", "us_per_sample", "model", "training",
             "slowdowns", "events", "event_reference_s"}
_TRACE_KEYS = {"dir", "job", "workers", "time_unit_s"}
_USAGE_KEYS = {"dir", "machines", "workers", "grid_s", "time_unit_s", "start_s"}
# The workloads of `cluster_sim.workloads` a scenario may name, and the targets each
# names (`cluster_sim.workloads.Dataset.targets`; none: only its default target).
_DATASETS = ("digits", "teacher", "ctr")
_TRAINING = TrainingConfig()  # what a file leaves out
_NAMED_TARGETS = {"ctr": tuple(CTR_TARGETS)}

#: The held-out workload's benchmark scenarios (issue 46): ``bench/ctr_<name>`` is
#: ``bench/<name>``'s cluster (speeds, trace, events) training the ``ctr`` model
#: (`cluster_sim.ctr`) at its own settings (`CTR_TRAINING`), its embedding tables sharded
#: over 2 PS tasks, to its early target. One file per cluster, so every cluster has both
#: workloads and they cannot drift apart. The run's defaults: BSP at lr 0.05 needs ~1,600
#: rounds (12,800 pushes on 8 workers) to the early target, ~3,000 to the late one.
HELD_OUT_PREFIX = "ctr_"
HELD_OUT = {"data": "ctr", "ps": 2, "target": "early",
            "model": {"hidden": list(CTR_TRAINING["hidden"])},
            "training": {k: CTR_TRAINING[k]
                         for k in ("batch_size", "learning_rate", "momentum")},
            "max_pushes": 40000, "time_budget_s": 3600.0}


def builtin_names() -> list[str]:
    """Names of the scenarios shipped in ``cluster_sim/scenarios/*.toml`` (4 workers)."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def bench_names() -> list[str]:
    """Names of the benchmark's 8-worker scenarios, ``bench/<stem>`` of
    ``cluster_sim/scenarios/bench/*.toml``.

    >>> "bench/trace" in bench_names() and "bench/ctr_colocated_usage" in bench_names()
    True
    """
    stems = [p.stem for p in BENCH_DIR.glob("*.toml")]
    return sorted(f"bench/{p}{s}" for s in stems for p in ("", HELD_OUT_PREFIX))


def _held_out(name: str, table: dict) -> dict:
    """``bench/<base>``'s ``table`` as the held-out scenario ``name`` (`HELD_OUT`)."""
    table = dict(table, name=name, description=(
        f"{table.get('description', '')}; the held-out ctr workload, 2 PS tasks"))
    table.pop("target_accuracy", None)  # a teacher target: ctr's are losses
    for key, value in HELD_OUT.items():
        table[key] = dict(table.get(key, {}), **value) if isinstance(value, dict) else value
    return table


def load_scenario(name_or_path, traces_dir=None, machine_usage=None,
                  overrides=None) -> Scenario:
    """A built-in scenario by name (``static``, ``bench/static``, ...), or a TOML file.

    ``traces_dir`` replaces the trace directory of a scenario with a ``[slowdowns.trace]``
    section (e.g. ``../shared/traces/alibaba_pai``), ``machine_usage`` the CSV (or its
    directory) of one with ``[slowdowns.machine_usage]``; other scenarios ignore them, so
    one command line serves all. ``overrides`` replaces keys of the file before it is read,
    dotted for sections (``{"us_per_sample": 2000.0, "training.batch_size": 64}``), so
    what derives from them (a trace's default time unit) follows. Raises ``ValueError``
    naming the file and key on any problem.

    >>> load_scenario("homogeneous").speeds_at(0)
    [1.0, 1.0, 1.0, 1.0]
    """
    text = str(name_or_path)
    path = pathlib.Path(text)
    held_out = None
    if not (path.suffix == ".toml" or path.exists()):
        path = BUILTIN_DIR / f"{text}.toml"
        base = text.removeprefix("bench/" + HELD_OUT_PREFIX)
        if not path.exists() and text.startswith("bench/") and base != text:
            path, held_out = BENCH_DIR / f"{base}.toml", text
        if not path.exists():
            raise ValueError(f"unknown scenario {text!r}: not a file and not a built-in "
                             f"({', '.join(builtin_names() + bench_names())})")
    if not path.is_file():
        raise ValueError(f"scenario file {str(path)!r} does not exist or is not a file")
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: malformed TOML: {err}") from None
    if held_out:
        table = _held_out(held_out, table)
    for key, value in (overrides or {}).items():
        *sections, last = str(key).split(".")
        tbl = table
        for part in sections:
            tbl = tbl.setdefault(part, {})
            if not isinstance(tbl, dict):
                raise ValueError(f"{path}: override {key!r}: {part} is not a table")
        tbl[last] = value
    return parse_scenario(table, source=path, traces_dir=traces_dir,
                          machine_usage=machine_usage)


def parse_scenario(table: dict, source="<dict>", traces_dir=None,
                   machine_usage=None) -> Scenario:
    """Build a `Scenario` from a parsed TOML table (see the module docstring for keys)."""
    return _Reader(source, traces_dir, machine_usage).scenario(table)


class _Reader:
    """Reads one TOML table; every error names ``where`` (the file) and the key."""

    def __init__(self, source, traces_dir, machine_usage=None):
        self.src = pathlib.Path(str(source))
        self.where = str(source)
        self.traces_dir = traces_dir
        self.machine_usage = machine_usage

    def fail(self, key, message):
        raise ValueError(f"{self.where}: {key}: {message}")

    def get(self, tbl, key, kind, default, prefix="", positive=True):
        full = prefix + key
        if key not in tbl:
            return default
        value = tbl[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            self.fail(full, f"expected {kind.__name__}, got {value!r}")
        if positive and kind in (int, float) and not value > 0:
            self.fail(full, f"must be > 0, got {value!r}")
        return value

    def section(self, tbl, key, prefix=""):
        value = tbl.get(key, {})
        if not isinstance(value, dict):
            self.fail(prefix + key, f"expected a table, got {value!r}")
        return value

    def array(self, tbl, key, full):
        value = tbl.get(key, [])
        if not isinstance(value, list):
            self.fail(full, f"expected an array of tables ([[{full}]])")
        return value

    def scenario(self, table: dict) -> Scenario:
        unknown = set(table) - _TOP_KEYS
        if unknown:
            self.fail(sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
        if "workers" not in table:
            self.fail("workers", "missing: how many workers")
        n = self.get(table, "workers", int, None)
        model, training = self.section(table, "model"), self.section(table, "training")
        hidden = model.get("hidden", list(_TRAINING.hidden))
        if not (isinstance(hidden, list) and all(isinstance(h, int) and h > 0 for h in hidden)):
            self.fail("model.hidden", f"expected a list of positive layer widths, got {hidden!r}")
        data = self.get(table, "data", str, "digits")
        if data not in _DATASETS:
            self.fail("data", f"unknown dataset {data!r} (built in: {', '.join(_DATASETS)})")
        named = self.get(table, "target", str, None)
        if named is not None and named not in _NAMED_TARGETS.get(data, ()):
            have = _NAMED_TARGETS.get(data)
            self.fail("target", f"workload {data!r} has no target {named!r} " + (
                f"(it has {', '.join(map(repr, have))})" if have else
                "(it names none: omit target, or set target_loss)"))
        us_per_sample = self.get(table, "us_per_sample", float, _TRAINING.us_per_sample)
        batch_size = self.get(training, "batch_size", int, _TRAINING.batch_size,
                              "training.")
        momentum = self.get(training, "momentum", float, _TRAINING.momentum, "training.",
                            positive=False)
        if not 0.0 <= momentum < 1.0:
            self.fail("training.momentum", f"must be in [0, 1), got {momentum}")
        target = self.get(table, "target_accuracy", float, _TRAINING.target_accuracy)
        if not target <= 1.0:
            self.fail("target_accuracy", f"must be in (0, 1], got {target}")
        slow = self.section(table, "slowdowns")
        inject = self.get(slow, "inject", str, "delay", "slowdowns.")
        factors = self.slowdowns(slow, n, batch_size * us_per_sample * 1e-6)
        events, relative = [], []
        for i, ev in enumerate(self.array(table, "events", "events")):
            placed = self.events(f"events[{i}]", ev, n)
            (relative if isinstance(placed[0], RelativeEvent) else events).extend(placed)
        events.sort(key=event_order)
        self.check_event_order(events)
        # At any reference the fractions keep their order: check them on their own now,
        # beside the fixed-second events once placed (`Scenario.resolve_events`).
        relative.sort(key=lambda e: event_order(e.at(1.0)))
        self.check_event_order([e.at(1.0) for e in relative])
        reference = self.get(table, "event_reference_s", float, None)
        if reference is not None and not relative:
            self.fail("event_reference_s", "no event is placed at a fraction (at_fraction): "
                                           "remove it, or place events with at_fraction")
        try:
            scenario = Scenario(
                name=self.get(table, "name", str, self.src.stem if self.src.suffix else "scenario"),
                num_workers=n, num_ps=self.get(table, "ps", int, 1), hidden=tuple(hidden),
                data=data, batch_size=batch_size,
                learning_rate=self.get(training, "learning_rate", float,
                                       _TRAINING.learning_rate, "training."),
                momentum=momentum, slowdowns=tuple(tuple(f) for f in factors),
                events=tuple(events), relative_events=tuple(relative),
                target_accuracy=target,
                target_loss=self.get(table, "target_loss", float, _TRAINING.target_loss), target=named,
                time_budget_s=self.get(table, "time_budget_s", float, TIME_BUDGET_S),
                max_pushes=self.get(table, "max_pushes", int, _TRAINING.max_pushes),
                us_per_sample=us_per_sample, inject=inject,
                description=self.get(table, "description", str, ""), source=self.where)
        except ValueError as err:  # the model checks how slowdowns are injected
            self.fail("slowdowns.inject", str(err))
        if reference is None:
            return scenario
        try:
            return scenario.resolve_events(reference)
        except ValueError as err:
            self.fail("events", f"at event_reference_s = {reference:g}: {err}")

    def slowdowns(self, slow, n, default_unit_s):
        """Each worker's list of `SpeedSchedule` factors."""
        factors = [[] for _ in range(n)]
        unknown = set(slow) - {"inject", "speeds", "schedule", "trace", "machine_usage"}
        if unknown:
            self.fail("slowdowns." + sorted(unknown)[0],
                      "unknown key (known: inject, speeds, schedule, trace, machine_usage)")
        if "speeds" in slow:
            speeds = slow["speeds"]
            if not isinstance(speeds, list) or len(speeds) != n:
                self.fail("slowdowns.speeds", f"expected a list of {n} speeds (one per worker), "
                                              f"got {speeds!r}")
            for w, s in enumerate(speeds):
                factors[w].append(self.schedule("slowdowns.speeds", [0.0], [s], None))
        for i, sch in enumerate(self.array(slow, "schedule", "slowdowns.schedule")):
            key = f"slowdowns.schedule[{i}]"
            workers = self.workers(key + ".workers", sch.get("workers"), n)
            times, speeds = sch.get("times_s"), sch.get("speeds")
            for w in workers:
                factors[w].append(self.schedule(key, times, speeds, sch.get("period_s")))
        if "trace" in slow:
            trace = self.section(slow, "trace", "slowdowns.")
            for w, sch in enumerate(self.trace(trace, n, default_unit_s)):
                factors[w].append(sch)
        if "machine_usage" in slow:
            usage = self.section(slow, "machine_usage", "slowdowns.")
            for w, sch in self.usage(usage, n):
                factors[w].append(sch)
        return factors

    def usage(self, usage, n):
        """``[(worker, SpeedSchedule)]`` from the Alibaba 2018 machine-usage trace."""
        key = "slowdowns.machine_usage"
        unknown = set(usage) - _USAGE_KEYS
        if unknown:
            self.fail(f"{key}.{sorted(unknown)[0]}",
                      f"unknown key (known: {', '.join(sorted(_USAGE_KEYS))})")
        machines = usage.get("machines")
        if not (isinstance(machines, list) and machines
                and all(isinstance(m, str) for m in machines)):
            self.fail(f"{key}.machines", "expected a non-empty list of machine ids such as "
                                         f"\"m_1934\", got {machines!r}")
        workers = usage.get("workers", list(range(len(machines))))
        workers = self.workers(f"{key}.workers", workers, n)
        if len(workers) != len(machines) or len(set(workers)) != len(workers):
            self.fail(f"{key}.workers", f"expected {len(machines)} distinct workers, one per "
                                        f"machine, got {workers!r}")
        if self.machine_usage is not None:
            where = usage_file(self.machine_usage)
        elif "dir" in usage:
            where = usage_file(self.src.parent / str(usage["dir"]))  # an absolute dir wins
        else:
            where = usage_file(None)
        grid = self.get(usage, "grid_s", float, 300.0, f"{key}.")
        unit = self.get(usage, "time_unit_s", float, 1.0, f"{key}.")
        start = self.get(usage, "start_s", float, 0.0, f"{key}.", positive=False)
        if start < 0:
            self.fail(f"{key}.start_s", f"must be >= 0, got {start}")
        try:
            names, speeds = machine_speeds(where, grid)
        except FileNotFoundError as err:
            self.fail(f"{key}.dir", str(err))
        except ValueError as err:
            self.fail(f"{key}.dir", f"{where}: {err}")
        missing = [m for m in machines if m not in names]
        if missing:
            self.fail(f"{key}.machines", f"{where} has no machine {missing[0]!r} covering the "
                                         f"trace (have {', '.join(names)})")
        try:
            schedules = usage_schedules(names, speeds, machines, grid, unit, start)
        except ValueError as err:
            self.fail(f"{key}.start_s", str(err))
        return list(zip(workers, schedules))

    def schedule(self, key, times, speeds, period):
        if not isinstance(times, list) or not isinstance(speeds, list):
            self.fail(key, f"needs lists times_s and speeds, got {times!r} and {speeds!r}")
        try:
            return SpeedSchedule(tuple(times), tuple(speeds), period)
        except (TypeError, ValueError) as err:
            self.fail(key, str(err))

    def workers(self, key, workers, n):
        if not (isinstance(workers, list) and workers
                and all(isinstance(w, int) and not isinstance(w, bool) for w in workers)):
            self.fail(key, f"expected a non-empty list of worker indices, got {workers!r}")
        for w in workers:
            if not 0 <= w < n:
                self.fail(key, f"worker {w} out of range 0..{n - 1}")
        return workers

    def trace(self, trace, n, default_unit_s):
        """One looping `SpeedSchedule` per worker from a directory of trace CSVs."""
        key = "slowdowns.trace"
        unknown = set(trace) - _TRACE_KEYS
        if unknown:
            self.fail(f"{key}.{sorted(unknown)[0]}",
                      f"unknown key (known: {', '.join(sorted(_TRACE_KEYS))})")
        if self.traces_dir is not None:
            directory = pathlib.Path(self.traces_dir)
        elif "dir" in trace:
            directory = self.src.parent / str(trace["dir"])  # an absolute dir wins
        else:
            directory = DEFAULT_TRACE_DIR
        if not directory.is_dir():
            self.fail(f"{key}.dir", f"trace directory {str(directory)!r} does not exist")
        try:
            series = load_trace_series(directory)
        except ValueError as err:
            self.fail(f"{key}.dir", str(err))
        jobs = sorted({name.split("/")[0] for name, _, _ in series})
        job = trace.get("job")
        if job is not None:
            # "job_2" matches job_2_norm.csv and the vendored job_2_norm_sample.csv alike.
            match = [j for j in jobs if j == job or j.startswith(f"{job}_")]
            if not match:
                self.fail(f"{key}.job", f"no trace file {job!r} in {directory} "
                                        f"(have {', '.join(jobs)})")
            job = match[0]
        else:
            job = jobs[0]
        by_worker = {name.split("/w", 1)[1]: (t, s) for name, t, s in series
                     if name.split("/")[0] == job}
        wanted = trace.get("workers")
        if wanted is None:
            wanted = list(by_worker)[:n]
            if len(wanted) < n:
                self.fail(f"{key}.workers", f"{job} has {len(by_worker)} workers, the scenario "
                                            f"{n}; list which trace worker each worker follows")
        if not isinstance(wanted, list) or len(wanted) != n:
            self.fail(f"{key}.workers", f"expected a list of {n} trace workers, got {wanted!r}")
        missing = [w for w in wanted if str(w) not in by_worker]
        if missing:
            self.fail(f"{key}.workers", f"{job} has no worker {missing[0]!r} "
                                        f"(have {', '.join(by_worker)})")
        unit = trace.get("time_unit_s", default_unit_s)
        if isinstance(unit, bool) or not isinstance(unit, (int, float)) or not unit > 0:
            self.fail(f"{key}.time_unit_s", f"must be a number > 0, got {unit!r}")
        return trace_schedules([by_worker[str(w)] for w in wanted], unit)

    def events(self, key, ev, n):
        """The events of one ``[[events]]`` table: `Event`s at seconds, or
        `RelativeEvent`s at fractions (``at_fraction``, ``duration_fraction``,
        ``restart_at_fraction``), never a mix."""
        if not isinstance(ev, dict):
            self.fail(key, f"expected a table, got {ev!r}")
        action = ev.get("action")
        if action not in ("pause", "kill"):
            self.fail(key + ".action", f"expected 'pause' or 'kill', got {action!r}")
        seconds = {"at_s", "duration_s", "restart_at_s"} & set(ev)
        fractions = {"at_fraction", "duration_fraction", "restart_at_fraction"} & set(ev)
        if seconds and fractions:
            self.fail(key, f"mixes seconds ({', '.join(sorted(seconds))}) and fractions "
                           f"({', '.join(sorted(fractions))}); give at_s with duration_s / "
                           "restart_at_s, or at_fraction with duration_fraction / "
                           "restart_at_fraction")
        if "worker" not in ev or not ({"at_s", "at_fraction"} & set(ev)):
            self.fail(key, "needs worker and at_s (seconds) or at_fraction (of the "
                           "reference run)")
        worker = self.workers(key + ".worker", [ev["worker"]], n)[0]
        if fractions:
            return self.relative_events(key, ev, worker, action)
        at = self.get(ev, "at_s", float, None, key + ".", positive=False)
        if at < 0:
            self.fail(key + ".at_s", f"must be >= 0, got {at}")
        out = [Event(at, worker, action)]
        if action == "pause":
            if "duration_s" not in ev:
                self.fail(key + ".duration_s", "missing: how long the worker stays frozen")
            out.append(Event(at + self.get(ev, "duration_s", float, None, key + "."), worker,
                             "resume"))
        elif "restart_at_s" in ev:
            restart = self.get(ev, "restart_at_s", float, None, key + ".")
            if not restart > at:
                self.fail(key + ".restart_at_s", f"must be after at_s ({at}), got {restart}")
            out.append(Event(restart, worker, "restart"))
        return out

    def relative_events(self, key, ev, worker, action):
        """`RelativeEvent`s of one table with ``at_fraction`` (see `events`)."""
        at = self.get(ev, "at_fraction", float, None, key + ".", positive=False)
        if not 0 <= at < math.inf:
            self.fail(key + ".at_fraction", f"must be a finite fraction >= 0, got {at}")
        out = [RelativeEvent(at, worker, action)]
        if action == "pause":
            if "duration_fraction" not in ev:
                self.fail(key + ".duration_fraction",
                          "missing: how long the worker stays frozen, as a fraction of the "
                          "reference run")
            out.append(RelativeEvent(
                at + self.get(ev, "duration_fraction", float, None, key + "."), worker,
                "resume"))
        elif "restart_at_fraction" in ev:
            restart = self.get(ev, "restart_at_fraction", float, None, key + ".")
            if not at < restart < math.inf:
                self.fail(key + ".restart_at_fraction",
                          f"must be after at_fraction ({at}), got {restart}")
            out.append(RelativeEvent(restart, worker, "restart"))
        return out

    def check_event_order(self, events):
        """Pauses and kills of one worker must not overlap (resume what is paused, etc.)."""
        try:
            check_event_order(events)
        except ValueError as err:
            self.fail("events", str(err))
