"""Run policies on a real local cluster under a scenario's slowdowns and measure them.

One `LocalCluster` serves every run; each arm (a policy, optionally with batch
allocation) gets a fresh `KSyncStrategy` and a fresh model from the same seed, and
trains in one long `model.fit` with no forced drain: validation runs beside training
(`cluster_sim.harness.evaluator.BackgroundEvaluator` reads the weights from the PS and
evaluates them in numpy on the chief), at most 1 % of the training time so far apart,
and a callback stops `fit` once the validation loss reaches the target (accuracy, for a
workload without a target loss), the push or update limit or the time budget. The time
to target is the crossing interpolated between evaluations (`cluster_sim.report.curve_tta`).

Arms are paired by seed: for one seed every arm starts from the same initial weights
(`cluster_sim.workloads.mlp` seeds Keras) and each worker reads the training rows in the
same order (its shuffle seed is the run's seed and its worker index).

Slowdowns: an in-graph delay per sample inside each training step
(`cluster_sim.slowdown.SlowdownLayer`), whose per-worker sizes a background thread keeps
at the scenario's speeds as training time passes (traces, a co-located job), and which
applies the scenario's events (pause, kill, restart) to the worker processes. In black-box
mode (``inject = "sigstop"``) every step has the reference delay and the speeds are
enforced from outside by a SIGSTOP/SIGCONT duty cycle (`cluster_sim.harness.signals.DutyCycler`).

Example:

```python
scenario = load_scenario("static")
with LocalCluster(num_workers=scenario.num_workers, num_ps=scenario.num_ps) as cluster:
    result = run_arm(cluster, Arm("adaptive+alloc", "adaptive", allocation="forecast"),
                     scenario, seed=0)
print(result["tta_s"], result["hardware_efficiency"])
```
"""

import collections
import dataclasses
import time

import tensorflow as tf
import tf_keras.callbacks as keras_callbacks

from cluster_sim.harness.config import (ARMS, Arm, RunConfig, load_data,  # noqa: F401
                                        parse_arms, targets)
from cluster_sim.harness.player import ScenarioPlayer
from cluster_sim.report.results import RunResult, curve_tta
from strategies.compat import ClosureInputError

#: How often `run_arm` starts `fit` again after a transient TensorFlow error, beyond
#: one for each worker the scenario kills.
_FIT_RETRIES = 3

#: What reading a finished step's outputs raises when the worker that holds them has
#: died since (a preemption) or TensorFlow rebuilt the cluster: the step was applied on
#: the PS; its logs are lost. InvalidArgumentError only with `_LOST_HANDLE`'s text.
_LOST_OUTPUTS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                 tf.errors.CancelledError, tf.errors.InvalidArgumentError)
_LOST_HANDLE = ("Unable to find the relevant tensor remote_handle", "unknown device")


def lost_outputs(err) -> bool:
    """Whether ``err``, raised reading a finished step's outputs, says they are gone.

    >>> lost_outputs(tf.errors.InvalidArgumentError(None, None, "Unable to find the "
    ...              "relevant tensor remote_handle: Op ID: 1, Output num: 0"))
    True
    >>> lost_outputs(tf.errors.InvalidArgumentError(None, None, "logits and labels"))
    False
    """
    if isinstance(err, tf.errors.InvalidArgumentError):
        return any(text in str(err) for text in _LOST_HANDLE)
    return isinstance(err, _LOST_OUTPUTS)


