"""`KSyncStrategy`: parameter-server training with adaptive k-sync / async updates.

A drop-in replacement for `tf.distribute.experimental.ParameterServerStrategy`: a tf_keras
script written for the stock strategy runs unchanged but for the line that creates the
strategy. Every gradient a worker computes is pushed to the parameter server with the
version it was computed from, its sample count and the worker's iteration time; the PS
applies the policy's rule (aggregate K gradients weighted by samples, drop or down-weight
stale ones) atomically in a critical section, and for synchronous rules the coordinator
holds a worker that has contributed to the current round until the next version exists.

Example:

```python
import ksync, strategies, tf_keras as keras
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = strategies.KSyncStrategy(resolver, policy=ksync.Adaptive())
with strategy.scope():
    model = keras.Sequential([...])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
model.fit(dataset, epochs=5, steps_per_epoch=100,
          callbacks=[strategies.KSyncTelemetryCallback(strategy)])
print(strategy.telemetry()["applied"])
```

Semantics to know: a Keras "step" is one worker mini-batch (one push), as with the stock
strategy; with K-sync, K steps make one update. ``optimizer.iterations`` counts pushes;
``telemetry()["version"]`` counts updates. Gradients of a round not yet complete when
``fit`` returns stay ``pending`` and join the next round.
"""

import contextlib
import dataclasses
import os
import sys
import tempfile
import threading

import tensorflow as tf
from tensorflow.python.autograph.core import ag_ctx as autograph_ctx
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.distribute import parameter_server_strategy_v2 as pss_v2

import ksync
from ksync.tf_state import PSUpdateState
from predictor.schedule import AllocationSchedule
from strategies.allocation import BatchAllocation
from strategies.compat import check_tensorflow_version
from strategies.coordinator import KSyncCoordinator
from strategies.telemetry import build_telemetry, staleness_quantile

check_tensorflow_version()

_KERAS3_HINT = ("KSyncStrategy (like TensorFlow's parameter-server training) works with "
                "tf_keras, not Keras 3: `pip install tf-keras` and use `import tf_keras as "
                "keras`, or set TF_USE_LEGACY_KERAS=1 before importing TensorFlow.")


def _created_by_keras3() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "keras" or module.startswith("keras."):
            return True
        frame = frame.f_back
    return False


class _KSyncExtended(pss_v2.ParameterServerStrategyV2Extended):
    """Collects the optimizer's per-variable updates of one step instead of applying
    them, so the strategy can push them to the PS as one atomic gradient."""

    _collecting = None  # list of (apply_fn, var, grad) while a step is traced

    def _update(self, var, fn, args, kwargs, group):
        if self._collecting is None:
            return super()._update(var, fn, args, kwargs, group)
        (grad,) = self._select_single_value(args)
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        base = super()._update
        kwargs = kwargs or {}

        def apply_fn(v, g):
            return base(v, fn, (g,), kwargs, True)

        self._collecting.append((apply_fn, self._unwrap(var), grad))
        no_op = tf.no_op()
        return no_op if group else (no_op,)

    @staticmethod
    def _unwrap(var):
        return var.get() if hasattr(var, "get") and not isinstance(var, tf.Tensor) else var

    def _create_variable(self, next_creator, **kwargs):
        if _created_by_keras3():
            raise TypeError(_KERAS3_HINT)
        return super()._create_variable(next_creator, **kwargs)

    @contextlib.contextmanager
    def collecting(self):
        outer, self._collecting = self._collecting, []
        try:
            yield self._collecting
        finally:
            self._collecting = outer


