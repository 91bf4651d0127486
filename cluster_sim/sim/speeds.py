"""How long a simulated worker's step takes: speed models, and the network.

A `SpeedModel` maps (worker, simulated time, samples) to compute seconds. Speed 1.0 is
the harness's reference machine: ``us_per_sample`` microseconds per sample, as the
injected delay of `cluster_sim.slowdown`. `make_speed_model` builds one from

* a scenario (`cluster_sim.scenarios`: a built-in name such as ``static`` or ``trace``,
  a TOML file, or a `Scenario` object): the very speeds over time the real harness
  injects for that name (`ScenarioSpeeds`), so ``--scenario NAME`` means the same in
  ``demo`` and ``simulate`` (``bench/<name>``: the benchmark's 8-worker scenarios). A
  simulation with more workers than the scenario tiles it: simulated worker ``i`` runs at
  the scenario's worker ``i mod n``, events included. ``speeds=`` replaces the speeds of
  ``static`` (repeated over the workers). Pauses and kills stop a worker's compute as
  they stop its process in the harness: a step under way when its worker is paused
  finishes that much later; one under way at a kill is lost, and the worker starts it
  again when it is restarted (never, without a restart: an infinite step).
* ``shifted_exp``: every step takes ``base * (1 + X)``, X exponential with mean
  ``straggler_mean`` (transient stragglers, as in the k-sync SGD literature).
* ``mixture``: every step's time is multiplied by a draw from a two-Gaussian mixture: with
  probability ``slow_fraction`` around ``slow_mean`` (a straggling step), else around 1.

Randomness comes from one generator per worker, spawned from the seed, so worker i's
step times do not depend on how many other workers there are or what policy runs.

Example:

>>> speeds = make_speed_model("static", num_workers=3, us_per_sample=100, speeds=(1, 0.5))
>>> [round(speeds.compute_time(w, 0.0, 10), 6) for w in range(3)]
[0.001, 0.002, 0.001]
>>> trace = make_speed_model("trace", num_workers=4, us_per_sample=300)
>>> trace.describe().split(":")[0]
'trace'
>>> churn = make_speed_model("churn", num_workers=4, us_per_sample=1000)  # w3 down 20-45 s
>>> churn.compute_time(3, 19.9, 32), churn.compute_time(3, 30.0, 32)  # 0.128 s at 0.25
(25.228, 15.128)
"""

import math

import numpy as np

from cluster_sim.scenarios import (Scenario, SpeedSchedule, bench_names, builtin_names,
                                   load_scenario)

SYNTHETIC = ("shifted_exp", "mixture")


class SpeedModel:
    """Base: ``compute_time(worker, now, samples)`` in seconds."""

    name = "speed model"
    has_kills = False  # whether `killed` is ever True (a cheap answer for every worker)

    def __init__(self, num_workers: int, us_per_sample: float, seed: int = 0):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"a simulation needs at least one worker, got {num_workers!r}")
        if not us_per_sample > 0:
            raise ValueError(f"us_per_sample must be > 0, got {us_per_sample!r}")
        self.num_workers = num_workers
        self.s_per_sample = us_per_sample * 1e-6
        children = np.random.SeedSequence([seed, 0x5C3]).spawn(num_workers)
        self.rngs = [np.random.default_rng(c) for c in children]

    def speed(self, worker: int, now: float) -> float:
        """Relative speed of ``worker`` at simulated time ``now`` (before per-step noise)."""
        return 1.0

    def compute_time(self, worker: int, now: float, samples: float) -> float:
        return samples * self.s_per_sample / self.speed(worker, now)

    def killed(self, worker: int, now: float) -> bool:
        """Whether ``worker`` is killed (not live) at ``now``: never, without events."""
        return False

    def describe(self) -> str:
        return self.name


