"""`KSyncStrategy`: parameter-server training with adaptive k-sync / async updates.

A drop-in replacement for `tf.distribute.experimental.ParameterServerStrategy`: a tf_keras
script written for the stock strategy runs unchanged but for the line that creates the
strategy. A Keras 3 model (TensorFlow backend) created under its scope trains too: its
``fit`` runs through the strategy's coordinator (`strategies.keras3_fit`). Every
gradient a worker computes is pushed to the parameter server with the version it was
computed from, its sample count and the worker's iteration time; the PS
applies the policy's rule (aggregate K gradients weighted by samples, drop or down-weight
stale ones) atomically in a critical section, and for synchronous rules the coordinator
holds a worker that has contributed to the current round until the next version exists.

Example:

```python
import ksync, tf_keras as keras
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = ksync.KSyncStrategy(resolver, policy=ksync.Adaptive())
with strategy.scope():
    model = keras.Sequential([...])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
model.fit(dataset, epochs=5, steps_per_epoch=100,
          callbacks=[ksync.KSyncTelemetryCallback(strategy)])
print(strategy.telemetry()["applied"])
```

Semantics to know: a Keras "step" is one worker mini-batch (one push), as with the stock
strategy; with K-sync, K steps make one update. ``optimizer.iterations`` counts pushes;
``telemetry()["version"]`` counts updates. Gradients of a round not yet complete when
``fit`` returns stay ``pending`` and join the next round.

Optimizers (the table per optimizer: docs/optimizers.md). Under a rule of K gradients
per update, an *update* is: the round's gradients averaged, weighted by their samples,
then the optimizer's own update applied once to that average on the PS, exactly as one
process training on the round's batches concatenated (BSP: tests hold the two equal).
What the optimizer does besides the gradient goes with the update, never with each
push: tf_keras's decoupled weight decay (``weight_decay=``, AdamW, Lion, ...) runs once
per update with the optimizer's learning rate, before the update's gradients; its EMA
of the weights (``use_ema``) once per update, after every shard has applied them, so
the averages follow versions. Clipping (``clipnorm``, ``clipvalue``,
``global_clipnorm``) happens on the worker, on each pushed gradient, before the PS
aggregates. ``optimizer.iterations`` counts pushes, so what reads it (Adam's bias
correction, learning-rate schedules) sees K steps per update. Refused at the first
step, with the alternative: tf_keras's ``Nadam`` under a rule aggregating several
gradients (its schedule needs ``iterations`` to count updates), and updates made under
a condition inside the step (``ema_overwrite_frequency``). tf_keras itself refuses
``LossScaleOptimizer`` under every parameter-server strategy, the stock one included.
"""

import collections
import contextlib
import inspect
import os
import tempfile
import threading
import weakref

import tensorflow as tf
import tf_keras

import ksync
from ksync import lr_scaling as lr_scaling_rules
from strategies.ps_state import Extras, PSUpdateState
from predictor.schedule import AllocationSchedule
from strategies import keras3
from strategies.allocation import BatchAllocation
from strategies import compat
from strategies.compat import (ControlFlowFuncGraph, ParameterServerStrategyV2,
                               ParameterServerStrategyV2Extended, ShardedVariable,
                               WhileBodyFuncGraph)
from strategies.coordinator import KSyncCoordinator
from strategies.rule_loop import RuleLoop
from strategies.lr_scope import (check_scalable, current_learning_rate, family,
                                 optimizer_of, scaled_arguments, scaled_update)
from strategies.telemetry import build_telemetry

# Named, not super(): autograph may convert the method that calls it (a user's loop
# calling strategy.run from a list comprehension), and converted code has no super().
_STOCK_RUN = ParameterServerStrategyV2.run