def run_arm(cluster, arm: Arm, scenario, seed: int | None = None,
            config: RunConfig | None = None, data=None, progress=None) -> dict:
    """Train the scenario's model (`cluster_sim.workloads.build_model`: an MLP, or for
    ``ctr`` embedding tables under one, the tables sharded over the cluster's PS tasks
    by `cluster_sim.ctr.TablePartitioner`) on its workload under ``arm``; the
    measurements as a `cluster_sim.report.RunResult` dict (plus ``evaluator``: the
    median costs of the background evaluation).
    ``config`` defaults to the scenario's; ``seed`` to the config's. After every
    evaluation ``progress(pushes, accuracy)`` is called, or ``progress.point(point)``
    (the whole curve point, loss included) when ``progress`` has that method, as
    `cluster_sim.harness.progress.TargetBar` has."""
    scenario.check_resolved()  # events at fractions of a run need the run's length
    import predictor
    import tf_keras as keras

    from cluster_sim.harness.evaluator import BackgroundEvaluator
    from cluster_sim.slowdown import SlowdownLayer
    from cluster_sim.workloads import build_model, compile_classifier
    from strategies import KSyncStrategy

    config = config or RunConfig.from_scenario(scenario)
    seed = config.seed if seed is None else seed
    n = scenario.num_workers
    num_ps = cluster.config.num_ps
    if (n, scenario.num_ps) != (cluster.num_workers, num_ps):
        raise ValueError(f"scenario {scenario.name!r} has {n} workers and "
                         f"{scenario.num_ps} PS, the cluster {cluster.num_workers} and "
                         f"{num_ps}; start the cluster from the scenario "
                         "(LocalCluster(num_workers=..., num_ps=scenario.num_ps)).")
    data = data or load_data(scenario)
    goal = targets(config, data)
    policy = arm.make_policy()
    allocation = {}
    if arm.allocation:
        allocation = dict(
            batch_allocation=predictor.BatchAllocator(config.batch_size * n, min_batch=4),
            allocation_mode=arm.allocation, allocate_every=config.allocate_every,
            forecaster=(predictor.GRUSmoothingForecaster.default()
                        if arm.allocation == "forecast" else None))
    strategy = KSyncStrategy(cluster.resolver(), variable_partitioner(data, num_ps),
                             policy=policy, lr_scaling=arm.lr_scaling, **allocation)
    with strategy.scope():
        slowdown = SlowdownLayer(n)
        model = compile_classifier(
            build_model(data, hidden=config.hidden, seed=seed, slowdown=slowdown),
            keras_sgd(arm.step_size(config)))
    clock = _TrainingClock()
    evaluator = BackgroundEvaluator(
        model, strategy, data, clock, max_updates=config.max_updates,
        relative_gap=config.eval_relative_gap, min_gap_s=config.eval_min_gap_s,
        on_point=_on_point(progress), allocation=bool(arm.allocation), **goal)
    stopper = _Stopper(clock, evaluator, config, ahead=2 * n)
    events = ScenarioPlayer(cluster, scenario, clock, slowdown, config.us_per_sample)
    fit_errors = []
    retries = _FIT_RETRIES + sum(e.action == "kill" for e in scenario.events)
    events.start()
    evaluator.start()
    try:
        while not stopper.done and strategy.telemetry()["pushed"] < config.max_pushes:
            try:
                model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(
                              None if arm.allocation else config.batch_size,
                              shuffle_seed=seed * 100003 + len(fit_errors))),
                          epochs=1, verbose=0, callbacks=[stopper],
                          steps_per_epoch=config.max_pushes - strategy.telemetry()["pushed"])
            except Exception as err:  # pylint: disable=broad-except
                if not (isinstance(err, ClosureInputError) or lost_outputs(err)):
                    raise
                # Both seen in soaks. TensorFlow failed to rebuild a restarted worker's
                # input pipeline ('ContextSwitch' object has no attribute 'is_ref'); or
                # `fit`, at the epoch's end, read the last step's logs from a worker
                # killed or reconnected since (as under the stock strategy). Pushes are atomic on the
                # PS, so a new fit carries on; a run that keeps failing is not retried.
                clock.stop()
                fit_errors.append(f"{type(err).__name__}: {err}"[:500])
                if len(fit_errors) > retries:
                    raise
    finally:
        clock.stop()
        events.finish()
        evaluator.finish()
    evaluator.evaluate()  # the weights training ended with
    check = None
    if config.check_evaluator:
        keras_logs = model.evaluate(data.test_dataset(), steps=1, verbose=0, return_dict=True)
        last = evaluator.curve[-1]
        check = {"numpy": {"loss": last["loss"], "accuracy": last["accuracy"]},
                 "keras": {"loss": float(keras_logs["loss"]),
                           "accuracy": float(keras_logs["accuracy"])}}
    curve = evaluator.curve
    sizes = []  # the batch sizes from each change on, as the simulator records them
    for p in curve:
        if "sizes" in p and (not sizes or sizes[-1]["sizes"] != p["sizes"]):
            sizes.append({"wall_s": p["wall_s"], "sizes": p["sizes"]})
        p.pop("sizes", None)
    result = _result(arm, seed, strategy.telemetry(), curve, goal, sizes, events.applied,
                     fit_errors)
    result["evaluator"] = dict(evaluator.costs(), check=check)
    result["lost_logs"] = stopper.lost_logs
    # Its coordinator's threads would outlive the run and, once the cluster is gone,
    # report every failed attempt to reach it.
    strategy.shutdown()
    return result


def variable_partitioner(data, num_ps: int):
    """How `run_arm` shards the model's variables over ``num_ps`` PS tasks: a workload
    with embedding tables (``data.layout``, ``ctr``) has its tables sharded by rows over
    all of them (`cluster_sim.ctr.TablePartitioner`, at the embedding dimension
    `cluster_sim.workloads.build_model` gives them); anything else, and any workload on
    one PS, is not sharded (None: whole variables, placed round-robin).

    >>> from cluster_sim.workloads import load
    >>> variable_partitioner(load("ctr", train_size=10, test_size=10), 2).num_shards
    2
    >>> variable_partitioner(load("teacher", train_size=10, test_size=10), 2) is None
    True
    """
    layout = getattr(data, "layout", None)
    if layout is None or num_ps < 2:
        return None
    from cluster_sim.ctr import CTR_TRAINING, TablePartitioner
    return TablePartitioner(layout, CTR_TRAINING["embedding_dim"], num_ps)