class ScenarioSpeeds(SpeedModel):
    """A `cluster_sim.scenarios.Scenario`'s speeds over (training) time, tiled over the
    simulated workers.

    >>> sim = ScenarioSpeeds(load_scenario("static"), num_workers=6, us_per_sample=300)
    >>> [round(sim.compute_time(w, 0.0, 32), 4) for w in range(6)]
    [0.0096, 0.0096, 0.0192, 0.0384, 0.0096, 0.0096]
    >>> paused = ScenarioSpeeds(load_scenario("pause"), 4, us_per_sample=1000)  # w2 10-30 s
    >>> round(paused.compute_time(2, 9.99, 32), 3)  # 0.01 s of work, 20 s paused, the rest
    20.064
    """

    def __init__(self, scenario: Scenario, num_workers: int, us_per_sample: float, seed=0):
        super().__init__(num_workers, us_per_sample, seed)
        scenario.check_resolved()  # events at fractions of a run need the run's length
        self.scenario = scenario
        self.name = scenario.name
        self.downtime = [scenario.downtime(w) for w in range(scenario.num_workers)]
        self.has_kills = any(a == "kill" for down in self.downtime for _b, _e, a in down)

    def speed(self, worker, now):
        return self.scenario.speed(worker % self.scenario.num_workers, now)

    def compute_time(self, worker, now, samples):
        """Seconds from ``now`` until a step of ``samples`` started then is computed.

        The step's pace is set when it starts (the harness sets a step's delay from the
        speed when the step reads it); a pause stops the clock of the step, a kill loses
        it and the step begins again at the restart, at the speed then."""
        down = self.downtime[worker % self.scenario.num_workers]
        work = samples * self.s_per_sample
        t, left = float(now), None  # left: seconds of the step still to compute
        while True:
            for begin, end, action in down:  # frozen at t: wait for the end
                if begin <= t < end:
                    t, left = end, (None if action == "kill" else left)
            if math.isinf(t):
                return math.inf
            if left is None:
                left = work / self.speed(worker, t)
            cut = next(((b, a) for b, _e, a in down if t < b < t + left), None)
            if cut is None:
                return t + left - now
            begin, action = cut
            left = left - (begin - t) if action == "pause" else None
            t = begin

    def killed(self, worker, now):
        """Whether ``worker`` is killed at ``now`` (a paused worker is still live).

        >>> churn = ScenarioSpeeds(load_scenario("churn"), 4, us_per_sample=300)
        >>> churn.killed(3, 19.9), churn.killed(3, 20.0), churn.killed(3, 45.0)
        (False, True, False)
        """
        down = self.downtime[worker % self.scenario.num_workers]
        return any(b <= now < e for b, e, action in down if action == "kill")

    def describe(self):
        n = self.scenario.num_workers
        tiled = f", tiled over {self.num_workers} workers" if self.num_workers != n else ""
        return self.scenario.summary() + tiled


def static_scenario(speeds) -> Scenario:
    """The ``static`` scenario with other fixed speeds, one per worker.

    >>> static_scenario((1, 0.5)).speeds_at(0.0)
    [1.0, 0.5]
    """
    speeds = tuple(float(s) for s in speeds)
    if not speeds or any(not (s > 0 and math.isfinite(s)) for s in speeds):
        raise ValueError(f"static speeds must be finite numbers > 0, got {speeds}")
    base = load_scenario("static")
    return Scenario(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                       "num_workers": len(speeds), "source": "static speeds",
                       "slowdowns": tuple((SpeedSchedule((0.0,), (s,)),) for s in speeds)})


class ShiftedExponential(SpeedModel):
    name = "shifted_exp"

    def __init__(self, num_workers, us_per_sample, straggler_mean=0.5, seed=0):
        super().__init__(num_workers, us_per_sample, seed)
        if not straggler_mean >= 0:
            raise ValueError(f"straggler_mean must be >= 0, got {straggler_mean!r}")
        self.straggler_mean = float(straggler_mean)

    def compute_time(self, worker, now, samples):
        extra = self.rngs[worker].exponential(self.straggler_mean) if self.straggler_mean else 0.0
        return samples * self.s_per_sample * (1.0 + extra)

    def describe(self):
        return f"shifted exponential stragglers (mean extra {self.straggler_mean:g} x base)"