class _KSyncExtended(ParameterServerStrategyV2Extended):
    """Collects the optimizer's per-variable updates of one step instead of applying
    them, so the strategy can push them to the PS as one atomic gradient.

    An update whose argument is a gradient joins the push. Any other update (tf_keras's
    decoupled weight decay takes no argument, its EMA takes the model variable) is an
    extra of the step (`strategies.ps_state.Extras`): the PS runs it once per model update,
    with the update's gradients, never once per pushed gradient."""

    _collecting = None  # the _Step being traced

    def _update(self, var, fn, args, kwargs, group):
        step = self._collecting
        if step is None:
            return super()._update(var, fn, args, kwargs, group)
        if tf.compat.v1.get_default_graph() is not step.graph:
            # The PS applies the step's updates when a round commits, where a condition
            # computed inside the step is not known.
            raise NotImplementedError(_CONDITIONAL_UPDATE.format(name=var.name))
        args = self._select_single_value(args)
        base, kwargs = super()._update, kwargs or {}
        # With learning-rate scaling, each update is traced in the commit with its
        # optimizer's rate times the commit's gain (`strategies.lr_scope`).
        scaling = self._container_strategy().lr_scaling
        scaled = (lambda update: update) if scaling is None else \
            (lambda update: scaled_update(update, fn))
        if args and not _is_variable(args[0]):
            if not step.updates:
                self._check_optimizer(fn)
                if scaling is not None:
                    check_scalable(fn, scaling)
                    self._container_strategy()._lr_optimizer = weakref.ref(optimizer_of(fn))
            # A sparse gradient (an Embedding's) stays sparse: on the wire, in the
            # round's aggregate and in the optimizer's update. What follows it (Keras
            # 3 passes the learning rate, scaled in a commit that scales) goes with it.
            rest = tuple(args[1:])
            step.updates.append((scaled(lambda v, g: base(
                v, fn, (g,) + scaled_arguments(fn, rest), kwargs, True)),
                                 self._unwrap(var), args[0]))
        else:
            # Variables as arguments are read on the PS when the update runs.
            extras = step.extras.after if step.updates else step.extras.before
            extras.append((scaled(lambda v: base(v, fn, args, kwargs, True)),
                           self._unwrap(var)))
        no_op = tf.no_op()
        return no_op if group else (no_op,)

    def _check_optimizer(self, fn):
        """Refuse, at the first step, an optimizer whose update cannot be made exact
        under the strategy's rule (``fn``: its update of a variable)."""
        fn = inspect.unwrap(fn)
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        optimizer = cells["self"].cell_contents if "self" in cells else None
        if isinstance(optimizer, tf_keras.optimizers.Nadam) and \
                not self._container_strategy()._direct:  # pylint: disable=protected-access
            # Its momentum schedule caches a product over `iterations`, which counts
            # pushes: K of them per update make it NaN (so in one process too).
            raise ValueError(_NADAM)

    @staticmethod
    def _unwrap(var):
        return var.get() if hasattr(var, "get") and not isinstance(var, tf.Tensor) else var

    def _create_variable(self, next_creator, **kwargs):
        by_keras3 = keras3.created_by_keras3()
        if by_keras3:
            from strategies import keras3_fit  # loads Keras 3: only for its users
            keras3_fit.install(KSyncStrategy)
        var = super()._create_variable(next_creator, **kwargs)
        if by_keras3:
            keras3.mark(var)
        return var

    @contextlib.contextmanager
    def collecting(self):
        """The updates of the step traced inside: a `_Step` of the current graph."""
        outer = self._collecting
        self._collecting = _Step(tf.compat.v1.get_default_graph(), [], Extras([], []))
        try:
            yield self._collecting
        finally:
            self._collecting = outer


class _Step(collections.namedtuple("_Step", "graph updates extras")):
    """One traced step's updates: ``updates``, the ``(apply_fn, var, grad)`` of its
    gradients, and its `Extras`, recorded in ``graph``."""


def _is_variable(value) -> bool:
    return isinstance(value, tf.Variable) or compat.is_resource_variable(value)


