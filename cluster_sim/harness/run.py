"""Run policies on a real local cluster under a scenario's slowdowns and measure them.

One `LocalCluster` serves every run; each arm (a policy, optionally with batch
allocation) gets a fresh `KSyncStrategy` and a fresh model from the same seed, and
trains in one `model.fit` whose epochs are ``pushes_per_chunk`` pushes long, validated
on the held-out set after each (validation time is not counted), so accuracy against
wall time and time to target come from one run.

Slowdowns: an in-graph delay per sample inside each training step
(`cluster_sim.slowdown.SlowdownLayer`), whose per-worker sizes a background thread keeps
at the scenario's speeds as training time passes (traces, a co-located job), and which
applies the scenario's events (pause, kill, restart) to the worker processes. In black-box
mode (``inject = "sigstop"``) every step has the reference delay and the speeds are
enforced from outside by a SIGSTOP/SIGCONT duty cycle (`cluster_sim.harness.signals.DutyCycler`).

Example:

```python
scenario = load_scenario("static")
with LocalCluster(num_workers=scenario.num_workers) as cluster:
    result = run_arm(cluster, Arm("adaptive+alloc", "adaptive", allocation="forecast"),
                     scenario, seed=0)
print(result["tta_s"], result["hardware_efficiency"])
```
"""

import dataclasses
import time

import tf_keras.callbacks as keras_callbacks
from tensorflow.python.distribute.coordinator.cluster_coordinator import ClosureInputError