class Mixture(SpeedModel):
    name = "mixture"

    def __init__(self, num_workers, us_per_sample, slow_fraction=0.1, slow_mean=4.0,
                 slow_sd=1.0, fast_sd=0.1, seed=0):
        super().__init__(num_workers, us_per_sample, seed)
        if not 0 <= slow_fraction <= 1:
            raise ValueError(f"slow_fraction must be in [0, 1], got {slow_fraction!r}")
        if not (slow_mean > 0 and slow_sd >= 0 and fast_sd >= 0):
            raise ValueError("slow_mean must be > 0 and the standard deviations >= 0")
        self.slow_fraction, self.slow_mean = float(slow_fraction), float(slow_mean)
        self.slow_sd, self.fast_sd = float(slow_sd), float(fast_sd)

    def compute_time(self, worker, now, samples):
        rng = self.rngs[worker]
        if rng.random() < self.slow_fraction:
            factor = rng.normal(self.slow_mean, self.slow_sd)
        else:
            factor = rng.normal(1.0, self.fast_sd)
        # A step never takes less than a tenth of the reference time.
        return samples * self.s_per_sample * max(0.1, factor)

    def describe(self):
        return (f"Gaussian-mixture stragglers ({self.slow_fraction:.0%} of steps ~ "
                f"N({self.slow_mean:g}, {self.slow_sd:g}) x base)")


def make_speed_model(scenario, num_workers: int, us_per_sample: float = 300.0, seed: int = 0,
                     traces=None, speeds=None, machine_usage=None, **options) -> SpeedModel:
    """A speed model for ``num_workers`` simulated workers (see the module docstring).

    ``scenario``: a `cluster_sim.scenarios.Scenario`, a built-in scenario name or TOML
    path (``traces`` is its trace directory, as ``--traces`` in the demo, and
    ``machine_usage`` its machine-usage CSV or directory; ``speeds`` replaces the speeds of
    ``static``), or ``shifted_exp`` / ``mixture`` with their ``options``. Options a model
    does not use are ignored, so one config serves all.
    """
    pick = lambda *keys: {k: options[k] for k in keys if options.get(k) is not None}
    if scenario == "shifted_exp":
        return ShiftedExponential(num_workers, us_per_sample, seed=seed,
                                  **pick("straggler_mean"))
    if scenario == "mixture":
        return Mixture(num_workers, us_per_sample, seed=seed,
                       **pick("slow_fraction", "slow_mean", "slow_sd", "fast_sd"))
    if not isinstance(scenario, Scenario):
        name = str(scenario)
        if name == "static" and speeds is not None:
            scenario = static_scenario(speeds)
        else:
            try:
                scenario = load_scenario(name, traces_dir=traces, machine_usage=machine_usage)
            except ValueError as err:
                if name.endswith(".toml") or name in builtin_names() + bench_names():
                    raise
                raise ValueError(f"unknown scenario {name!r}; choose a built-in "
                                 f"({', '.join(builtin_names() + bench_names())}), a TOML "
                                 f"file, or one of {', '.join(SYNTHETIC)}") from err
    return ScenarioSpeeds(scenario, num_workers, us_per_sample, seed)


class Network:
    """Per-step communication time: pull then push of the parameters, plus a latency.

    ``bandwidth_gbps`` None or 0 means an infinitely fast link (latency only).
    """

    def __init__(self, model_bytes: int, bandwidth_gbps: float | None = 10.0,
                 latency_s: float = 50e-6):
        if bandwidth_gbps is not None and bandwidth_gbps < 0:
            raise ValueError(f"bandwidth must be >= 0 Gbit/s, got {bandwidth_gbps!r}")
        if latency_s < 0:
            raise ValueError(f"latency must be >= 0 s, got {latency_s!r}")
        transfer = 2 * model_bytes * 8 / (bandwidth_gbps * 1e9) if bandwidth_gbps else 0.0
        self.step_s = transfer + latency_s