_NADAM = (
    "KSyncStrategy: tf_keras.optimizers.Nadam cannot run under a rule that aggregates "
    "several gradients per update: its momentum schedule assumes optimizer.iterations "
    "grows by one per update, and here it counts pushed gradients (its weights turn NaN "
    "after a few rounds). Use tf_keras.optimizers.Adam (or AdamW), "
    "tf_keras.optimizers.legacy.Nadam, or an asynchronous policy (policy='asp').")

_CONDITIONAL_UPDATE = (
    "KSyncStrategy: the optimizer updates {name} under a condition inside the training "
    "step (tf_keras's ema_overwrite_frequency, or a tf.cond around apply_gradients). "
    "The parameter server applies a step's updates when its round commits, where that "
    "condition is not known. With EMA, leave ema_overwrite_frequency=None: model.fit "
    "copies the averages into the model at the end of training "
    "(optimizer.finalize_variable_values), and an EMA callback or a custom loop can "
    "call that between epochs.")


class KSyncStrategy(ParameterServerStrategyV2):
    """A `ParameterServerStrategy` whose parameter server applies a `ksync` policy.

    Args:
      cluster_resolver: a `tf.distribute.cluster_resolver.ClusterResolver` (e.g.
        `TFConfigClusterResolver()` on a real cluster) with "ps" and "worker" jobs.
      variable_partitioner: as for the stock strategy (e.g.
        `tf.distribute.experimental.partitioners.MinSizePartitioner(max_shards=num_ps)`):
        variables are placed and sharded over the PS tasks exactly as it does.
      policy: a `ksync.Policy` or its name ("bsp", "asp", "ssp", "ksync", "kasync",
        "backup", "adaptive", "syncswitch", "ashl", "rennala", "ringmaster", "adasync");
        default `ksync.Adaptive()`. Keyword only, like every argument after the stock
        strategy's two. A policy holds only its parameters, so one instance may serve
        several strategies; each strategy's `controller` keeps its own rule history
        (`explain`, ``telemetry()["k_history"]``).
      batch_allocation: a `predictor.BatchAllocator` to give each worker its own batch
        size in proportion to its speed (the dataset_fn must then return unbatched
        examples; see `strategies.allocation`). None: the input's own batches.
      forecaster: a fitted `predictor.Forecaster` predicting each worker's speed for
        the allocation, e.g. `predictor.GRUSmoothingForecaster.default()`;
        `KSyncCheckpoint` saves it with the run.
      allocation_mode: "static" (profile, then keep the first allocation), "last"
        (re-allocate from the last measured speeds), "forecast" (the default when a
        forecaster is given) or "deadline" (each worker gets what it finishes in the
        fastest worker's time for an equal share; the global batch shrinks).
      allocate_every: updates between two allocations (R); the first allocation comes
        after this many updates at equal sizes (the profiling phase).
      lr_scaling: how far each update steps (`ksync.lr_scaling`): at every commit the
        PS applies the optimizer's update with its learning rate times a gain ``r``
        (SGD; ``sqrt(r)`` for Adam and the other adaptive optimizers), for that apply
        only. "power": ``S_0 ** (2/3)``, ``S_0`` the update's fresh samples over
        ``base_batch``; "adascale": AdaScale's gain from the gradient noise the PS
        measures, between 1 and the update's samples over ``base_batch``; "linear":
        that ratio; "sqrt": its square root; None: the rate as given (every update
        steps as one gradient would). "auto" (default): the policy's own: "power" for
        Adaptive (with ``Adaptive(loss_step=True)``, its default, the loss halves that
        gain when the step is too large), None for the fixed rules.
      base_batch: samples the optimizer's learning rate is meant for (one worker's
        batch). None (default): with batch allocation the global batch over the
        workers, else the first pushed gradient's samples.

    The rule's state (version, counters) lives on PS task 0; each variable's round
    aggregate lives beside the variable, and each shard's part of an update runs on its
    own task in parallel with the others. The version moves once every shard has
    applied the update.
    """

    def __init__(self, cluster_resolver, variable_partitioner=None, *, policy=None,
                 batch_allocation=None, forecaster=None, allocation_mode=None,
                 allocate_every: int = 20, lr_scaling=lr_scaling_rules.AUTO,
                 base_batch=None):
        if not isinstance(cluster_resolver, tf.distribute.cluster_resolver.ClusterResolver):
            raise TypeError("cluster_resolver must be a tf.distribute.cluster_resolver."
                            "ClusterResolver (e.g. TFConfigClusterResolver()), got "
                            f"{type(cluster_resolver).__name__}.")
        if variable_partitioner is not None and not callable(variable_partitioner):
            # ksync's policy used to be the second argument; the stock one is this.
            raise TypeError(
                "variable_partitioner must be a partitioner (e.g. tf.distribute."
                "experimental.partitioners.MinSizePartitioner(...)) or None, got "
                f"{type(variable_partitioner).__name__}; pass ksync's policy by keyword: "
                "KSyncStrategy(resolver, policy=ksync.BSP()).")
        # The stock strategy's own checks first, with its messages ("There must be at
        # least one ps."), then ksync's.
        ParameterServerStrategyV2._verify_args_and_config(self, cluster_resolver)
        if policy is None:
            policy = ksync.Adaptive()
        elif isinstance(policy, str):
            policy = ksync.get(policy)
        elif not isinstance(policy, ksync.Policy):
            raise TypeError(f"policy must be a ksync.Policy or a policy name, got "
                            f"{type(policy).__name__}.")
        jobs = cluster_resolver.cluster_spec().as_dict()
        num_workers = len(jobs["worker"])
        # Validate before connecting, so bad settings fail fast and without network.
        schedule = None
        if batch_allocation is not None:
            schedule = AllocationSchedule(batch_allocation, forecaster, allocation_mode)
            batch_allocation.check_feasible(num_workers)
        elif forecaster is not None or allocation_mode is not None:
            raise ValueError("forecaster and allocation_mode need batch_allocation="
                             "predictor.BatchAllocator(global_batch, ...).")
        mode = lr_scaling_rules.resolve(lr_scaling, policy)
        base_batch = _base_batch(base_batch, batch_allocation, num_workers)
        controller = ksync.RuleController(policy, num_workers, schedule, allocate_every,
                                          lr_scaling=mode, base_batch=base_batch)
        snapshot = _Snapshot(forecaster) if forecaster is not None else None
        super().__init__(cluster_resolver, variable_partitioner)
        if snapshot is not None:
            schedule.forecaster = snapshot.restore()
        self._extended.__class__ = _KSyncExtended
        #: the control loop around the policy, shared with the simulator.
        self.controller = controller
        rule = controller.rule
        self._num_worker_tasks = num_workers
        #: the learning-rate scaling each commit applies (`ksync.lr_scaling`; None: none).
        self.lr_scaling = mode
        self._state = PSUpdateState(num_workers, rule, device="/job:ps/replica:0/task:0",
                                    lr_scaling=mode, base_batch=base_batch)
        self._lr_optimizer = None  # weak reference to the optimizer the commits scale
        # Adaptive rules may reach K = 1 later, so only static K = 1 takes the short path.
        static = type(policy).observe is ksync.Policy.observe
        self._direct = rule.k == 1 and static
        # graph -> (worker, updates, extras) of its last push whose round nothing waits
        # for yet
        self._unwaited = weakref.WeakKeyDictionary()
        #: what the coordinator's threads use: the refresh, the gate's reads (they must
        #: not hold the strategy, `strategies.rule_loop`). ``may_wait``: whether a worker
        #: may ever have to wait for the round it joined.
        self.rule_loop = RuleLoop(controller, self._state, may_wait=rule.wait or not static)
        self._allocation = None
        self.coordinator = KSyncCoordinator(self)
        #: every remote call of the chief outside a step goes through it.
        self.guard = self.rule_loop.guard
        if schedule is not None:
            self._allocation = BatchAllocation(self, controller.sizes)
            self.rule_loop.allocate_with(self._allocation)
        self._ps_addresses = list(jobs["ps"])
        _LIVE.add(self)

    def scope(self):
        # Keras 3 on another backend would build and train the model here, unseen.
        keras3.guard_other_backend(KSyncStrategy)
        return super().scope()

    @property
    def refresh_every(self) -> int:
        """Steps between two refreshes by the coordinator (`refresh_rule`; 0: none due)."""
        return self.controller.refresh_every

    # -- input ----------------------------------------------------------------------------
    def distribute_datasets_from_function(self, dataset_fn, options=None):
        if self._allocation is not None:
            dataset_fn = self._allocation.wrap_dataset_fn(dataset_fn)
        return super().distribute_datasets_from_function(dataset_fn, options)

    def experimental_distribute_dataset(self, dataset, options=None):
        if self._allocation is not None:
            dataset = self._allocation.pass_dataset(dataset)
        return super().experimental_distribute_dataset(dataset, options)

    # -- the push -----------------------------------------------------------------------
    def run(self, fn, args=(), kwargs=None, options=None):
        # Autograph converts what a user's tf.function calls, this method included: the
        # user's fn keeps the caller's autograph setting, the plumbing runs unconverted
        # (autograph mangles its nested calls).
        fn = compat.convert_as_caller(fn)
        return self._run_and_push(fn, args, kwargs, options)

    @tf.autograph.experimental.do_not_convert
    def _run_and_push(self, fn, args, kwargs, options):
        ext = self._extended
        if not tf.inside_function() or ext._collecting is not None:
            return _STOCK_RUN(self, fn, args, kwargs, options)
        state = self._state
        graph = tf.compat.v1.get_default_graph()
        # An earlier step traced into this same function (a custom loop running several
        # steps per scheduled function) must have its round settled before this one
        # reads a parameter: the coordinator's gate acts only between functions.
        before = self._unwaited.pop(graph, None)
        before = [state.wait_turn(*before[:2], extras=before[2])] if before else []
        function_graph = _function_graph(graph)
        loop = self.rule_loop
        loop.pushes_traced.setdefault(function_graph, 0)
        marks = {}

        def timed_fn(*a, **kw):
            # The version is read before any parameter, in the replica's own thread, so
            # the staleness charged to the gradient is never under-counted. It stays on
            # the PS, where the push needs it: no round trip through the worker.
            with tf.control_dependencies(before):
                marks["start"] = tf.timestamp()
                marks["version"] = state.read_version()
            replica_graph = tf.compat.v1.get_default_graph()
            first = len(replica_graph.get_operations())
            outputs = fn(*a, **kw)
            _read_after(replica_graph.get_operations()[first:], marks["version"].op)
            return outputs

        with ext.collecting() as step:
            outputs = _STOCK_RUN(self, timed_fn, args, kwargs, options)
        updates, extras = step.updates, step.extras
        if updates:
            grads = [g for _, _, g in updates]
            with tf.control_dependencies(grads):
                elapsed = tf.timestamp() - marks["start"]
            worker = _current_worker()
            pushed = state.push(updates, marks["version"], _batch_size(args, kwargs),
                                elapsed, worker, direct=self._direct, extras=extras)
            once = graph is function_graph and loop.pushes_traced[function_graph] == 0
            loop.pushes_traced[function_graph] = 1 if once else None
            if loop.may_wait:
                loop.waits_in_graph = True
                if _inside_loop(graph):
                    # steps_per_execution > 1 or a user's tf.while_loop: the next
                    # iteration is the next step, so the wait goes right after the push.
                    with tf.control_dependencies([pushed]):
                        settled = state.wait_turn(worker, updates, extras=extras)
                    outputs = _after(settled, outputs)
                else:
                    self._unwaited[graph] = (worker, updates, extras)
        return outputs

    # -- policy ---------------------------------------------------------------------------
    @property
    def policy(self) -> ksync.Policy:
        """The policy this strategy was given (its parameters; the run's decisions are
        in `controller`)."""
        return self.controller.policy

    def explain(self) -> str:
        """Why the current rule runs, in one line (`ksync.RuleController.explain`), e.g.
        "K=2 async, drop beyond staleness 3 since version 40: 1 of 3 measured workers
        slower than 1.3x the fastest (...)"."""
        line = self.controller.explain()
        return line if self.rule_loop.lr_last is None else f"{line}; {self._lr_line()}"

    @property
    def rule(self) -> ksync.Rule:
        """The rule the PS runs now."""
        return self.controller.rule

    @property
    def waits_in_graph(self) -> bool:
        """Whether a traced step waits in the graph for the round it joined (several
        steps per scheduled function): then only the coordinator's monitor sees a
        worker die or stall, or the others run out of steps."""
        return self.rule_loop.waits_in_graph

    def report_loss(self, value) -> None:
        """Tell the controller the current training loss (policies that follow the loss,
        such as `ksync.AdaSync`, read it at their next observation; the others ignore
        it). `ksync.KSyncLossCallback` calls this with ``logs["loss"]``
        at each epoch's end of ``model.fit``; a custom `ClusterCoordinator` loop calls
        it itself with a loss it fetched, e.g. ``strategy.report_loss(float(
        loss_remote_value.fetch()))``. A value that is not a finite number (NaN, a
        diverged step) is ignored and the last finite one kept.

        ```python
        strategy = ksync.KSyncStrategy(resolver, policy=ksync.AdaSync(k0=1))
        for epoch in range(epochs):
            ...                               # schedule the epoch's steps, join
            strategy.report_loss(epoch_loss)  # K rises as this falls
        ```
        """
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"report_loss takes a number (the training loss), got "
                            f"{type(value).__name__}.") from None
        if value == value and value not in (float("inf"), float("-inf")):
            self.rule_loop.loss = value

    def rule_capped_for_work(self) -> bool:
        """`strategies.rule_loop.RuleLoop.rule_capped_for_work`."""
        return self.rule_loop.rule_capped_for_work()

    def refresh_rule(self, wait: bool = False) -> bool:
        """Measure, let the controller decide (`ksync.RuleController.refresh`: the
        policy's observation when due, K capped at the live workers and at the workers
        that can still push in this round, the allocation when due) and apply it.

        K drops to the workers still running a step when no step is queued and each of
        them waits in the graph for the current round: it could never complete
        otherwise (the end of an epoch with several steps per scheduled function, a
        custom loop running fewer steps than K).

        The coordinator refreshes this way as training runs (every `refresh_every`
        steps, when the set of live workers changes, and while workers wait); call it
        to refresh at once (e.g. after `report_loss` in a custom loop); safe to call from
        any thread. Returns False if another thread was refreshing (``wait``: waits for
        it instead). Raises `strategies.cluster_guard.ClusterUnavailable` while
        TensorFlow rebuilds the cluster after a worker failure (no remote call then)
        or after it stopped."""
        return self.rule_loop.refresh(wait)

    @property
    def rule_lock(self) -> threading.Lock:
        """Held while the rule changes; hold it to read or restore a consistent state."""
        return self.rule_loop.rule_lock

    def rule_restored(self) -> None:
        """The PS's copy of the rule and the controller's were restored together (a
        checkpoint): the PS runs the controller's rule."""
        self.rule_loop.ps_rule = self.controller.rule
        if self._state.lr_scaling is not None:  # its gain factor is not in checkpoints
            self._state.lr_scaling.set_factor(self.controller.rule.lr_factor)

    # -- state for checkpoints and shutdown --------------------------------------------
    def checkpoint_objects(self, model) -> dict:
        """The PS-side state to save with ``model`` (counters, rule, the round's
        aggregates of every variable shard, allocated sizes): trackable objects for a
        `tf.train.Checkpoint`. Creates the optimizer's slots and the aggregates, which
        otherwise appear with the first step, so a checkpoint taken before it restores."""
        state = self._state
        with self.scope():
            model.optimizer.build(model.trainable_variables)
            shards = [shard for v in model.trainable_variables
                      for shard in (v.variables if isinstance(v, ShardedVariable) else [v])]
            accumulators = [state.accumulator(_KSyncExtended._unwrap(v)) for v in shards]
        objects = dict(counters=state.counter_vec, rule=state.rule_vec,
                       contributed=state.contributed, worker_sums=state.worker_sums,
                       worker_last=state.worker_last, staleness=state.staleness_hist,
                       pending_samples=state.pending_samples, accumulators=accumulators)
        if state.lr_scaling is not None:  # the gains' noise sums, progress, base batch
            objects["lr_scaling"] = state.lr_scaling.variable
        return objects

    def shutdown(self) -> None:
        """Stop the coordinator's threads, e.g. after the PS died (they would keep
        retrying the dead server); the strategy cannot train afterwards."""
        self.coordinator._cluster.stop()  # pylint: disable=protected-access

    def gate_state(self) -> dict:
        """`strategies.rule_loop.RuleLoop.gate_state`."""
        return self.rule_loop.gate_state()

    def pushes_per_call(self, closure) -> int | None:
        """`strategies.rule_loop.RuleLoop.pushes_per_call`."""
        return self.rule_loop.pushes_per_call(closure)

    def telemetry(self) -> dict:
        """Counters, per-worker speed, staleness and batch size, the policy's rule over
        time and, with batch allocation, the allocation history. ``retried`` counts
        steps TensorFlow re-ran on another worker after theirs failed mid-step: a failed
        attempt that had already pushed its gradient counts in ``pushed`` (its gradient
        reached the PS once), so ``pushed - sum(steps) <= retried``."""
        busy, steps = self.coordinator.worker_busy()
        counters = self.guard.call(self._state.counters, wait=True)
        telemetry = build_telemetry(counters, self.controller, busy, steps)
        telemetry["retried"] = self.coordinator.retried()
        telemetry["lr_scaling"] = self._lr_telemetry(counters)
        telemetry["explanation"] = self.explain()
        return telemetry

    # -- learning-rate scaling ------------------------------------------------------------
    def _lr_telemetry(self, counters) -> dict:
        """``telemetry()["lr_scaling"]``: the mode, the last commit's gain, the progress
        in base steps (the applied gains' sum; the updates without scaling), and with
        scaling the base batch, the faded noise scale and warm-up weight the gains use,
        and the optimizer's learning rate as given and as the last commit applied it."""
        if self.lr_scaling is None:
            return {"mode": None, "gain": 1.0, "progress": float(counters["version"])}
        self.rule_loop.lr_seen(counters)
        info = dict(self.rule_loop.lr_last, mode=self.lr_scaling)
        optimizer = self._lr_optimizer() if self._lr_optimizer is not None else None
        if optimizer is not None:
            rate = self.guard.call(current_learning_rate, optimizer, wait=True)
            factor = lr_scaling_rules.optimizer_gain(info["gain"], family(optimizer))
            info.update(base_learning_rate=rate, optimizer_gain=factor,
                        learning_rate=rate * factor)
        return info

    def _lr_line(self) -> str:
        lr = self.rule_loop.lr_last
        noise = "" if lr["noise_scale"] is None else f", noise scale {lr['noise_scale']:.0f}"
        warmup = f", warm-up {lr['warmup']:.2f}" if self.lr_scaling == "adascale" else ""
        return (f"lr scaling {self.lr_scaling}: gain {lr['gain']:.2f} at the last commit"
                f"{warmup}{noise}; progress {lr['progress']:.0f} base steps in "
                f"{lr['updates']} updates")


