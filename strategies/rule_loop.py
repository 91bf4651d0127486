"""What the coordinator's threads use of a `KSyncStrategy`, without the strategy.

TensorFlow's `ClusterCoordinator` and its strategy refer to each other (a reference
cycle: only the garbage collector frees them), and dropping the coordinator is what
stops its threads (`ClusterCoordinator.__del__`). TensorFlow's own threads refer to the
cluster only, never to the strategy or the coordinator, so one ``gc.collect()`` after
the user drops them frees both and stops every thread. ksync's threads (the gate each
worker thread passes, the monitor) refresh the rule and read the PS; had they used the
strategy, any of them inside a call (a read of the PS takes milliseconds, more under
load) when the collection ran would keep the cycle alive past it, and a cycle that
survives a full collection waits for the next one, which may come minutes later: the
coordinator's threads, its failure handler and its poll of the coordination service
went on calling into the process's cluster (TensorFlow's own
``testClusterCoordinatorDestroyed`` failed 2 times in 5).

So the threads hold a `RuleLoop`, which holds what a refresh and a gate read need (the
controller, the PS state, the cluster and its guard) and nothing that refers to the
strategy or the coordinator; the strategy owns it and delegates to it. The batch
allocation is the exception: its per-worker variable refers to the coordinator, so the
loop holds it weakly and only for its own call (`set_sizes`).

Example:

```python
loop = RuleLoop(controller, ps_state, may_wait=True)
KSyncCoordinator(strategy)     # attaches loop to the cluster (`attach`), wraps its queue
loop.refresh(wait=True)        # measure, decide, write the rule to the PS
gate = loop.gate_state()       # what the gate needs, read through the guard
```
"""

import threading
import weakref

import ksync
from strategies.cluster_guard import ClusterGuard
from strategies.ps_lr_scaling import describe as describe_lr_scaling


