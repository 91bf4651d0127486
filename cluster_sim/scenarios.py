"""Scenarios: who trains what, and how each worker is slowed, paused or killed over time.

A scenario is a TOML file (built-ins in ``cluster_sim/scenarios/``: ``homogeneous``,
``static``, ``trace``, ``colocated``, ``pause``, ``churn``) loaded into a `Scenario`. The
same object drives the real harness (in-graph delays, SIGSTOP/SIGCONT, kill/restart) and
the discrete-event simulator, so both see the same slowdowns.

Slowdowns are injected in the training step as a delay per sample (``inject = "delay"``)
or from outside as a SIGSTOP/SIGCONT duty cycle of the worker process that the framework
cannot see (``inject = "sigstop"``, `cluster_sim.duty_cycle`). They are per-worker
piecewise-constant speed functions (1.0 = the reference machine,
``us_per_sample`` microseconds per sample): ``scenario.speed(worker, t_s)``. A worker's
speed is the product of its factors: a static speed, a trace series, and any number of
(optionally periodic) schedules. Pauses and kills are `Event` objects at given times; a
frozen worker has speed 0 in `Scenario.effective_speed`, which is what hardware efficiency
is measured against.

TOML keys (all optional except ``workers``)::

    name = "static"          # default: the file's stem
    description = "..."
    workers = 4
    ps = 1
    data = "digits"
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
    [[events]]
    action = "pause"                   # or "kill" (with restart_at_s to restart)
    worker = 3
    at_s = 20
    duration_s = 20

Example:

>>> s = load_scenario("static")
>>> s.num_workers, s.speeds_at(0.0)
(4, [1.0, 1.0, 0.5, 0.25])
>>> c = load_scenario("churn")
>>> [(e.at_s, e.worker, e.action) for e in c.events]
[(20.0, 3, 'kill'), (45.0, 3, 'restart')]
>>> c.effective_speed(3, 30.0), c.effective_speed(3, 50.0)
(0.0, 0.25)
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import pathlib
import tomllib

import numpy as np

__all__ = ["SpeedSchedule", "Event", "Scenario", "load_scenario", "builtin_names",
           "parse_scenario", "BUILTIN_DIR", "DEFAULT_TRACE_DIR"]

BUILTIN_DIR = pathlib.Path(__file__).parent / "scenarios"
# A 60-point slice of a real Alibaba PAI trace (CC BY 4.0, see predictor/data/README.md),
# so the trace scenario works from a fresh clone without ../shared.
DEFAULT_TRACE_DIR = pathlib.Path(__file__).parent.parent / "predictor" / "data"
EVENT_ACTIONS = ("pause", "resume", "kill", "restart")
INJECT_MODES = ("delay", "sigstop")


@dataclasses.dataclass(frozen=True)
class SpeedSchedule:
    """A piecewise-constant speed factor: ``speeds[i]`` from ``times_s[i]`` on.

    ``times_s[0]`` must be 0 and times strictly increasing. With ``period_s`` the pattern
    repeats every ``period_s`` seconds (``period_s`` > last time); without, the last piece
    holds forever.

    >>> s = SpeedSchedule((0.0, 10.0), (1.0, 0.5), period_s=20.0)
    >>> s.speed(5), s.speed(15), s.speed(25), s.mean(0, 20)
    (1.0, 0.5, 1.0, 0.75)
    """

    times_s: tuple
    speeds: tuple
    period_s: float | None = None

    def __post_init__(self):
        times, speeds = tuple(map(float, self.times_s)), tuple(map(float, self.speeds))
        object.__setattr__(self, "times_s", times)
        object.__setattr__(self, "speeds", speeds)
        if not times or len(times) != len(speeds):
            raise ValueError(f"a schedule needs as many times as speeds (>= 1), got "
                             f"{len(times)} times and {len(speeds)} speeds")
        if times[0] != 0.0 or any(b <= a for a, b in zip(times, times[1:])):
            raise ValueError("schedule times must start at 0 and increase, got "
                             f"{_short(times)}")
        bad = [s for s in speeds if not (s > 0 and math.isfinite(s))]
        if bad:
            raise ValueError(f"speeds must be finite and > 0 (1.0 = full speed), got {bad[0]!r}"
                             " (a stopped worker is a pause or kill event, not speed 0)")
        if self.period_s is not None:
            period = float(self.period_s)
            object.__setattr__(self, "period_s", period)
            if not (period > times[-1] and math.isfinite(period)):
                raise ValueError(f"period_s ({period}) must be finite and greater than the "
                                 f"last schedule time ({times[-1]})")

    def speed(self, t_s: float) -> float:
        """The factor at time ``t_s`` (seconds since the run started; < 0 counts as 0)."""
        t = max(0.0, float(t_s))
        if self.period_s is not None:
            t %= self.period_s
        return self.speeds[bisect.bisect_right(self.times_s, t) - 1]

    def breakpoints(self, t0: float, t1: float) -> list[float]:
        """Times in the open interval (t0, t1) where the factor may change."""
        if self.period_s is None:
            return [t for t in self.times_s if t0 < t < t1]
        out = []
        cycle = math.floor(max(t0, 0.0) / self.period_s)
        while cycle * self.period_s < t1:
            out += [cycle * self.period_s + t for t in self.times_s
                    if t0 < cycle * self.period_s + t < t1]
            cycle += 1
        return out

    def mean(self, t0: float, t1: float) -> float:
        """Time-average of the factor over [t0, t1] (exact; the value at t0 if t1 <= t0)."""
        return _piecewise_mean(self.speed, self.breakpoints(t0, t1), t0, t1)


def _short(values, most=6) -> str:
    """A list for an error message, cut so a 2000-point trace does not flood the terminal."""
    shown = ", ".join(f"{v:g}" for v in values[:most])
    return f"[{shown}{', ...' if len(values) > most else ''}]"


def _piecewise_mean(value, cuts, t0, t1) -> float:
    """Exact mean of a function constant between sorted ``cuts`` over [t0, t1]."""
    if t1 <= t0:
        return float(value(t0))
    edges = [t0] + sorted(set(cuts)) + [t1]
    # Evaluate each piece at its midpoint: ends are where the value switches.
    total = sum((b - a) * value((a + b) / 2) for a, b in zip(edges, edges[1:]) if b > a)
    return float(total / (t1 - t0))


@dataclasses.dataclass(frozen=True)
class Event:
    """Something the harness does to a worker at ``at_s`` seconds into a run.

    ``pause`` freezes the worker process (SIGSTOP) until ``resume`` (SIGCONT); ``kill``
    ends it until ``restart``. `Scenario.events` are in time order.
    """

    at_s: float
    worker: int
    action: str


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Everything a policy comparison shares: cluster, workload, slowdowns, stopping rule.

    ``slowdowns[i]`` is worker i's tuple of `SpeedSchedule` factors (their product is its
    speed); ``events`` are sorted by time.
    """

    name: str
    num_workers: int = 4
    num_ps: int = 1
    hidden: tuple = (64, 64)
    data: str = "digits"
    batch_size: int = 32
    learning_rate: float = 0.05
    momentum: float = 0.9
    slowdowns: tuple = ()
    events: tuple = ()
    target_accuracy: float = 0.93
    time_budget_s: float = 120.0
    max_pushes: int = 1200
    us_per_sample: float = 300.0
    inject: str = "delay"
    description: str = ""
    source: str = ""

    def __post_init__(self):
        if self.slowdowns and len(self.slowdowns) != self.num_workers:
            raise ValueError(f"{len(self.slowdowns)} slowdown lists for {self.num_workers} "
                             "workers; give one (possibly empty) tuple per worker")
        if self.inject not in INJECT_MODES:
            raise ValueError(f"slowdowns.inject must be one of {INJECT_MODES}, got "
                             f"{self.inject!r}")
        if self.inject == "sigstop" and self.events:
            raise ValueError(f"scenario {self.name!r}: the sigstop duty cycle cannot be "
                             "combined with pause or kill events (both stop and continue "
                             "the worker process); use inject = \"delay\" with events")

    def speed(self, worker: int, t_s: float) -> float:
        """Relative speed of ``worker`` at ``t_s`` seconds (slowdowns only; see
        `effective_speed` for pauses and kills)."""
        return float(np.prod([f.speed(t_s) for f in self._factors(worker)]))

    def speeds_at(self, t_s: float) -> list[float]:
        """Every worker's `speed` at ``t_s``: what the in-graph delay should use now."""
        return [self.speed(w, t_s) for w in range(self.num_workers)]

    def frozen(self, worker: int, t_s: float) -> bool:
        """True while ``worker`` is paused or killed (an event at exactly t_s applies)."""
        state = False
        for e in self.events:
            if e.at_s > t_s:
                break
            if e.worker == worker:
                state = e.action in ("pause", "kill")
        return state

    def effective_speed(self, worker: int, t_s: float) -> float:
        """`speed`, or 0.0 while the worker is paused or killed."""
        return 0.0 if self.frozen(worker, t_s) else self.speed(worker, t_s)

    def change_times(self, t0: float, t1: float) -> list[float]:
        """Sorted times in (t0, t1) at which any worker's speed or state may change: the
        harness updates delays there, and the simulator schedules wake-ups."""
        cuts = {c for w in range(self.num_workers) for f in self._factors(w)
                for c in f.breakpoints(t0, t1)}
        cuts |= {e.at_s for e in self.events if t0 < e.at_s < t1}
        return sorted(cuts)

    def events_between(self, t0: float, t1: float) -> list[Event]:
        """Events with ``t0 < at_s <= t1``, in order: poll this from the harness loop."""
        return [e for e in self.events if t0 < e.at_s <= t1]

    def mean_speed(self, worker: int, t0: float, t1: float) -> float:
        """Exact time-average of `effective_speed` over [t0, t1]."""
        cuts = [c for f in self._factors(worker) for c in f.breakpoints(t0, t1)]
        cuts += [e.at_s for e in self.events if e.worker == worker and t0 < e.at_s < t1]
        return _piecewise_mean(lambda t: self.effective_speed(worker, t), cuts, t0, t1)

    def standalone_samples_per_s(self, t0: float, t1: float,
                                 base_samples_per_s: float | None = None) -> float:
        """Sum over workers of what each would process alone over [t0, t1] under the same
        slowdowns: the denominator of hardware efficiency.

        ``base_samples_per_s`` is one worker's measured rate at speed 1.0; by default the
        injected rate ``1e6 / us_per_sample`` (an upper bound that ignores compute time).
        """
        base = base_samples_per_s if base_samples_per_s is not None else 1e6 / self.us_per_sample
        return base * sum(self.mean_speed(w, t0, t1) for w in range(self.num_workers))

    def to_run_config(self, **overrides):
        """A `cluster_sim.harness.RunConfig` for this scenario (speeds at t = 0; fields
        the RunConfig does not have are left out, ``overrides`` win)."""
        from cluster_sim.harness import RunConfig
        values = dict(speeds=tuple(self.speeds_at(0.0)), us_per_sample=self.us_per_sample,
                      batch_size=self.batch_size, learning_rate=self.learning_rate,
                      momentum=self.momentum, hidden=tuple(self.hidden),
                      max_pushes=self.max_pushes, target_accuracy=self.target_accuracy,
                      time_budget_s=self.time_budget_s)
        values.update(overrides)
        known = {f.name for f in dataclasses.fields(RunConfig)}
        return RunConfig(**{k: v for k, v in values.items() if k in known})

    def summary(self) -> str:
        """One line for logs and report headers."""
        speeds = ", ".join(f"{s:.2f}" for s in self.speeds_at(0.0))
        events = "; ".join(f"w{e.worker} {e.action} at {e.at_s:g}s" for e in self.events)
        return (f"{self.name}: {self.num_workers} workers, {self.num_ps} PS, speeds at t=0 "
                f"[{speeds}]" + (f", {events}" if events else "")
                + (", black-box SIGSTOP duty cycle" if self.inject == "sigstop" else ""))

    def _factors(self, worker: int):
        if not 0 <= worker < self.num_workers:
            raise ValueError(f"worker {worker} out of range for {self.num_workers} workers")
        return self.slowdowns[worker] if self.slowdowns else ()


