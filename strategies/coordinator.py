"""The coordinator side of k-sync: hold a worker until the round it joined has committed.

`KSyncCoordinator` is the `ClusterCoordinator` of a `KSyncStrategy` (the stock class
returns it for that strategy, so `model.fit` and user loops share it). It wraps the
closure queue its worker threads take closures from: under a rule with ``wait``, a
worker whose gradient joined the current round does not take another closure until the
PS version moves on. The wait is a Python condition in the coordinator, so it costs no
CPU on the workers and never blocks inside a TensorFlow function, where a failed
worker could leave a scheduled function hanging.

Between steps that run inside one scheduled function (``steps_per_execution > 1``, a
custom loop with several steps per function) the wait happens in the graph, on the PS
(`PSUpdateState.wait_turn`). A monitor thread then keeps the rule refreshed while every
worker is inside a function: it is what lowers K when a worker dies or stalls, or when
the others have no steps left for the round to complete.

The gate's reads and the refreshes call into the cluster through the strategy's
`strategies.cluster_guard.ClusterGuard`: while TensorFlow rebuilds the cluster after a
worker failure, a worker waits at the gate and the rule keeps its last decision (a
remote call then could crash the chief in native code); once the cluster is whole again
the gate reads as before. After shutdown or a lost PS nothing reads any more.

The threads use the strategy's `strategies.rule_loop.RuleLoop`, never the strategy or
the coordinator: as TensorFlow's own threads, they must not keep those alive, since
dropping the coordinator is what stops them (the loop's module doc says why).
"""

import logging
import threading
import time
import weakref

import tensorflow as tf

from ksync.controller import RefreshClock
from ksync.state import UpdateState
from strategies.cluster_guard import ClusterRecovering, ClusterUnavailable
from strategies.compat import ClusterCoordinator, ResourceClosure
from strategies.gate_cache import GateCache
from strategies.worker_timing import WorkerTiming

#: seconds between two refreshes by the monitor while steps run.
_MONITOR_S = 0.25