class RuleLoop:
    """The rule's refresh and the gate's reads of one strategy (see the module doc).

    ``state`` is the PS side (`strategies.ps_state.PSUpdateState`, or anything with its
    ``counters``, ``gate_state`` and ``set_rule``); ``may_wait``: whether a worker may
    ever have to wait for the round it joined (the coordinator then runs a monitor)."""

    def __init__(self, controller, state, may_wait: bool):
        self.controller = controller
        self.state = state
        self.may_wait = may_wait
        #: held while the rule changes; hold it to read or restore a consistent state.
        self.rule_lock = threading.Lock()
        #: a traced step waits for its round in the graph (several steps per function).
        self.waits_in_graph = False
        #: latest finite training loss reported (`KSyncStrategy.report_loss`).
        self.loss = None
        #: the rule last written to the PS.
        self.ps_rule = controller.rule
        #: the PS's learning-rate scaling state at the last read of its counters.
        self.lr_last = None
        #: function graph traced through the strategy's run() -> pushes one call makes
        #: (None: no fixed count).
        self.pushes_traced = weakref.WeakKeyDictionary()
        self.guard = None      # set by `attach`
        self._cluster = None   # TensorFlow's cluster, set by `attach`
        self._allocation = None  # weak reference to the strategy's BatchAllocation

    def attach(self, cluster) -> None:
        """Use TensorFlow's ``cluster`` (the coordinator's, its closure queue already the
        gated one or about to be): every remote call goes through its `ClusterGuard`."""
        self._cluster = cluster
        self.guard = ClusterGuard(cluster)

    def allocate_with(self, allocation) -> None:
        """Give each refresh's batch sizes to ``allocation`` (held weakly: see the
        module doc)."""
        self._allocation = weakref.ref(allocation)

    # -- what the gate asks -------------------------------------------------------------
    @property
    def rule(self) -> ksync.Rule:
        """The rule the PS runs now."""
        return self.controller.rule

    def rule_capped_for_work(self) -> bool:
        """Whether K is lowered now because other workers had no steps left."""
        return self.controller.capped_for_work

    def gate_state(self) -> dict:
        """What the coordinator's gate needs, read from the PS
        (`PSUpdateState.gate_state`) through the guard."""
        return self.guard.call(self.state.gate_state)

    def pushes_per_call(self, closure) -> int | None:
        """Gradients one run of a scheduled closure pushes: 0 or 1 when its function
        was traced with no push or one push outside any loop or branch, else None (not
        known: several steps per function, a nested tf.function, a plain Python
        function)."""
        function = getattr(closure, "_concrete_function", None)
        if function is None:
            return None
        return self.pushes_traced.get(function.graph)

    # -- the cluster, as the coordinator sees it ----------------------------------------
    @property
    def _queue(self):
        return self._cluster.closure_queue

    def live_workers(self):
        """Indices of workers with no unrecovered failure."""
        # pylint: disable-next=protected-access
        return [w.worker_index for w in self._cluster.workers if not w._is_dead_with_error]

    def worker_busy(self):
        """(seconds each worker spent executing steps, steps each executed)."""
        timing = self._queue._timing  # pylint: disable=protected-access
        return list(timing.busy_s), list(timing.steps)

    def iteration_times(self):
        """(median seconds of each worker's last steps, seconds its running step has
        taken so far); None where a worker has no finished or no running step."""
        queue = self._queue
        return queue._timing.usual(), queue.in_flight_s()  # pylint: disable=W0212

    def workers_with_work(self):
        """Live workers that can still push in the current round: all of them while
        steps are queued, else those running a step (None: steps are queued)."""
        queue = self._queue
        if queue.has_queued():
            return None
        running = queue.running_workers()
        return [w for w in self.live_workers() if w in running]

    # -- the refresh ----------------------------------------------------------------------
    def lr_seen(self, counters) -> None:
        """Keep the PS's scaling state of a read of its counters (for the strategy's
        `explain`), and give the controller the base batch once the PS knows it."""
        if counters.get("lr_scaling") is None:
            return
        self.lr_last = describe_lr_scaling(counters["lr_scaling"])
        self.lr_last["updates"] = counters["version"]
        if self.controller.base_batch is None and self.lr_last["base_batch"]:
            self.controller.base_batch = self.lr_last["base_batch"]

    def refresh(self, wait: bool = False) -> bool:
        """`KSyncStrategy.refresh_rule` (its docstring says what a refresh does)."""
        if not self.rule_lock.acquire(blocking=wait):
            return False
        try:
            counters = self.guard.call(self.state.counters)
            self.lr_seen(counters)
            busy, _ = self.worker_busy()
            usual, running = self.iteration_times()
            decision = self.controller.refresh(ksync.Measurement(
                version=counters["version"], live_workers=tuple(self.live_workers()),
                iteration_times=tuple(usual), running_times=tuple(running),
                staleness_hist=tuple(counters["staleness_hist"].sum(axis=0)),
                worker_samples=tuple(counters["worker_samples"]), busy_s=tuple(busy),
                worker_pushes=tuple(counters["staleness_hist"].sum(axis=1)),
                noise_sums=tuple(counters["noise_sums"]),
                blocked_workers=self.blocked_workers(counters), loss=self.loss))
            # Compared with what the PS runs, not with the last decision: a rule the
            # controller chose while the PS could not be written (the cluster being
            # rebuilt) is written by the next refresh.
            if decision.rule != self.ps_rule:
                self.guard.call(self.state.set_rule, decision.rule)
                self.ps_rule = decision.rule
            self._allocate()
            return True
        finally:
            self.rule_lock.release()

    def _allocate(self) -> None:
        # The controller's sizes, new or not: they also reach a worker whose copy is
        # new, and sizes restored from a checkpoint. The allocation refers to the
        # coordinator: held only for this call, gone with its strategy.
        allocation = self._allocation() if self._allocation is not None else None
        if allocation is not None:
            self.guard.call(allocation.set_sizes, self.controller.sizes)

    def blocked_workers(self, counters):
        """The workers with steps left, when every one of them has joined the current
        round and some wait in the graph for a round that nobody else can complete
        (else None).

        A worker running a step of one push (``steps_per_execution=1``) does not wait
        in its graph: once it has pushed, it finishes the step and waits at the
        coordinator's gate, so nothing is blocked and K stays. No step queued is then
        no sign that the others have no work left (under load the chief schedules
        steps more slowly than workers finish them), and lowering K would let that
        worker through the gate into the round it already joined."""
        if not self.waits_in_graph:
            return None
        with_work = self.workers_with_work()
        version = counters["version"]
        if not with_work or any(counters["contributed"][w] != version for w in with_work):
            return None
        if not any(self._queue.may_wait_in_graph(w) for w in with_work):
            return None
        return tuple(with_work)


__all__ = ["RuleLoop"]
