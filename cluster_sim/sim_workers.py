"""How long a simulated worker's step takes: scenarios of worker speed, and the network.

A scenario maps (worker, simulated time, samples) to compute seconds. Speed 1.0 is the
harness's reference machine: ``us_per_sample`` microseconds per sample, as the injected
delay of `cluster_sim.slowdown`. Scenarios:

* ``static``: a fixed speed per worker (the list is repeated if shorter than the cluster).
* ``trace``: per-worker speed series from CSV files in the format of the Alibaba PAI
  ``job_N_norm.csv`` traces (columns ``worker``, ``time``, ``batch_time_norm``; speed is
  proportional to ``1 / batch_time_norm``). Simulated worker ``i`` follows trace series
  ``i mod n`` over simulated time; each job's speeds are divided by that job's median so a
  typical worker runs at 1.0, and a series loops when it ends.
* ``shifted_exp``: every step takes ``base * (1 + X)``, X exponential with mean
  ``straggler_mean`` (transient stragglers, as in the k-sync SGD literature).
* ``mixture``: every step's time is multiplied by a draw from a two-Gaussian mixture: with
  probability ``slow_fraction`` around ``slow_mean`` (a straggling step), else around 1.

Randomness comes from one generator per worker, spawned from the seed, so worker i's
step times do not depend on how many other workers there are or what policy runs.

Example:

>>> speeds = make_scenario("static", num_workers=3, us_per_sample=100, speeds=(1, 0.5))
>>> [round(speeds.compute_time(w, 0.0, 10), 6) for w in range(3)]
[0.001, 0.002, 0.001]
"""

import csv
import math
import pathlib

import numpy as np

SCENARIOS = ("static", "trace", "shifted_exp", "mixture")


class Scenario:
    """Base: ``compute_time(worker, now, samples)`` in seconds."""

    name = "scenario"

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

    def describe(self) -> str:
        return self.name


class StaticScenario(Scenario):
    name = "static"

    def __init__(self, num_workers, us_per_sample, speeds=(1.0, 1.0, 0.5, 0.25), seed=0):
        super().__init__(num_workers, us_per_sample, seed)
        speeds = tuple(float(s) for s in speeds)
        if not speeds or any(not (s > 0 and math.isfinite(s)) for s in speeds):
            raise ValueError(f"static speeds must be finite numbers > 0, got {speeds}")
        self.speeds = [speeds[i % len(speeds)] for i in range(num_workers)]

    def speed(self, worker, now):
        return self.speeds[worker]

    def describe(self):
        shown = ",".join(f"{s:g}" for s in self.speeds[:8])
        return f"static speeds {shown}{',...' if self.num_workers > 8 else ''}"


def load_trace_series(directory, value_column: str = "batch_time_norm"):
    """``[(name, times, speeds)]`` for every (file, worker) series of ``directory/*.csv``.

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


class TraceScenario(Scenario):
    """Worker ``i`` follows trace series ``i mod n``; ``time_unit_s`` simulated seconds per
    unit of the trace's ``time`` column."""

    name = "trace"

    def __init__(self, num_workers, us_per_sample, traces, time_unit_s=None, seed=0,
                 value_column="batch_time_norm"):
        super().__init__(num_workers, us_per_sample, seed)
        if traces is None:
            raise ValueError("the trace scenario needs a directory of trace CSVs (--traces DIR)")
        self.series = load_trace_series(traces, value_column)
        # By default one trace time unit is one nominal step (32 samples at speed 1): the
        # traces' time column counts iterations, so speeds change at the pace they did.
        self.time_unit_s = float(time_unit_s) if time_unit_s else 32 * self.s_per_sample
        self.directory = str(traces)
        self._assigned = [self.series[i % len(self.series)] for i in range(num_workers)]

    def speed(self, worker, now):
        _, times, speeds = self._assigned[worker]
        start, span = times[0], times[-1] - times[0]
        unit = now / self.time_unit_s
        if span > 0:
            # Loop the series; the last sample holds for one mean sampling interval.
            period = span + span / max(1, len(times) - 1)
            unit = unit % period
        i = int(np.searchsorted(times, start + unit, side="right")) - 1
        return float(speeds[max(i, 0)])

    def describe(self):
        return (f"trace {self.directory} ({len(self.series)} series, "
                f"{self.time_unit_s * 1e3:g} ms per time unit)")


class ShiftedExponentialScenario(Scenario):
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


class MixtureScenario(Scenario):
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


class HarnessScenario(Scenario):
    """A scenario of the real harness (`cluster_sim.scenarios.Scenario`: a built-in or TOML
    file) in the simulator: the very same speeds over (training) time, so the two can be
    compared on one scenario. Pause and kill events are not simulated.

    >>> from cluster_sim.scenarios import load_scenario
    >>> sim = HarnessScenario(load_scenario("static"), us_per_sample=300)
    >>> [round(sim.compute_time(w, 0.0, 32), 4) for w in range(4)]
    [0.0096, 0.0096, 0.0192, 0.0384]
    """

    def __init__(self, scenario, us_per_sample, seed=0):
        super().__init__(scenario.num_workers, us_per_sample, seed)
        if scenario.events:
            raise ValueError(f"scenario {scenario.name!r} has pause/kill events, which the "
                             "simulator does not model; use a scenario without events")
        self.harness = scenario
        self.name = scenario.name

    def speed(self, worker, now):
        return self.harness.speed(worker, now)

    def describe(self):
        return self.harness.summary()


def make_scenario(name, num_workers: int, us_per_sample: float = 300.0, seed: int = 0,
                  **options) -> Scenario:
    """A scenario by name (``static``, ``trace``, ``shifted_exp``, ``mixture``), or a
    harness `cluster_sim.scenarios.Scenario` object (see `HarnessScenario`).

    Options not used by the scenario are ignored (so one config serves every scenario).
    """
    from cluster_sim.scenarios import Scenario as Harness
    if isinstance(name, Harness):
        if name.num_workers != num_workers:
            raise ValueError(f"scenario {name.name!r} has {name.num_workers} workers, the "
                             f"simulation {num_workers}")
        return HarnessScenario(name, us_per_sample, seed)
    pick = lambda *keys: {k: options[k] for k in keys if options.get(k) is not None}
    if name == "static":
        return StaticScenario(num_workers, us_per_sample, seed=seed, **pick("speeds"))
    if name == "trace":
        return TraceScenario(num_workers, us_per_sample, options.get("traces"),
                             options.get("time_unit_s"), seed=seed)
    if name == "shifted_exp":
        return ShiftedExponentialScenario(num_workers, us_per_sample, seed=seed,
                                          **pick("straggler_mean"))
    if name == "mixture":
        return MixtureScenario(num_workers, us_per_sample, seed=seed,
                               **pick("slow_fraction", "slow_mean", "slow_sd", "fast_sd"))
    raise ValueError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")


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