class _GatedClosureQueue:
    """Delegates to TensorFlow's closure queue; `get` first waits at the k-sync gate.

    It holds the strategy's `strategies.rule_loop.RuleLoop`, not the strategy: as
    TensorFlow's cluster, it must not keep the strategy and its coordinator alive,
    since TensorFlow's worker threads hold the cluster and so this queue, and dropping
    the coordinator is what stops them (`ClusterCoordinator.__del__`). Once the
    coordinator stopped the stock queue, the gate lets every step through to it (it
    returns None).

    Its state is in three pure classes, each tested without threads: `WorkerTiming`
    (steps and their times), `ksync.controller.RefreshClock` (when a refresh is due)
    and `GateCache` (the gate known without a read). This class adds the threads.

    Locks, in the order they may be taken (a thread holding one takes only those after
    it, never one before):

    1. ``loop.rule_lock`` (`RuleLoop.refresh`): one refresh at a time.
       Taken with neither lock below held: `_refresh` runs outside them.
    2. ``_snapshot_lock``: guards ``_cache`` and ``reads["gate"]``; held across a read
       of the PS so that threads checking together share one read.
    3. ``_changed`` (a condition): guards ``_generation``, ``_refreshes``, ``_clock``,
       ``_deferred``, ``_monitoring``, ``reads["refresh"]`` and ``_timing.retried``;
       worker threads wait on it at the gate. Nothing under it takes another lock or calls the cluster.
    4. TensorFlow's cluster update lock, taken by `ClusterGuard` around every remote
       call (the gate read under 2, the refresh under 1).

    Without a lock: each worker's entries in ``_timing`` and ``_thread_tags``, written
    only by that worker's own thread (readers copy before iterating), and
    ``_steps_scheduled``, only ever set to True (a step scheduled as it turns may pass
    the gate unchecked, as one scheduled just before it would)."""

    def __init__(self, queue, loop, num_workers):
        self._queue = queue
        self._loop = loop
        self.reads = {"gate": 0, "refresh": 0}  # the chief's reads of the PS, by purpose
        self._thread_tags = {}  # worker thread id -> worker index
        # The pure parts, each behind the lock named in the class docstring.
        self._timing = WorkerTiming(num_workers)        # steps and their times
        self._clock = RefreshClock(loop.controller)  # when a refresh is due
        self._cache = GateCache(num_workers)            # the gate known without a read
        self._snapshot_lock = threading.Lock()          # guards _cache
        self._changed = threading.Condition()           # guards the counts below, _clock
        self._generation = 0  # steps finished; a change means the gate may have opened
        self._refreshes = 0  # rule refreshes finished (each may have changed the rule)
        # Whether a step was ever scheduled: the gate acts from then on (see `get`).
        self._steps_scheduled = False
        self._deferred = None  # the live set of a refresh due before that (see `put`)
        self._monitoring = False  # whether `put` started the monitor thread

    def __getattr__(self, name):
        return getattr(self._queue, name)

    def __setattr__(self, name, value):
        # Code that reaches into the stock queue (TensorFlow's own tests bump
        # `_inflight_closure_count`) must change the stock queue's state, not a copy on
        # this wrapper: a name the stock queue has and this class does not is its.
        if "_queue" in self.__dict__ and name not in self.__dict__ and \
                name in vars(self._queue):
            setattr(self._queue, name, value)
        else:
            super().__setattr__(name, value)

    def put(self, closure, tag=None):
        if tag is None and not self._steps_scheduled:
            # The first step (a tagged closure creates a per-worker resource): the
            # refresh the worker threads' first calls made due runs now, before any
            # step, at version 0 as in the simulator; then the gate acts, and the
            # monitor starts (a coordinator never used has only the stock threads).
            with self._changed:
                live, self._deferred = self._deferred, None
                monitor, self._monitoring = not self._monitoring, True
            if live is not None:
                self._refresh(live, wait=True)
            self._steps_scheduled = True
            if monitor and self._loop.may_wait:
                # Holds this queue weakly: it ends once the cluster is gone or stopped.
                threading.Thread(target=_monitor, args=(weakref.ref(self),),
                                 name="ksync-monitor", daemon=True).start()
        return self._queue.put(closure, tag=tag)

    def put_back(self, closure):
        # TensorFlow re-queues the closure of a failed worker (from that worker's thread)
        # for another worker: the failed attempt is not a step, its time not the worker's.
        tag = self._thread_tags.get(threading.get_ident())
        with self._changed:
            self._timing.put_back(tag, closure)
        return self._queue.put_back(closure)

    # A worker thread ends a step with one of these, before the step counts as done for
    # `join`: telemetry read after `fit` returns includes every step.
    def mark_finished(self):
        self._end_step()
        return self._queue.mark_finished()

    def mark_failed(self, e):
        # An error in the step itself (not a worker failure): it ends training and is
        # not a step with a time worth counting.
        self._timing.fail(self._thread_tags.get(threading.get_ident()))
        return self._queue.mark_failed(e)

    def _end_step(self):
        tag = self._thread_tags.get(threading.get_ident())
        ended = self._timing.end(tag, time.monotonic())
        if ended is not None:
            began, closure = ended
            pushes = self._pushes_of(closure)
            with self._snapshot_lock:
                self._cache.step_ended(tag, pushes, began)

    def running_workers(self):
        """Workers running a step now."""
        return self._timing.running()

    def may_wait_in_graph(self, worker) -> bool:
        """Whether ``worker`` runs a step now whose function may wait in the graph for
        a round (several pushes, or pushes not known); a step of one push or none
        comes back to the gate instead."""
        started = self._timing.started(worker)
        return started is not None and self._pushes_of(started[1]) not in (0, 1)

    def _pushes_of(self, closure):
        """`RuleLoop.pushes_per_call` of a step's closure (None: not known, or the
        closure is gone; it is alive while its worker thread runs it)."""
        return None if closure is None else self._loop.pushes_per_call(closure)

    def has_queued(self) -> bool:
        """Whether steps are waiting for a worker to take them."""
        return not self._queue._queue.empty()

    def in_flight_s(self):
        """Seconds each worker has been running its current step (None: not running)."""
        return self._timing.in_flight_s(time.monotonic())

    def _step_finished(self, defer=False):
        """A worker thread asks for its next step: count it on the clock and refresh if
        due (``defer``: leave a due refresh to the first step scheduled, `put`)."""
        with self._changed:
            live = tuple(self._loop.live_workers())
            # The controller's clock says when a refresh is due (the simulator asks it
            # the same questions): every `refresh_every` steps, or the live set changed.
            due = self._clock.step_finished(time.monotonic(), live)
            self._generation += 1
            self._changed.notify_all()
            if due and defer:
                self._deferred = live
                return
        if due:
            self._refresh(live)

    def _refresh(self, live=None, wait=False, quiet=False):
        # An exception here would kill the coordinator's worker thread and hang training.
        seen, live, refreshed = live, None, False
        try:
            refreshed = self._loop.refresh(wait=wait)
            if refreshed:
                live = seen  # the live set this refresh has seen
        except ClusterUnavailable:
            pass  # being rebuilt (a later refresh reads) or shutting down: no call now
        except Exception as e:  # pylint: disable=broad-except
            if not self._queue._should_process_closures:
                pass  # shutting down: the PS may already be gone
            elif quiet or isinstance(e, tf.errors.OpError):
                # The PS is unreachable (the steps report that to the user) or the
                # monitor will try again in a moment: one line, no traceback.
                logging.warning("ksync: could not refresh the synchronisation rule "
                                "(%s: %s); keeping %s", type(e).__name__,
                                str(e).splitlines()[0] if str(e) else "",
                                self._loop.rule.describe())
            else:
                logging.exception("ksync: could not refresh the synchronisation rule; "
                                  "keeping %s", self._loop.rule.describe())
        with self._changed:
            # A new rule (e.g. K lowered to the live workers) may open the gate.
            self._clock.refreshed(live, now=time.monotonic())
            self.reads["refresh"] += int(refreshed)
            self._generation += 1
            self._refreshes += 1
            self._changed.notify_all()

    def _gate_snapshot(self, seen):
        """The PS's gate state (`PSUpdateState.gate_state`) read no earlier than step
        generation ``seen``.

        Every push completes before its worker thread bumps the generation, so a read
        started at generation >= ``seen`` reflects every push this thread knows of;
        threads checking together share one read instead of one PS call each."""
        with self._snapshot_lock:
            if not self._cache.fresh(seen):
                with self._changed:
                    started, refreshes = self._generation, self._refreshes
                pushes = self._cache.begin_read()
                gate = self._loop.gate_state()
                self.reads["gate"] += 1
                self._cache.record_read(started, pushes, gate, time.monotonic(), refreshes)
            return self._cache.snapshot.gate

    def _free_since_read(self, worker) -> bool:
        """`GateCache.free_since_read`."""
        with self._snapshot_lock:
            return self._cache.free_since_read(worker)

    def _surely_waits(self, worker) -> bool:
        """`GateCache.surely_waits` under the rule the chief runs."""
        k = self._loop.rule.k
        with self._snapshot_lock:
            return self._cache.surely_waits(worker, k)

    def _counted_free(self, worker) -> bool:
        """`GateCache.counted_free` under the rule the chief runs."""
        rule = self._loop.rule
        live = len(self._loop.live_workers())
        with self._snapshot_lock:
            with self._changed:
                generation, refreshes = self._generation, self._refreshes
            return self._cache.counted_free(
                worker, wait=rule.wait, k=rule.k, live=live, generation=generation,
                refreshes=refreshes, now=time.monotonic())

    def _may_start(self, worker, seen, read=False):
        queue = self._queue
        if not queue._should_process_closures or not queue._tagged_queue[worker].empty():
            return True  # stopping, or a per-worker resource closure (e.g. an iterator)
        if not self._loop.rule.wait:
            return True
        if not read:
            if self._surely_waits(worker):
                return False
            if self._counted_free(worker):
                return True
        try:
            gate = self._gate_snapshot(seen)
        except ClusterRecovering:
            # TensorFlow is rebuilding the cluster after a worker failure: no read now.
            # A worker the last read found free that has pushed nothing since is still
            # free (only its own push puts it into a round): it goes on, as under the
            # stock strategy (its steps may push nothing at all, and the rebuild may
            # wait for a worker restarted only once they are done). Any other waits,
            # and the gate reads once the cluster is whole again.
            return self._free_since_read(worker)
        except Exception:  # pylint: disable=broad-except
            # Shutting down, a PS lost or unreachable: let the closure run, so
            # TensorFlow's own failure handling (retry, or report to the user) sees the
            # error instead of a silent wait.
            return True
        # The one gate (`ksync.UpdateState.gate_opens`, which the simulator uses too) on
        # what the PS says. A round that holds K gradients but has not committed is
        # committed by a step waiting in the graph (`wait_turn`); K lowered for the
        # workers with steps left is only ever for such steps.
        return UpdateState.gate_opens(
            wait=True, k=int(gate["k"]), version=int(gate["version"]),
            pending=int(gate["pending"]), joined=int(gate["contributed"][worker]),
            commits_in_graph=lambda: self._loop.rule_capped_for_work() or any(
                self.may_wait_in_graph(w) for w in self.running_workers()))

    def get(self, timeout=None, tag=None):
        if tag is not None:
            self._thread_tags[threading.get_ident()] = tag
            # Before any step was scheduled nobody has pushed, so no round can hold
            # this worker's gradient: it goes on as under the stock strategy, with no
            # read of the PS; its call counts on the refresh clock, and a refresh that
            # makes due waits for the first step scheduled (`put`). A coordinator made
            # and dropped unused (TensorFlow's testClusterCoordinatorDestroyed) then
            # has threads as quiet as the stock ones. Work in them as it was dropped
            # could keep it alive past the user's `gc.collect()`: a collection their
            # allocations set off, still running in that thread, makes the user's
            # return at once.
            if self._steps_scheduled:
                self._wait_at_gate(tag)
            else:
                self._step_finished(defer=True)
        closure = self._queue.get(timeout=timeout, tag=tag)
        if tag is not None and closure is not None and not isinstance(
                closure, ResourceClosure):
            self._timing.start(tag, time.monotonic(), closure)
            if self._loop.rule_capped_for_work():
                # K was lowered because the other workers had no steps left; steps
                # arrive again, so K goes back up before this one pushes.
                self._refresh(wait=True)
        return closure

    def _wait_at_gate(self, tag):
        """Returns once worker ``tag`` may take its next step (`_may_start`)."""
        self._step_finished()
        notified = True
        while True:
            with self._changed:
                seen = self._generation
            if self._may_start(tag, seen, read=not notified):
                break
            with self._changed:
                # A step that finished during the check may have opened the gate.
                # Also a re-check every `idle_s`, in case a notification is missed.
                notified = self._changed.wait_for(lambda: self._generation != seen,
                                                  self._clock.idle_s)
                idle = not notified and self._clock.idle_due(time.monotonic(),
                                                             self.has_queued())
            if not notified:
                if not idle:
                    # No step to let through: nothing to decide, and nothing to
                    # read. An idle gate polling the PS kept a coordinator nobody
                    # uses any more calling into the process's cluster.
                    notified = True  # the next check reads only if a step ended
                    continue
                # Nothing finished for a while (`ksync.controller.RefreshClock`): a
                # worker may have died, and K may have to follow the live workers for
                # the round to complete; the next check reads the PS, whatever the
                # counts guess.
                self._refresh()

    def monitor(self):
        """One monitor tick: refresh the rule while steps run (see the module doc)."""
        if self._loop.waits_in_graph and (self._timing.running() or self.has_queued()):
            self._refresh(quiet=True)