import ksync
from cluster_sim.harness.player import ScenarioPlayer
from cluster_sim.report.results import RunResult


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Settings of a run that a scenario does not fix."""

    speeds: tuple = (1.0, 1.0, 0.5, 0.25)
    us_per_sample: float = 300.0
    batch_size: int = 32
    learning_rate: float = 0.05
    momentum: float = 0.9
    hidden: tuple = (64, 64)
    pushes_per_chunk: int = 60
    max_pushes: int = 1200
    target_accuracy: float = 0.93
    time_budget_s: float = 120.0
    allocate_every: int = 10
    seed: int = 0

    @classmethod
    def from_scenario(cls, scenario, **overrides) -> "RunConfig":
        """The run a `cluster_sim.scenarios.Scenario` describes (its speeds at t = 0);
        ``overrides`` win, and a name that is no field raises TypeError."""
        values = dict(speeds=tuple(scenario.speeds_at(0.0)),
                      us_per_sample=scenario.us_per_sample, batch_size=scenario.batch_size,
                      learning_rate=scenario.learning_rate, momentum=scenario.momentum,
                      hidden=tuple(scenario.hidden), max_pushes=scenario.max_pushes,
                      target_accuracy=scenario.target_accuracy,
                      time_budget_s=scenario.time_budget_s)
        return cls(**dict(values, **overrides))


@dataclasses.dataclass(frozen=True)
class Arm:
    """One contender of a comparison: a policy spec for `ksync.parse` (e.g. "ksync:k=3")
    and how batch sizes are set: None (equal), "static" (profile then fixed, Chao et
    al.), "last" (last measured speeds), "forecast" (the shipped GRU forecaster) or
    "deadline" (what each worker finishes by the fastest's time: Non-blocking SGD)."""

    label: str
    policy: str
    allocation: str | None = None

    def make_policy(self):
        return ksync.parse(self.policy)


#: What `python -m cluster_sim demo --arms all` compares.
ARMS = {
    "bsp": Arm("BSP", "bsp"),
    "asp": Arm("ASP", "asp"),
    "ssp": Arm("SSP(s=3)", "ssp:max_staleness=3"),
    "ksync": Arm("KSync(k=3)", "ksync:k=3"),
    "backup": Arm("Backup(b=1)", "backup:backups=1"),
    "adaptive": Arm("Adaptive", "adaptive"),
    "adaptive+alloc": Arm("Adaptive+alloc", "adaptive", allocation="forecast"),
    "chao": Arm("Chao static alloc", "bsp", allocation="static"),
    "lb-bsp": Arm("BSP+alloc(last)", "bsp", allocation="last"),
    "nbsgd": Arm("Non-blocking SGD", "bsp", allocation="deadline"),
    "ashl": Arm("ASHL", "ashl:switch_after=40"),
    "syncswitch": Arm("Sync-Switch", "syncswitch:switch_after=40"),
}


#: How often `run_arm` starts `fit` again after a transient TensorFlow input error.
_FIT_RETRIES = 3


def parse_arms(text: str) -> list[str]:
    """Names of `ARMS` from a comma-separated list, or every arm for ``"all"``; raises
    ValueError naming the unknown ones and the choices.

    >>> parse_arms("bsp, lb-bsp")
    ['bsp', 'lb-bsp']
    """
    names = list(ARMS) if text.strip() == "all" else [a.strip() for a in text.split(",")]
    unknown = [a for a in names if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arms {unknown}; choose from {sorted(ARMS)} or 'all'")
    return names


def run_arm(cluster, arm: Arm, scenario, seed: int | None = None,
            config: RunConfig | None = None, data=None, progress=None) -> dict:
    """Train the scenario's MLP on digits under ``arm``; the measurements as a
    `cluster_sim.report.RunResult` dict.
    ``config`` defaults to the scenario's; ``seed`` to the config's."""
    import predictor
    import tf_keras as keras

    from cluster_sim.slowdown import SlowdownLayer
    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy

    config = config or RunConfig.from_scenario(scenario)
    seed = config.seed if seed is None else seed
    n = scenario.num_workers
    if n != cluster.num_workers:
        raise ValueError(f"scenario {scenario.name!r} has {n} workers, the cluster "
                         f"{cluster.num_workers}; start the cluster from the scenario.")
    data = data or digits(seed=0)
    policy = arm.make_policy()
    allocation = {}
    if arm.allocation:
        allocation = dict(
            batch_allocation=predictor.BatchAllocator(config.batch_size * n, min_batch=4),
            allocation_mode=arm.allocation, allocate_every=config.allocate_every,
            forecaster=(predictor.GRUSmoothingForecaster.default()
                        if arm.allocation == "forecast" else None))
    strategy = KSyncStrategy(cluster.resolver(), policy=policy, **allocation)
    with strategy.scope():
        slowdown = SlowdownLayer(n)
        model = compile_classifier(
            mlp(data.num_features, data.num_classes, hidden=config.hidden, seed=seed,
                slowdown=slowdown),
            keras.optimizers.SGD(config.learning_rate, momentum=config.momentum))
    recorder = _Recorder(strategy, config, bool(arm.allocation), progress)
    events = ScenarioPlayer(cluster, scenario, recorder.clock, slowdown,
                            config.us_per_sample)
    epochs = -(-config.max_pushes // config.pushes_per_chunk)
    events.start()
    try:
        while not recorder.done and len(recorder.curve) < epochs:
            try:
                model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(
                              None if arm.allocation else config.batch_size,
                              shuffle_seed=seed * 100003 + len(recorder.fit_errors))),
                          initial_epoch=len(recorder.curve), epochs=epochs,
                          steps_per_epoch=config.pushes_per_chunk,
                          validation_data=data.test_dataset(), validation_steps=1,
                          callbacks=[recorder], verbose=0)
            except ClosureInputError as err:
                # Seen once in a 30-minute soak: TensorFlow failed to rebuild a restarted
                # worker's input pipeline ('ContextSwitch' object has no attribute
                # 'is_ref'). Pushes are atomic on the PS, so a new fit carries on from
                # the last finished epoch; a run that keeps failing is not retried.
                recorder.stop_clock()
                recorder.fit_errors.append(f"{type(err).__name__}: {err}"[:500])
                if len(recorder.fit_errors) > _FIT_RETRIES:
                    raise
    finally:
        events.finish()
    result = _result(arm, seed, strategy.telemetry(), recorder.curve, recorder.tta,
                     recorder.sizes_over_time, events.applied, recorder.fit_errors)
    # Its coordinator's threads would outlive the run and, once the cluster is gone,
    # report every failed attempt to reach it.
    strategy.shutdown()
    return result


class _Recorder(keras_callbacks.Callback):
    """Keeps the training clock (wall time in `fit`'s training steps, not in its
    validation) and records the accuracy curve at the end of every epoch of
    ``pushes_per_chunk`` pushes; stops `fit` at the target, the push limit or the time
    budget."""

    def __init__(self, strategy, config, allocation, progress):
        super().__init__()
        self.strategy, self.config = strategy, config
        self.allocation, self.progress = allocation, progress
        self.curve, self.sizes_over_time, self.fit_errors = [], [], []
        self.tta = None
        self.done = False
        self._train_s = 0.0  # training time before the current stretch
        self._since = None  # when the current stretch of training started

    def clock(self) -> float:
        since = self._since
        return self._train_s + (time.monotonic() - since if since is not None else 0.0)

    def stop_clock(self):
        self._train_s = self.clock()
        self._since = None

    def on_train_begin(self, logs=None):
        self._since = time.monotonic()

    def on_test_begin(self, logs=None):
        self.stop_clock()

    def on_test_end(self, logs=None):
        self._since = time.monotonic()

    def on_train_end(self, logs=None):
        self.stop_clock()

    def on_epoch_end(self, epoch, logs=None):
        wall = self._train_s  # the clock stopped when validation began
        pushes = (epoch + 1) * self.config.pushes_per_chunk
        accuracy = float(logs["val_accuracy"])
        t = self.strategy.telemetry()
        self.curve.append({"wall_s": wall, "pushes": pushes, "version": t["version"],
                           "loss": float(logs["val_loss"]), "accuracy": accuracy,
                           "workers": [{k: w[k] for k in ("pushes", "samples", "busy_s")}
                                       for w in t["workers"]]})
        if self.allocation:
            self.sizes_over_time.append({"wall_s": wall,
                                         "sizes": list(t["allocation"]["sizes"])})
        if self.tta is None and accuracy >= self.config.target_accuracy:
            self.tta = wall
        if self.progress:
            self.progress(pushes, accuracy)
        self.done = (self.tta is not None or pushes >= self.config.max_pushes
                     or wall >= self.config.time_budget_s)
        self.model.stop_training = self.done


def window_metrics(start: dict, end: dict) -> dict:
    """Throughput, hardware efficiency and per-worker step times between two points of
    a run's curve (each with ``wall_s`` and per-worker ``pushes``, ``samples``,
    ``busy_s``; the run's start is ``{"wall_s": 0, "workers": zeros}``).

    Each worker's rate while it was busy is its stand-alone speed under the same
    slowdowns and the same CPU contention; efficiency is how much of their sum the
    cluster achieved, 1.0 being no time lost to waiting.

    >>> w = lambda p, s, b: {"pushes": p, "samples": s, "busy_s": b}
    >>> m = window_metrics({"wall_s": 0, "workers": [w(0, 0, 0), w(0, 0, 0)]},
    ...                    {"wall_s": 2, "workers": [w(10, 100, 1.0), w(5, 50, 2.0)]})
    >>> m["samples_per_s"], m["hardware_efficiency"], m["worker_step_times"]
    (75.0, 0.6, [0.1, 0.4])
    """
    wall = end["wall_s"] - start["wall_s"]
    deltas = [{k: b[k] - a[k] for k in ("pushes", "samples", "busy_s")}
              for a, b in zip(start["workers"], end["workers"])]
    samples = sum(d["samples"] for d in deltas)
    busy_rates = [d["samples"] / d["busy_s"] for d in deltas if d["busy_s"] > 0]
    rate = samples / wall if wall > 0 else None
    return {
        "samples_per_s": rate,
        "hardware_efficiency": rate / sum(busy_rates) if rate and busy_rates else None,
        "idle_fraction": 1.0 - sum(min(1.0, d["busy_s"] / wall) for d in deltas)
        / len(deltas) if wall > 0 else None,
        "worker_step_times": [d["busy_s"] / d["pushes"] if d["pushes"] else None
                              for d in deltas],
    }


def _result(arm, seed, t, curve, tta, sizes_over_time, events_applied, fit_errors) -> dict:
    zero = {"wall_s": 0.0, "workers": [{"pushes": 0, "samples": 0.0, "busy_s": 0.0}
                                       for _ in t["workers"]]}
    whole = window_metrics(zero, {"wall_s": curve[-1]["wall_s"], "workers": t["workers"]})
    # The second half of the run: after warm-up, profiling and the first allocations.
    steady = (window_metrics(curve[len(curve) // 2 - 1], curve[-1]) if len(curve) >= 2
              else None)
    return RunResult(
        policy=arm.label, seed=seed, tta_s=tta, final_accuracy=curve[-1]["accuracy"],
        wall_s=curve[-1]["wall_s"], samples_per_s=whole["samples_per_s"],
        hardware_efficiency=whole["hardware_efficiency"],
        idle_fraction=whole["idle_fraction"], steady=steady,
        staleness_p50=t["staleness_p50"], staleness_p95=t["staleness_p95"],
        staleness_histogram=t["staleness_histogram"],
        pushed=t["pushed"], applied=t["applied"], dropped=t["dropped"],
        pending=t["pending"], version=t["version"], retried=t["retried"],
        rule=t["rule"], k_history=t["k_history"],
        worker_pushes=[w["pushes"] for w in t["workers"]],
        worker_step_times=[w["step_time"] for w in t["workers"]],
        worker_compute_times=[w["compute_time"] for w in t["workers"]],
        batch_sizes=sizes_over_time, events=events_applied, fit_errors=fit_errors,
        curve=curve).as_dict()