class KSyncStrategy(pss_v2.ParameterServerStrategyV2):
    """A `ParameterServerStrategy` whose parameter server applies a `ksync` policy.

    Args:
      cluster_resolver: a `tf.distribute.cluster_resolver.ClusterResolver` (e.g.
        `TFConfigClusterResolver()` on a real cluster) with "ps" and "worker" jobs.
      policy: a `ksync.Policy` or its name ("bsp", "asp", "ssp", "ksync", "kasync",
        "backup", "adaptive"); default `ksync.Adaptive()`.
      variable_partitioner: as for the stock strategy (only with one PS task).
      batch_allocation: a `predictor.BatchAllocator` to give each worker its own batch
        size in proportion to its speed (the dataset_fn must then return unbatched
        examples; see `strategies.allocation`). None: the input's own batches.
      forecaster: a fitted `predictor.Forecaster` predicting each worker's speed for
        the allocation, e.g. `predictor.GRUSmoothingForecaster.default()`. The strategy
        trains its own copy online (connecting to the cluster invalidates Keras
        variables made before it); `KSyncCheckpoint` saves that copy.
      allocation_mode: "static" (profile, then keep the first allocation), "last"
        (re-allocate from the last measured speeds), "forecast" (the default when a
        forecaster is given) or "deadline" (each worker gets what it finishes in the
        fastest worker's time for an equal share; the global batch shrinks).
      allocate_every: updates between two allocations (R); the first allocation comes
        after this many updates at equal sizes (the profiling phase).
    """

    def __init__(self, cluster_resolver, policy=None, variable_partitioner=None,
                 batch_allocation=None, forecaster=None, allocation_mode=None,
                 allocate_every: int = 20):
        if not isinstance(cluster_resolver, tf.distribute.cluster_resolver.ClusterResolver):
            raise TypeError("cluster_resolver must be a tf.distribute.cluster_resolver."
                            "ClusterResolver (e.g. TFConfigClusterResolver()), got "
                            f"{type(cluster_resolver).__name__}.")
        if policy is None:
            policy = ksync.Adaptive()
        elif isinstance(policy, str):
            policy = ksync.get(policy)
        elif not isinstance(policy, ksync.Policy):
            raise TypeError(f"policy must be a ksync.Policy or a policy name, got "
                            f"{type(policy).__name__}.")
        spec = cluster_resolver.cluster_spec().as_dict()
        num_ps = len(spec.get("ps", []))
        num_workers = len(spec.get("worker", []))
        if num_ps != 1:
            raise ValueError(f"KSyncStrategy needs exactly one 'ps' task (it serialises "
                             f"updates on it); the cluster has {num_ps}.")
        # Validate before connecting, so bad settings fail fast and without network.
        rule = policy.rule(num_workers)
        schedule = None
        if batch_allocation is not None:
            if not isinstance(allocate_every, int) or allocate_every < 1:
                raise ValueError(f"allocate_every must be an integer >= 1, got "
                                 f"{allocate_every!r}.")
            schedule = AllocationSchedule(batch_allocation, forecaster, allocation_mode)
            batch_allocation.check_feasible(num_workers)
        elif forecaster is not None or allocation_mode is not None:
            raise ValueError("forecaster and allocation_mode need batch_allocation="
                             "predictor.BatchAllocator(global_batch, ...).")
        snapshot = _Snapshot(forecaster) if forecaster is not None else None
        super().__init__(cluster_resolver, variable_partitioner)
        if snapshot is not None:
            schedule.forecaster = snapshot.restore()
        self._extended.__class__ = _KSyncExtended
        self._policy = policy
        self._policy_rule = rule  # what the policy asks for; _rule is what runs
        self._rule = rule
        self._num_worker_tasks = num_workers
        self._state = PSUpdateState(num_workers, rule, device="/job:ps/replica:0/task:0")
        # Adaptive rules may reach K = 1 later, so only static K = 1 takes the short path.
        self._direct = rule.k == 1 and type(policy).observe is ksync.Policy.observe
        self._rule_lock = threading.Lock()
        self._observed = None  # (counters, busy seconds, steps) at the last observation
        self._allocated = None  # the same at the last allocation
        self._allocate_every = allocate_every
        self.coordinator = KSyncCoordinator(self)
        self._allocation = None
        if schedule is not None:
            self._allocation = BatchAllocation(self, schedule, num_workers,
                                               "/job:ps/replica:0/task:0")

    @property
    def refresh_every(self) -> int:
        """Steps between two `refresh_rule` calls by the coordinator (0: none due)."""
        periods = [p for p in (self._policy.refresh_every,
                               self._allocate_every if self._allocation else 0) if p]
        return min(periods) if periods else 0

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
        fn = autograph.tf_convert(fn, autograph_ctx.control_status_ctx(),
                                  convert_by_default=False)
        return self._run_and_push(fn, args, kwargs, options)

    @tf.autograph.experimental.do_not_convert
    def _run_and_push(self, fn, args, kwargs, options):
        ext = self._extended
        if not tf.inside_function() or ext._collecting is not None:
            return super().run(fn, args, kwargs, options)
        state = self._state
        marks = {}

        def timed_fn(*a, **kw):
            # The version is read before any parameter, in the replica's own thread, so
            # the staleness charged to the gradient is never under-counted.
            marks["start"] = tf.timestamp()
            with tf.control_dependencies([marks["start"]]):
                marks["version"] = state.version
            with tf.control_dependencies([marks["version"]]):
                return fn(*a, **kw)

        with ext.collecting() as updates:
            outputs = super().run(timed_fn, args, kwargs, options)
        if updates:
            grads = [g for _, _, g in updates]
            with tf.control_dependencies(grads):
                elapsed = tf.timestamp() - marks["start"]
            worker = _current_worker()
            state.push(updates, marks["version"], _batch_size(args, kwargs), elapsed,
                       worker, direct=self._direct)
            if self._allocation is not None:
                self._allocation.sync_local(worker)
        return outputs

    # -- policy ---------------------------------------------------------------------------
    @property
    def policy(self) -> ksync.Policy:
        return self._policy

    @property
    def rule(self) -> ksync.Rule:
        return self._rule

    def _set_rule(self, rule: ksync.Rule) -> None:
        self._state.set_rule(rule)
        self._rule = rule

    def _live_workers(self):
        return self.coordinator.live_workers()

    def refresh_rule(self) -> bool:
        """Give the policy the measurements since its last observation, cap K at the
        live workers and apply the resulting rule; re-allocate batch sizes when due.

        Called by the coordinator as training runs (every `refresh_every` steps, when
        the set of live workers changes, and while workers wait in vain); safe to call
        from any thread. Returns False if another thread was refreshing."""
        if not self._rule_lock.acquire(blocking=False):
            return False
        try:
            now = (self._state.counters(), *self.coordinator.worker_busy())
            live = tuple(self._live_workers())
            version = now[0]["version"]
            if self._observed is None:
                self._observed = now
            elif self._policy.refresh_every and (
                    version - self._observed[0]["version"] >= self._policy.refresh_every
                    or self.coordinator.stalled()):
                proposed = self._policy.observe(_observation(
                    self._observed[0], now[0], *self.coordinator.iteration_times(), live))
                if proposed is not None:
                    self._policy_rule = proposed
                self._observed = now
            rule = self._policy_rule
            if rule.k > len(live) > 0:
                # A K the live workers cannot reach would stall every round.
                rule = dataclasses.replace(rule, k=len(live))
            if rule != self._rule:
                if rule != self._policy_rule:
                    reason = f"K capped at the {len(live)} live worker(s)"
                else:
                    reason = "policy rule restored with all its workers live"
                self._policy.record(version, rule, reason)
                self._set_rule(rule)
            if self._allocation is not None:
                self._maybe_allocate(now)
            return True
        finally:
            self._rule_lock.release()

    def _maybe_allocate(self, now):
        if self._allocated is None:
            self._allocated = now
            return
        if now[0]["version"] - self._allocated[0]["version"] < self._allocate_every:
            return
        samples = now[0]["worker_samples"] - self._allocated[0]["worker_samples"]
        busy = [b - a for a, b in zip(self._allocated[1], now[1])]
        speeds = [s / t if t > 0 and s > 0 else None for s, t in zip(samples, busy)]
        sizes = self._allocation.schedule.observe(now[0]["version"], speeds)
        if sizes is not None:
            self._allocation.set_sizes(sizes)
        self._allocated = now

    def telemetry(self) -> dict:
        """Counters, per-worker speed, staleness and batch size, the policy's rule over
        time and, with batch allocation, the allocation history. ``retried`` counts
        steps TensorFlow re-ran on another worker after theirs failed mid-step: a failed
        attempt that had already pushed its gradient counts in ``pushed`` (its gradient
        reached the PS once), so ``pushed - sum(steps) <= retried``."""
        busy, steps = self.coordinator.worker_busy()
        schedule = self._allocation.schedule if self._allocation else None
        telemetry = build_telemetry(self._state.counters(), self._policy, self._rule,
                                    busy, steps, schedule)
        telemetry["retried"] = self.coordinator.retried()
        return telemetry


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


def _observation(before, counters, iteration_times, running_times, live):
    """What the policy sees: the PS version, each worker's recent and running step
    times, and the staleness of the pushes since the ``before`` counters."""
    hist = counters["staleness_hist"].sum(axis=0) - before["staleness_hist"].sum(axis=0)
    return ksync.Observation(version=int(counters["version"]),
                             iteration_times=tuple(iteration_times), live_workers=live,
                             staleness_p95=staleness_quantile(hist, 0.95),
                             running_times=tuple(running_times))


def _batch_size(args, kwargs):
    """Examples in the step's input: the leading dimension of its first batched tensor."""
    for leaf in tf.nest.flatten((args, kwargs or {})):
        if isinstance(leaf, (tf.Tensor, tf.RaggedTensor, tf.SparseTensor)) and \
                leaf.shape.rank not in (None, 0):
            return tf.cast(leaf.nrows() if isinstance(leaf, tf.RaggedTensor)
                           else tf.shape(leaf, out_type=tf.int64)[0], tf.float32)
    return tf.constant(1.0)  # no batched input: every push weighs the same


def _current_worker():
    try:
        return tf.distribute.coordinator.experimental_get_current_worker_index()
    except RuntimeError:
        return tf.constant(0, tf.int64)