def _monitor(queue_ref):
    while True:
        time.sleep(_MONITOR_S)
        queue = queue_ref()
        if queue is None or not queue._queue._should_process_closures:
            return
        queue.monitor()
        del queue


class KSyncCoordinator(ClusterCoordinator):
    """`ClusterCoordinator` whose workers respect the strategy's synchronisation rule."""

    def __init__(self, strategy):
        initialised = getattr(self, "_has_initialized", False)
        super().__init__(strategy)
        if not initialised:
            # Everything the threads below use (see the module doc).
            self._loop = loop = strategy.rule_loop
            loop.attach(self._cluster)
            self._cluster.closure_queue = _GatedClosureQueue(
                self._cluster.closure_queue, loop, len(self._cluster.workers))

    def worker_busy(self):
        """`RuleLoop.worker_busy`."""
        return self._loop.worker_busy()

    def iteration_times(self):
        """`RuleLoop.iteration_times`."""
        return self._loop.iteration_times()

    def chief_reads(self) -> dict:
        """Reads of the PS the chief made so far besides the steps, by purpose: "gate"
        (whether a worker may start its next step) and "refresh" (the counters read to
        refresh the rule)."""
        return dict(self._cluster.closure_queue.reads)

    def retried(self) -> int:
        """Steps re-run on another worker because their worker failed mid-step."""
        return self._cluster.closure_queue._timing.retried

    def workers_with_work(self):
        """`RuleLoop.workers_with_work`."""
        return self._loop.workers_with_work()

    def may_wait_in_graph(self, worker) -> bool:
        """Whether ``worker`` runs a step that may wait in the graph for its round
        (`_GatedClosureQueue.may_wait_in_graph`)."""
        return self._cluster.closure_queue.may_wait_in_graph(worker)

    def live_workers(self):
        """`RuleLoop.live_workers`."""
        return self._loop.live_workers()