def keras_sgd(lr):
    """tf_keras's SGD training with ``lr`` (a `ksync.learning_rate.LearningRate`)."""
    import tf_keras as keras
    return keras.optimizers.SGD(keras_schedule(lr), momentum=lr.momentum)


def keras_schedule(lr):
    """``lr``'s rate as tf_keras takes it: a number, or with a warm-up a schedule of
    ``optimizer.iterations``, which counts pushes under `strategies.KSyncStrategy`, as
    the simulator counts them (both evaluate `ksync.learning_rate.LearningRate.at`).

    >>> from ksync.learning_rate import LearningRate
    >>> float(keras_schedule(LearningRate(0.4, momentum=0.5, start=0.1, warmup_pushes=10))(5))
    0.25
    """
    if not lr.warmup_pushes:
        return lr.rate
    import tensorflow as tf
    import tf_keras as keras

    class Warmup(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return lr.at(tf.cast(step, tf.float32), minimum=tf.minimum)

        def get_config(self):
            return dataclasses.asdict(lr)

    return Warmup()


def _on_point(progress):
    if progress is None:
        return None
    point = getattr(progress, "point", None)
    return point if point is not None else (lambda p: progress(p["pushes"], p["accuracy"]))


class _TrainingClock:
    """Seconds spent inside `fit` (between its train begin and end), across fits."""

    def __init__(self):
        self._train_s = 0.0  # training time before the current stretch
        self._since = None  # when the current stretch of training started

    def __call__(self) -> float:
        since = self._since
        return self._train_s + (time.monotonic() - since if since is not None else 0.0)

    def start(self):
        if self._since is None:
            self._since = time.monotonic()

    def stop(self):
        self._train_s = self()
        self._since = None


class _Stopper(keras_callbacks.Callback):
    """Runs the training clock during `fit`, keeps `fit` at most ``ahead`` steps ahead
    of the workers, and stops it when the evaluator is done or the time budget is spent.

    `fit` under a parameter-server strategy schedules steps as fast as Python runs
    (TensorFlow's closure queue holds 262,144), so ``stop_training``, checked after
    each step is scheduled, would stop nothing for thousands of steps. Waiting for the
    step ``ahead`` places back to finish keeps every worker busy (one step running, one
    queued) and makes a stop take effect within a few steps."""

    def __init__(self, clock, evaluator, config, ahead):
        super().__init__()
        # Logs stay RemoteValues: converting them would wait for every step in turn.
        self._supports_tf_logs = True
        self.clock, self.evaluator, self.config = clock, evaluator, config
        self.ahead = ahead
        self._scheduled = collections.deque()
        self.done = False
        self.lost_logs = 0  # steps whose logs died with their worker

    def on_train_begin(self, logs=None):
        self.clock.start()

    def on_train_end(self, logs=None):
        self.clock.stop()
        self._scheduled.clear()

    def on_train_batch_end(self, batch, logs=None):
        fetch = getattr(logs, "fetch", None)
        if fetch is not None:
            self._scheduled.append(fetch)
            if len(self._scheduled) > self.ahead:
                try:
                    self._scheduled.popleft()()
                except tf.errors.OpError as err:
                    if not lost_outputs(err):
                        raise
                    self.lost_logs += 1  # finished on a worker preempted since
        self.done = self.evaluator.done or self.clock() >= self.config.time_budget_s
        if self.done:
            self.model.stop_training = True


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


def _result(arm, seed, t, curve, goal, sizes_over_time, events_applied, fit_errors) -> dict:
    zero = {"wall_s": 0.0, "workers": [{"pushes": 0, "samples": 0.0, "busy_s": 0.0}
                                       for _ in t["workers"]]}
    whole = window_metrics(zero, {"wall_s": curve[-1]["wall_s"], "workers": t["workers"]})
    # The second half of the run: after warm-up, profiling and the first allocations.
    half = next(p for p in curve if p["wall_s"] >= curve[-1]["wall_s"] / 2)
    steady = window_metrics(half, curve[-1]) if half is not curve[-1] else None
    tta = curve_tta(curve, **goal)
    return RunResult(
        policy=arm.label, seed=seed, tta_s=tta["tta_s"],
        tta_accuracy_s=tta["tta_accuracy_s"], max_eval_gap=tta["max_eval_gap"],
        tta_first_s=tta["tta_first_s"],
        final_accuracy=curve[-1]["accuracy"], final_loss=curve[-1]["loss"], **goal,
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