def builtin_names() -> list[str]:
    """Names of the scenarios shipped in ``cluster_sim/scenarios/*.toml``."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def load_scenario(name_or_path, traces_dir=None) -> Scenario:
    """A built-in scenario by name, or a TOML file by path.

    ``traces_dir`` replaces the trace directory of a scenario with a ``[slowdowns.trace]``
    section (e.g. ``../shared/traces/alibaba_pai``); other scenarios ignore it, so one
    command line serves all. Raises ``ValueError`` naming the file and key on any problem.

    >>> load_scenario("homogeneous").speeds_at(0)
    [1.0, 1.0, 1.0, 1.0]
    """
    text = str(name_or_path)
    path = pathlib.Path(text)
    if not (path.suffix == ".toml" or path.exists()):
        path = BUILTIN_DIR / f"{text}.toml"
        if not path.exists():
            raise ValueError(f"unknown scenario {text!r}: not a file and not a built-in "
                             f"({', '.join(builtin_names())})")
    if not path.is_file():
        raise ValueError(f"scenario file {str(path)!r} does not exist or is not a file")
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: malformed TOML: {err}") from None
    return parse_scenario(table, source=path, traces_dir=traces_dir)


_TOP_KEYS = {"name", "description", "workers", "ps", "data", "target_accuracy",
             "time_budget_s", "max_pushes", "us_per_sample", "model", "training",
             "slowdowns", "events"}
_DATASETS = ("digits",)


def parse_scenario(table: dict, source="<dict>", traces_dir=None) -> Scenario:
    """Build a `Scenario` from a parsed TOML table (see the module docstring for keys)."""
    src = pathlib.Path(str(source))
    where = str(source)

    def fail(key, message):
        raise ValueError(f"{where}: {key}: {message}")

    def get(tbl, key, kind, default, prefix="", positive=True):
        full = prefix + key
        if key not in tbl:
            return default
        value = tbl[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            fail(full, f"expected {kind.__name__}, got {value!r}")
        if positive and kind in (int, float) and not value > 0:
            fail(full, f"must be > 0, got {value!r}")
        return value

    def section(tbl, key, prefix=""):
        value = tbl.get(key, {})
        if not isinstance(value, dict):
            fail(prefix + key, f"expected a table, got {value!r}")
        return value

    unknown = set(table) - _TOP_KEYS
    if unknown:
        fail(sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    if "workers" not in table:
        fail("workers", "missing: how many workers")
    n = get(table, "workers", int, None)
    model, training = section(table, "model"), section(table, "training")
    slow = section(table, "slowdowns")
    hidden = model.get("hidden", [64, 64])
    if not (isinstance(hidden, list) and all(isinstance(h, int) and h > 0 for h in hidden)):
        fail("model.hidden", f"expected a list of positive layer widths, got {hidden!r}")
    data = get(table, "data", str, "digits")
    if data not in _DATASETS:
        fail("data", f"unknown dataset {data!r} (built in: {', '.join(_DATASETS)})")
    us_per_sample = get(table, "us_per_sample", float, 300.0)
    batch_size = get(training, "batch_size", int, 32, "training.")
    momentum = get(training, "momentum", float, 0.9, "training.", positive=False)
    if not 0.0 <= momentum < 1.0:
        fail("training.momentum", f"must be in [0, 1), got {momentum}")
    target = get(table, "target_accuracy", float, 0.93)
    if not target <= 1.0:
        fail("target_accuracy", f"must be in (0, 1], got {target}")

    factors = [[] for _ in range(n)]
    unknown = set(slow) - {"inject", "speeds", "schedule", "trace"}
    if unknown:
        fail("slowdowns." + sorted(unknown)[0],
             "unknown key (known: inject, speeds, schedule, trace)")
    inject = get(slow, "inject", str, "delay", "slowdowns.")
    if inject not in INJECT_MODES:
        fail("slowdowns.inject", f"expected one of {', '.join(INJECT_MODES)}, got {inject!r}")
    if "speeds" in slow:
        speeds = slow["speeds"]
        if not isinstance(speeds, list) or len(speeds) != n:
            fail("slowdowns.speeds", f"expected a list of {n} speeds (one per worker), "
                                     f"got {speeds!r}")
        for w, s in enumerate(speeds):
            factors[w].append(_schedule(fail, "slowdowns.speeds", [0.0], [s], None))
    schedules = slow.get("schedule", [])
    if not isinstance(schedules, list):
        fail("slowdowns.schedule", "expected an array of tables ([[slowdowns.schedule]])")
    for i, sch in enumerate(schedules):
        key = f"slowdowns.schedule[{i}]"
        workers = _workers(fail, key + ".workers", sch.get("workers"), n)
        times, speeds = sch.get("times_s"), sch.get("speeds")
        for w in workers:
            factors[w].append(_schedule(fail, key, times, speeds, sch.get("period_s")))
    if "trace" in slow:
        trace = section(slow, "trace", "slowdowns.")
        for w, sch in enumerate(_trace_schedules(fail, trace, n, src.parent, traces_dir,
                                                 batch_size * us_per_sample * 1e-6)):
            factors[w].append(sch)

    events = []
    raw_events = table.get("events", [])
    if not isinstance(raw_events, list):
        fail("events", "expected an array of tables ([[events]])")
    for i, ev in enumerate(raw_events):
        events += _events(fail, f"events[{i}]", ev, n, get)
    events.sort(key=_event_order)
    _check_event_order(fail, events)
    if inject == "sigstop" and events:
        fail("slowdowns.inject", "the sigstop duty cycle cannot be combined with [[events]] "
                                 "(both stop and continue the worker process)")

    return Scenario(
        name=get(table, "name", str, src.stem if src.suffix else "scenario"),
        num_workers=n, num_ps=get(table, "ps", int, 1), hidden=tuple(hidden), data=data,
        batch_size=batch_size,
        learning_rate=get(training, "learning_rate", float, 0.05, "training."),
        momentum=momentum, slowdowns=tuple(tuple(f) for f in factors),
        events=tuple(events), target_accuracy=target,
        time_budget_s=get(table, "time_budget_s", float, 120.0),
        max_pushes=get(table, "max_pushes", int, 1200), us_per_sample=us_per_sample,
        inject=inject, description=get(table, "description", str, ""), source=where)


def _schedule(fail, key, times, speeds, period):
    if not isinstance(times, list) or not isinstance(speeds, list):
        fail(key, f"needs lists times_s and speeds, got {times!r} and {speeds!r}")
    try:
        return SpeedSchedule(tuple(times), tuple(speeds), period)
    except (TypeError, ValueError) as err:
        fail(key, str(err))


def _workers(fail, key, workers, n):
    if not (isinstance(workers, list) and workers
            and all(isinstance(w, int) and not isinstance(w, bool) for w in workers)):
        fail(key, f"expected a non-empty list of worker indices, got {workers!r}")
    for w in workers:
        if not 0 <= w < n:
            fail(key, f"worker {w} out of range 0..{n - 1}")
    return workers


def _trace_schedules(fail, trace, n, base_dir, traces_dir, default_unit_s):
    """One looping `SpeedSchedule` per worker from a directory of trace CSVs."""
    key = "slowdowns.trace"
    unknown = set(trace) - {"dir", "job", "workers", "time_unit_s"}
    if unknown:
        fail(f"{key}.{sorted(unknown)[0]}", "unknown key (known: dir, job, workers, time_unit_s)")
    if traces_dir is not None:
        directory = pathlib.Path(traces_dir)
    elif "dir" in trace:
        directory = base_dir / str(trace["dir"])  # an absolute dir wins over base_dir
    else:
        directory = DEFAULT_TRACE_DIR
    if not directory.is_dir():
        fail(f"{key}.dir", f"trace directory {str(directory)!r} does not exist")
    # Reuse the simulator's reader so both harnesses read traces identically.
    from cluster_sim.sim_workers import load_trace_series
    try:
        series = load_trace_series(directory)
    except ValueError as err:
        fail(f"{key}.dir", str(err))
    jobs = sorted({name.split("/")[0] for name, _, _ in series})
    job = trace.get("job")
    if job is not None:
        # "job_2" matches job_2_norm.csv and the vendored job_2_norm_sample.csv alike.
        match = [j for j in jobs if j == job or j.startswith(f"{job}_")]
        if not match:
            fail(f"{key}.job", f"no trace file {job!r} in {directory} (have {', '.join(jobs)})")
        job = match[0]
    else:
        job = jobs[0]
    by_worker = {name.split("/w", 1)[1]: (t, s) for name, t, s in series
                 if name.split("/")[0] == job}
    wanted = trace.get("workers")
    if wanted is None:
        wanted = list(by_worker)[:n]
        if len(wanted) < n:
            fail(f"{key}.workers", f"{job} has {len(by_worker)} workers, the scenario {n}; "
                                   "list which trace worker each worker follows")
    if not isinstance(wanted, list) or len(wanted) != n:
        fail(f"{key}.workers", f"expected a list of {n} trace workers, got {wanted!r}")
    missing = [w for w in wanted if str(w) not in by_worker]
    if missing:
        fail(f"{key}.workers", f"{job} has no worker {missing[0]!r} "
                               f"(have {', '.join(by_worker)})")
    unit = trace.get("time_unit_s", default_unit_s)
    if isinstance(unit, bool) or not isinstance(unit, (int, float)) or not unit > 0:
        fail(f"{key}.time_unit_s", f"must be a number > 0, got {unit!r}")
    chosen = [by_worker[str(w)] for w in wanted]
    # speed is proportional to 1 / batch_time; the fastest worker's median becomes 1.0 so
    # the trace only ever slows the reference machine down.
    top = max(float(np.median(s)) for _, s in chosen)
    out = []
    for times, speeds in chosen:
        # Real traces repeat a time now and then (job_2 worker 0): keep its last value.
        last = len(times) - 1 - np.unique(times[::-1], return_index=True)[1]
        times, speeds = times[last], speeds[last]
        start = times - times[0]
        step = (start[-1] / (len(start) - 1)) if len(start) > 1 else 1.0
        # Loop the series; its last point holds for one mean sampling interval.
        out.append(SpeedSchedule(tuple(start * unit), tuple(speeds / top),
                                 period_s=(start[-1] + step) * unit))
    return out


def _events(fail, key, ev, n, get):
    if not isinstance(ev, dict):
        fail(key, f"expected a table, got {ev!r}")
    action = ev.get("action")
    if action not in ("pause", "kill"):
        fail(key + ".action", f"expected 'pause' or 'kill', got {action!r}")
    if "worker" not in ev or "at_s" not in ev:
        fail(key, "needs worker and at_s")
    worker = _workers(fail, key + ".worker", [ev["worker"]], n)[0]
    at = get(ev, "at_s", float, None, key + ".", positive=False)
    if at < 0:
        fail(key + ".at_s", f"must be >= 0, got {at}")
    out = [Event(at, worker, action)]
    if action == "pause":
        if "duration_s" not in ev:
            fail(key + ".duration_s", "missing: how long the worker stays frozen")
        out.append(Event(at + get(ev, "duration_s", float, None, key + "."), worker, "resume"))
    elif "restart_at_s" in ev:
        restart = get(ev, "restart_at_s", float, None, key + ".")
        if not restart > at:
            fail(key + ".restart_at_s", f"must be after at_s ({at}), got {restart}")
        out.append(Event(restart, worker, "restart"))
    return out


def _event_order(e: Event):
    # At equal times a resume or restart comes first, so a worker may be paused again
    # the moment it resumes.
    return (e.at_s, e.action not in ("resume", "restart"), e.worker)


def _check_event_order(fail, events):
    """Pauses and kills of one worker must not overlap (resume what is paused, etc.)."""
    state = {}
    for e in events:
        before = state.get(e.worker, "running")
        expected = {"pause": "running", "kill": "running", "resume": "pause",
                    "restart": "kill"}[e.action]
        if before != expected:
            fail("events", f"worker {e.worker}: {e.action} at {e.at_s:g} s while it is "
                           f"{'in a ' + before if before != 'running' else 'running'}; "
                           "pauses and kills of a worker must not overlap")
        state[e.worker] = "running" if e.action in ("resume", "restart") else e.action
