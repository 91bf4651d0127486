"""The scenario data model: per-worker speeds over time, events, and the workload.

A `Scenario` is what a policy comparison shares: the cluster, the workload, the slowdowns
and the stopping rule. The same object drives the real harness (in-graph delays,
SIGSTOP/SIGCONT, kill/restart) and the discrete-event simulator, so both see the same
slowdowns. Scenarios are read from TOML by `cluster_sim.scenarios.reader`.

Slowdowns are injected in the training step as a delay per sample (``inject = "delay"``)
or from outside as a SIGSTOP/SIGCONT duty cycle of the worker process that the framework
cannot see (``inject = "sigstop"``, `cluster_sim.harness.signals.DutyCycler`). They are
per-worker piecewise-constant speed functions (1.0 = the reference machine,
``us_per_sample`` microseconds per sample): ``scenario.speed(worker, t_s)``. A worker's
speed is the product of its factors: a static speed, a trace series, and any number of
(optionally periodic) schedules. Pauses and kills are `Event` objects at given times; a
frozen worker has speed 0 in `Scenario.effective_speed`.

Example:

>>> fast, slow = SpeedSchedule((0.0,), (1.0,)), SpeedSchedule((0.0, 10.0), (1.0, 0.5))
>>> s = Scenario("two", num_workers=2, slowdowns=((fast,), (fast, slow)),
...              events=(Event(20.0, 1, "kill"),))
>>> s.speeds_at(15.0), s.effective_speed(1, 25.0)
([1.0, 0.5], 0.0)
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math

import numpy as np

from cluster_sim.scenarios.training import TIME_BUDGET_S, TrainingConfig

__all__ = ["SpeedSchedule", "Event", "RelativeEvent", "Scenario", "INJECT_MODES",
           "UnresolvedEvents"]

INJECT_MODES = ("delay", "sigstop")
#: the training defaults a scenario file may leave out (the harness's and the simulator's).
_TRAINING = TrainingConfig()


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
class RelativeEvent:
    """An `Event` placed at ``at_fraction`` of a reference duration instead of at fixed
    seconds (`Scenario.resolve_events` turns it into seconds): a run whose length
    depends on the cluster (64 workers finish in a fraction of 8 workers' time) still
    sees all of it. The reference is the run the scenario's own file names; for the
    benchmark's, tuned BSP's time to the target on the same cluster without the events
    (`docs/simulator.md`, "Events as fractions of a run").

    >>> RelativeEvent(0.1, 1, "pause").at(250.0)
    Event(at_s=25.0, worker=1, action='pause')
    """

    at_fraction: float
    worker: int
    action: str

    def at(self, reference_s: float) -> Event:
        return Event(self.at_fraction * reference_s, self.worker, self.action)


def event_order(e):
    """Sort key of events: by time; at equal times a resume or restart comes first, so
    a worker may be paused again the moment it resumes."""
    return (e.at_s, e.action not in ("resume", "restart"), e.worker)


def check_event_order(events) -> None:
    """Raise ValueError when pauses and kills of one worker overlap in ``events``
    (sorted by `event_order`): resume only what is paused, restart only what is killed."""
    state = {}
    for e in events:
        before = state.get(e.worker, "running")
        expected = {"pause": "running", "kill": "running", "resume": "pause",
                    "restart": "kill"}[e.action]
        if before != expected:
            raise ValueError(f"worker {e.worker}: {e.action} at {e.at_s:g} s while it is "
                             f"{'in a ' + before if before != 'running' else 'running'}; "
                             "pauses and kills of a worker must not overlap")
        state[e.worker] = "running" if e.action in ("resume", "restart") else e.action


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Everything a policy comparison shares: cluster, workload, slowdowns, stopping rule.

    ``slowdowns[i]`` is worker i's tuple of `SpeedSchedule` factors (their product is its
    speed); ``events`` are sorted by time. ``relative_events`` (`RelativeEvent`) are
    events still to place at fractions of a reference duration: a scenario holding any
    is not played (`check_resolved`) until `resolve_events` has turned them into
    ``events``. ``target_loss`` (validation loss), when set,
    is the target instead of the workload's own (`cluster_sim.harness.config.targets`);
    ``target`` names one of the workload's own (``"early"``, ``"late"``: ``ctr`` has
    both), None its default. ``num_ps`` is the real cluster's PS tasks: a workload with
    embedding tables (``ctr``) has them sharded over all of them.
    """

    name: str
    num_workers: int = 4
    num_ps: int = 1
    hidden: tuple = _TRAINING.hidden
    data: str = "digits"
    batch_size: int = _TRAINING.batch_size
    learning_rate: float = _TRAINING.learning_rate
    momentum: float = _TRAINING.momentum
    slowdowns: tuple = ()
    events: tuple = ()
    relative_events: tuple = ()
    target_accuracy: float = _TRAINING.target_accuracy
    target_loss: float | None = _TRAINING.target_loss
    target: str | None = None
    time_budget_s: float = TIME_BUDGET_S
    max_pushes: int = _TRAINING.max_pushes
    us_per_sample: float = _TRAINING.us_per_sample
    inject: str = "delay"
    description: str = ""
    source: str = ""

    def __post_init__(self):
        if self.slowdowns and len(self.slowdowns) != self.num_workers:
            raise ValueError(f"{len(self.slowdowns)} slowdown lists for {self.num_workers} "
                             "workers; give one (possibly empty) tuple per worker")
        if self.inject not in INJECT_MODES:
            raise ValueError(f"expected one of {', '.join(INJECT_MODES)}, got {self.inject!r}")
        if self.inject == "sigstop" and (self.events or self.relative_events):
            raise ValueError("the sigstop duty cycle cannot be combined with pause or kill "
                             f"events (scenario {self.name!r}; both stop and continue the "
                             "worker process); use inject = \"delay\" with events")

    def resolve_events(self, reference_s: float) -> "Scenario":
        """This scenario with its `RelativeEvent`s placed at their fractions of
        ``reference_s`` seconds, among its fixed-second events (itself if it has none).

        >>> s = Scenario("p", 2, relative_events=(RelativeEvent(0.1, 1, "pause"),
        ...                                       RelativeEvent(0.3, 1, "resume")))
        >>> [(e.at_s, e.action) for e in s.resolve_events(200.0).events]
        [(20.0, 'pause'), (60.0, 'resume')]
        >>> s.resolve_events(200.0).summary()
        'p: 2 workers, 1 PS, speeds at t=0 [1.00, 1.00], w1 pause at 20s; w1 resume at 60s'
        """
        if not self.relative_events:
            return self
        if not (isinstance(reference_s, (int, float)) and 0 < reference_s < math.inf):
            raise ValueError(f"scenario {self.name!r}: the reference duration its event "
                             f"fractions are of must be a number of seconds > 0, got "
                             f"{reference_s!r}")
        events = sorted(self.events + tuple(e.at(float(reference_s))
                                            for e in self.relative_events), key=event_order)
        check_event_order(events)
        return dataclasses.replace(self, events=tuple(events), relative_events=())

    def check_resolved(self) -> None:
        """Raise `UnresolvedEvents` if events still wait for their reference duration:
        what plays a scenario (the simulator, the harness) needs seconds."""
        if self.relative_events:
            raise UnresolvedEvents(
                f"scenario {self.name!r} places "
                f"{sum(e.action in ('pause', 'kill') for e in self.relative_events)} "
                "pause or kill event(s) at fractions of a reference run (at_fraction) "
                "and nothing says how long that run is: "
                "set event_reference_s = SECONDS in the scenario file (or "
                "load_scenario(..., overrides={'event_reference_s': SECONDS})), give "
                "the command `--event-reference SECONDS` (`bench policies`, `speeds`), "
                "or let `bench policies "
                "--simulate` measure it (tuned BSP's time to the target without the "
                "events, on the tuning seeds)")

    def speed(self, worker: int, t_s: float) -> float:
        """Relative speed of ``worker`` at ``t_s`` seconds (slowdowns only; see
        `effective_speed` for pauses and kills)."""
        # math.prod: the simulator asks this once per simulated step.
        return float(math.prod(f.speed(t_s) for f in self._factors(worker)))

    def speeds_at(self, t_s: float) -> list[float]:
        """Every worker's `speed` at ``t_s``: what the in-graph delay should use now."""
        return [self.speed(w, t_s) for w in range(self.num_workers)]

    def downtime(self, worker: int) -> tuple:
        """``((begin, end, "pause" | "kill"), ...)``: ``worker``'s paused or killed
        stretches, in time order, each ``[begin, end)`` (``end`` is inf for a kill
        without a restart, or a pause without a resume). The one account of downtime:
        `frozen` and the simulator's speeds (`cluster_sim.sim.speeds.ScenarioSpeeds`)
        read it.

        >>> s = Scenario("d", 2, events=(Event(5.0, 1, "kill"), Event(9.0, 1, "restart"),
        ...                              Event(12.0, 1, "pause"), Event(15.0, 0, "kill")))
        >>> s.downtime(1)
        ((5.0, 9.0, 'kill'), (12.0, inf, 'pause'))
        """
        self._factors(worker)  # range check
        return self._downtimes[worker]

    @functools.cached_property
    def _downtimes(self) -> tuple:
        """`downtime` of every worker, worked out once (the simulator asks per step)."""
        out = [[] for _ in range(self.num_workers)]
        open_ = {}  # worker -> (begin, action) of the stretch under way
        for e in self.events:
            if e.action in ("pause", "kill"):
                open_[e.worker] = (e.at_s, e.action)
            elif e.worker in open_:
                begin, action = open_.pop(e.worker)
                out[e.worker].append((begin, e.at_s, action))
        for worker, (begin, action) in open_.items():
            out[worker].append((begin, math.inf, action))
        return tuple(tuple(d) for d in out)

    def frozen(self, worker: int, t_s: float) -> bool:
        """True while ``worker`` is paused or killed (an event at exactly t_s applies)."""
        return any(b <= t_s < e for b, e, _ in self.downtime(worker))

    def effective_speed(self, worker: int, t_s: float) -> float:
        """`speed`, or 0.0 while the worker is paused or killed."""
        return 0.0 if self.frozen(worker, t_s) else self.speed(worker, t_s)

    def mean_speed(self, worker: int, t0: float, t1: float) -> float:
        """Exact time-average of `effective_speed` over [t0, t1]."""
        cuts = [c for f in self._factors(worker) for c in f.breakpoints(t0, t1)]
        cuts += [e.at_s for e in self.events if e.worker == worker and t0 < e.at_s < t1]
        return _piecewise_mean(lambda t: self.effective_speed(worker, t), cuts, t0, t1)

    def steady(self) -> bool:
        """Whether every worker keeps one speed for the whole run (no schedule moves it,
        no pause or kill).

        >>> Scenario("s", num_workers=2, slowdowns=((SpeedSchedule((0.0,), (0.5,)),), ())).steady()
        True
        """
        return not (self.events or self.relative_events) and all(len(set(f.speeds)) == 1
                                        for w in range(self.num_workers)
                                        for f in self._factors(w))

    def summary(self) -> str:
        """One line for logs and report headers."""
        speeds = ", ".join(f"{s:.2f}" for s in self.speeds_at(0.0))
        events = "; ".join([f"w{e.worker} {e.action} at {e.at_s:g}s" for e in self.events]
                           + [f"w{e.worker} {e.action} at {e.at_fraction:g} of the "
                              "reference run" for e in self.relative_events])
        return (f"{self.name}: {self.num_workers} workers, {self.num_ps} PS, speeds at t=0 "
                f"[{speeds}]" + (f", {events}" if events else "")
                + (", black-box SIGSTOP duty cycle" if self.inject == "sigstop" else ""))

    def _factors(self, worker: int):
        if not 0 <= worker < self.num_workers:
            raise ValueError(f"worker {worker} out of range for {self.num_workers} workers")
        return self.slowdowns[worker] if self.slowdowns else ()


class UnresolvedEvents(ValueError):
    """A scenario's events are fractions of a reference run no one has measured."""