#: every KSyncStrategy of this process (`shutdown_strategies_of`).
_LIVE = weakref.WeakSet()


def shutdown_strategies_of(ps_addresses) -> None:
    """`KSyncStrategy.shutdown` for every strategy of this process on the cluster whose
    PS tasks are ``ps_addresses``: to call before those servers stop, so that no
    coordinator thread goes on refreshing against servers that are gone (a warning at
    every try, after a script or a test session has ended)."""
    for strategy in list(_LIVE):
        if strategy._ps_addresses == list(ps_addresses):  # pylint: disable=protected-access
            strategy.shutdown()


class _Snapshot:
    """A forecaster's saved state, to rebuild it once the cluster is connected.

    Connecting renames the chief's local device (and drops the old context), so Keras
    variables created before it, such as those of a forecaster made just before the
    strategy, can no longer be read."""

    def __init__(self, forecaster):
        self._type = type(forecaster)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "forecaster.npz")
            forecaster.save(path)
            with open(path, "rb") as f:
                self._data = f.read()

    def restore(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "forecaster.npz")
            with open(path, "wb") as f:
                f.write(self._data)
            return self._type.load(path)


def _base_batch(base_batch, batch_allocation, num_workers):
    """The base batch of the learning-rate scaling (None: the PS takes the first
    pushed gradient's samples)."""
    if base_batch is not None:
        if isinstance(base_batch, bool) or not isinstance(base_batch, (int, float)) \
                or not base_batch > 0:
            raise ValueError(f"base_batch must be a number of samples > 0 (one worker's "
                             f"batch, the one the learning rate is meant for) or None, "
                             f"got {base_batch!r}.")
        return float(base_batch)
    if batch_allocation is not None:
        return batch_allocation.global_batch / num_workers
    return None


def _batch_size(args, kwargs):
    """Examples in the step's input: the leading dimension of its first batched tensor."""
    for leaf in tf.nest.flatten((args, kwargs or {})):
        if isinstance(leaf, (tf.Tensor, tf.RaggedTensor, tf.SparseTensor)) and \
                leaf.shape.rank not in (None, 0):
            return tf.cast(leaf.nrows() if isinstance(leaf, tf.RaggedTensor)
                           else tf.shape(leaf, out_type=tf.int64)[0], tf.float32)
    return tf.constant(1.0)  # no batched input: every push weighs the same


def _function_graph(graph):
    """The function graph ``graph`` belongs to (itself, or the one around the bodies of
    its loops and branches)."""
    while isinstance(graph, ControlFlowFuncGraph):
        graph = graph.outer_graph
    return graph


def _inside_loop(graph) -> bool:
    """Whether ``graph`` is (inside) the body of a `tf.while_loop` of one function."""
    while isinstance(graph, ControlFlowFuncGraph):
        if isinstance(graph, WhileBodyFuncGraph):
            return True
        graph = graph.outer_graph
    return False


#: ops that may read a variable through a resource input (reads, gathers, and the
#: function calls and control flow that contain them).
_READS = frozenset({"ReadVariableOp", "ResourceGather", "ResourceGatherNd", "If",
                    "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
                    "PartitionedCall", "StatefulPartitionedCall"})


def _read_after(ops, version_op):
    """Make each of ``ops`` that may read a variable wait for ``version_op``.

    Only the reads, not the whole step: a read of a parameter runs on its PS task, like
    the version's read, so the order costs no message between processes, where a
    control edge into the worker's ops costs one more round trip per step."""
    for op in ops:
        if op.type in _READS and any(t.dtype == tf.resource for t in op.inputs) \
                and version_op not in op.control_inputs:
            op._add_control_input(version_op)  # pylint: disable=protected-access


def _after(op, outputs):
    """``outputs`` (any nest) made to wait for ``op``."""
    with tf.control_dependencies([op]):
        return tf.nest.map_structure(
            lambda x: tf.identity(x) if isinstance(x, tf.Tensor) else x, outputs)


def _current_worker():
    try:
        return tf.distribute.coordinator.experimental_get_current_worker_index()
    except RuntimeError:
        return tf.constant(0, tf.int64)
