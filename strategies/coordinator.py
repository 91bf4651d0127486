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
"""

import collections
import logging
import statistics
import threading
import time
import weakref

from tensorflow.python.distribute.coordinator import cluster_coordinator as cc
from tensorflow.python.framework import errors as tf_errors

from ksync.controller import RefreshClock
from ksync.policies import RECENT_STEPS
from ksync.state import UpdateState
from strategies.cluster_guard import ClusterRecovering, ClusterStopped, ClusterUnavailable

#: seconds between two refreshes by the monitor while steps run.
_MONITOR_S = 0.25
#: rounds the gate may follow by counting pushes before it reads the PS again. A
#: gradient the PS dropped (non-finite) makes a counted commit wrong; the next read
#: finds that out, so this bounds the rounds such a guess can stay wrong.
_COUNTED_ROUNDS = 8


class _Snapshot(collections.namedtuple(
        "_Snapshot", "generation pushes gate read_end refreshes counted")):
    """The gate as last known: ``gate`` (`PSUpdateState.gate_state`) as read at step
    ``generation`` with ``pushes`` pushes counted, the read ending at monotonic time
    ``read_end``, after ``refreshes`` rule refreshes, and moved on by ``counted`` rounds
    counted since that read (`_GatedClosureQueue._counted_free`)."""

    def let_through(self, push) -> bool:
        """Whether ``push`` (a worker's last push: pushes counted after it, when its
        step began) came after this snapshot from a step begun after it."""
        return push is not None and push[0] > self.pushes and push[1] >= self.read_end


class _StrategyGone(ClusterStopped):
    """The strategy this queue gates for was dropped by its user."""


class _GatedClosureQueue:
    """Delegates to TensorFlow's closure queue; `get` first waits at the k-sync gate.

    It holds its strategy weakly, as TensorFlow's cluster does not hold the strategy at
    all: TensorFlow's worker threads hold the cluster and so this queue, and a strong
    reference would keep the strategy and its coordinator alive as long as those
    threads run, while dropping the coordinator is what stops them
    (`ClusterCoordinator.__del__`). Kept alive, every strategy a process ever made kept
    its threads, its failure handler and the handler's poller of the coordination
    service calling into the process's eager context, whichever cluster that was
    connected to then. Once the strategy is gone the gate lets every step through to
    the stock queue (which returns None once the coordinator stopped it)."""

    def __init__(self, queue, strategy, num_workers):
        self._queue = queue
        self._strategy_ref = weakref.ref(strategy)
        # Wall time each worker spent executing closures (input, compute, push): the
        # iteration time policies and the batch allocator see, slowdowns included.
        self.busy_s = [0.0] * num_workers
        self.steps = [0] * num_workers
        self.recent = [collections.deque(maxlen=RECENT_STEPS) for _ in range(num_workers)]
        self.retried = 0  # closures put back after a worker failed while running them
        self.reads = {"gate": 0, "refresh": 0}  # the chief's reads of the PS, by purpose
        # worker -> (start time, weak reference to the closure) of the step it is running:
        # weak, as TensorFlow drops a closure once processed (a closure held here, e.g.
        # one cancelled after its worker failed, would hold its function and through it
        # the strategy and coordinator, whose destructor stops the threads).
        self._started = {}
        self._thread_tags = {}  # worker thread id -> worker index
        self._changed = threading.Condition()
        self._generation = 0  # steps finished; a change means the gate may have opened
        # When a refresh is due (finished steps, live-set change, idle time).
        self._clock = RefreshClock(strategy.controller)
        self._refreshes = 0  # rule refreshes finished (each may have changed the rule)
        self._snapshot_lock = threading.Lock()
        self._snapshot = None  # a _Snapshot
        # Pushes of finished steps, counted where the step's function is known to push
        # exactly once (`KSyncStrategy.pushes_per_call`); `None` once a step whose
        # pushes are not known has finished since.
        self._pushes = 0
        # Each worker's last push: (self._pushes after it, when the step of it began).
        self._last_push = [None] * num_workers

    @property
    def _strategy(self):
        strategy = self._strategy_ref()
        if strategy is None:
            raise _StrategyGone("the strategy was dropped")
        return strategy

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

    def put_back(self, closure):
        # TensorFlow re-queues the closure of a failed worker (from that worker's thread)
        # for another worker: the failed attempt is not a step, its time not the worker's.
        tag = self._thread_tags.get(threading.get_ident())
        started = self._started.get(tag)
        if started is not None and started[1]() is closure:
            del self._started[tag]
            with self._changed:
                self.retried += 1
        return self._queue.put_back(closure)

    # A worker thread ends a step with one of these, before the step counts as done for
    # `join`: telemetry read after `fit` returns includes every step.
    def mark_finished(self):
        try:
            self._end_step()
        except _StrategyGone:
            pass
        return self._queue.mark_finished()

    def mark_failed(self, e):
        # An error in the step itself (not a worker failure): it ends training and is
        # not a step with a time worth counting.
        self._started.pop(self._thread_tags.get(threading.get_ident()), None)
        return self._queue.mark_failed(e)

    def _end_step(self):
        tag = self._thread_tags.get(threading.get_ident())
        started = self._started.pop(tag, None)
        if started is not None:
            elapsed = time.monotonic() - started[0]
            self.busy_s[tag] += elapsed
            self.steps[tag] += 1
            self.recent[tag].append(elapsed)
            pushes = self._pushes_of(started)
            with self._snapshot_lock:
                if pushes == 1 and self._pushes is not None:
                    self._pushes += 1
                    self._last_push[tag] = (self._pushes, started[0])
                elif pushes != 0:
                    self._pushes = None  # unknown from now on: every check reads
                    self._last_push[tag] = None

    def running_workers(self):
        """Workers running a step now."""
        return set(self._started)

    def may_wait_in_graph(self, worker) -> bool:
        """Whether ``worker`` runs a step now whose function may wait in the graph for
        a round (several pushes, or pushes not known); a step of one push or none
        comes back to the gate instead."""
        started = self._started.get(worker)
        return started is not None and self._pushes_of(started) not in (0, 1)

    def _pushes_of(self, started):
        """`KSyncStrategy.pushes_per_call` of a running step (None: not known)."""
        closure = started[1]()  # alive while its worker thread runs it
        return None if closure is None else self._strategy.pushes_per_call(closure)

    def has_queued(self) -> bool:
        """Whether steps are waiting for a worker to take them."""
        return not self._queue._queue.empty()

    def in_flight_s(self):
        """Seconds each worker has been running its current step (None: not running)."""
        now = time.monotonic()
        started = dict(self._started)
        return [now - started[w][0] if w in started else None for w in range(len(self.steps))]

    def _step_finished(self):
        strategy = self._strategy
        with self._changed:
            coordinator = getattr(strategy, "coordinator", None)
            live = tuple(coordinator.live_workers()) if coordinator else None
            # The controller's clock says when a refresh is due (the simulator asks it
            # the same questions): every `refresh_every` steps, or the live set changed.
            due = self._clock.step_finished(time.monotonic(), live)
            self._generation += 1
            self._changed.notify_all()
        if due:
            self._refresh(live)

    def _refresh(self, live=None, wait=False, quiet=False):
        # An exception here would kill the coordinator's worker thread and hang training.
        seen, live = live, None  # the live set a refresh made here has seen
        try:
            refreshed = self._strategy.refresh_rule(wait=wait)
            if refreshed:
                self.reads["refresh"] += 1
                live = seen
        except _StrategyGone:
            raise
        except ClusterUnavailable:
            pass  # being rebuilt (a later refresh reads) or shutting down: no call now
        except Exception as e:  # pylint: disable=broad-except
            if not self._queue._should_process_closures:
                pass  # shutting down: the PS may already be gone
            elif quiet or isinstance(e, tf_errors.OpError):
                # The PS is unreachable (the steps report that to the user) or the
                # monitor will try again in a moment: one line, no traceback.
                logging.warning("ksync: could not refresh the synchronisation rule "
                                "(%s: %s); keeping %s", type(e).__name__,
                                str(e).splitlines()[0] if str(e) else "",
                                self._strategy.rule.describe())
            else:
                logging.exception("ksync: could not refresh the synchronisation rule; "
                                  "keeping %s", self._strategy.rule.describe())
        with self._changed:
            # A new rule (e.g. K lowered to the live workers) may open the gate.
            self._clock.refreshed(live, now=time.monotonic())
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
            if self._snapshot is None or self._snapshot.generation < seen:
                with self._changed:
                    started, refreshes = self._generation, self._refreshes
                if self._pushes is None:
                    # This read sees every push of the steps finished so far.
                    self._pushes, self._last_push = 0, [None] * len(self._last_push)
                pushes = self._pushes
                gate = self._strategy.gate_state()
                self.reads["gate"] += 1
                self._snapshot = _Snapshot(started, pushes, gate, time.monotonic(),
                                           refreshes, 0)
            return self._snapshot.gate

    def _free_since_read(self, worker) -> bool:
        """Whether ``worker`` may start, known without reading the PS: the last read
        found it outside the open round and it has pushed nothing since."""
        with self._snapshot_lock:
            snapshot = self._snapshot
            if snapshot is None or self._pushes is None:
                return False
            gate, mine = snapshot.gate, self._last_push[worker]
            return int(gate["contributed"][worker]) != int(gate["version"]) and \
                (mine is None or mine[0] <= snapshot.pushes)

    def _surely_waits(self, worker) -> bool:
        """Whether ``worker`` must wait, known without reading the PS: its last step
        began after the last read and pushed one gradient, and the pushes since that
        read cannot have filled the round open then (pending + pushes since < K), so
        its gradient was computed at that round's version and joined it (with
        `_counted_free`, a read in several rounds under BSP instead of one a step). A
        step that began before the read may have computed a gradient the round's commit made stale, which the
        PS dropped: its worker is free to start, and guessing "wait" would idle it
        until some other step ends, out of phase with the rounds (seen on 8 workers
        under K-sync: a fast worker whose gradients kept arriving just after the round
        closed, its place taken by a slower one). A gradient the PS dropped as
        non-finite makes the guess wrong until the next push or refresh reads."""
        with self._snapshot_lock:
            if self._snapshot is None or self._pushes is None:
                return False
            snapshot = self._snapshot
            if snapshot.gate["complete"] or not snapshot.let_through(self._last_push[worker]):
                return False
            return snapshot.gate["pending"] + (self._pushes - snapshot.pushes) < \
                self._strategy.rule.k

    def _counted_free(self, worker) -> bool:
        """Whether ``worker`` may start, known by counting pushes instead of reading
        the PS: the round its last gradient joined has surely committed.

        Under a rule that waits with K equal to the number of workers (BSP), a round
        commits exactly when each worker has pushed into it once. Every step begun after
        the last snapshot was let through by it, so it computed its gradient at the
        snapshot's version, which cannot move on before all of them have pushed: once
        each worker not in the round at the snapshot has pushed from such a step, the
        round has committed, and the snapshot moves on to the next round ("counted")
        with no read. A worker whose last push came before a counted snapshot joined a
        round that has committed. Under BSP this leaves one read of the PS in
        ``_COUNTED_ROUNDS + 1`` rounds, and one after each refresh (it may change the
        rule). A gradient the PS dropped as non-finite makes the count wrong: its round
        has not committed, and a worker let through pushes a second gradient into it
        (fresh, computed at the round's version; the round commits with it), the others'
        next gradients arrive stale and are dropped. The next read puts the gate right
        and shows the PS has dropped a non-finite gradient: from then on the gate reads
        every round (a worker that made one may make more)."""
        strategy = self._strategy
        rule, n = strategy.rule, len(self.steps)
        with self._snapshot_lock:
            snapshot, mine = self._snapshot, self._last_push[worker]
            if snapshot is None or self._pushes is None:
                return False
            if snapshot.counted and mine is not None and mine[0] <= snapshot.pushes:
                return True
            coordinator = getattr(strategy, "coordinator", None)
            if not rule.wait or rule.k != n or snapshot.gate["complete"] \
                    or snapshot.gate["nonfinite"] \
                    or snapshot.counted >= _COUNTED_ROUNDS or coordinator is None \
                    or len(coordinator.live_workers()) != n:
                return False
            with self._changed:
                generation, refreshes = self._generation, self._refreshes
            if refreshes != snapshot.refreshes:
                return False
            version = int(snapshot.gate["version"])
            if not all(int(joined) == version or snapshot.let_through(self._last_push[w])
                       for w, joined in enumerate(snapshot.gate["contributed"])):
                return False
            gate = dict(snapshot.gate, version=version + 1, pending=0, complete=False,
                        contributed=[version] * n)
            self._snapshot = snapshot._replace(
                generation=generation, pushes=self._pushes, gate=gate,
                read_end=time.monotonic(), counted=snapshot.counted + 1)
            return True

    def _may_start(self, worker, seen, read=False):
        queue = self._queue
        if not queue._should_process_closures or not queue._tagged_queue[worker].empty():
            return True  # stopping, or a per-worker resource closure (e.g. an iterator)
        if not self._strategy.rule.wait:
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
            commits_in_graph=lambda: self._strategy.rule_capped_for_work() or any(
                self.may_wait_in_graph(w) for w in list(self._started)))

    def get(self, timeout=None, tag=None):
        if tag is not None:
            try:
                self._wait_at_gate(tag)
            except _StrategyGone:
                pass  # no gate without a strategy: the stock queue answers
        closure = self._queue.get(timeout=timeout, tag=tag)
        if tag is not None and closure is not None and not isinstance(
                closure, cc.ResourceClosure):
            self._started[tag] = (time.monotonic(), weakref.ref(closure))
            try:
                if self._strategy.rule_capped_for_work():
                    # K was lowered because the other workers had no steps left; steps
                    # arrive again, so K goes back up before this one pushes.
                    self._refresh(wait=True)
            except _StrategyGone:
                pass
        return closure

    def _wait_at_gate(self, tag):
        """Returns once worker ``tag`` may take its next step (`_may_start`)."""
        self._thread_tags[threading.get_ident()] = tag
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
        if self._strategy.waits_in_graph and (self._started or self.has_queued()):
            self._refresh(quiet=True)


def _monitor(queue_ref):
    while True:
        time.sleep(_MONITOR_S)
        queue = queue_ref()
        if queue is None or not queue._queue._should_process_closures:
            return
        try:
            queue.monitor()
        except _StrategyGone:
            return
        del queue


class KSyncCoordinator(cc.ClusterCoordinator):
    """`ClusterCoordinator` whose workers respect the strategy's synchronisation rule."""

    def __init__(self, strategy):
        initialised = getattr(self, "_has_initialized", False)
        super().__init__(strategy)
        if not initialised:
            queue = _GatedClosureQueue(self._cluster.closure_queue, strategy,
                                       len(self._cluster.workers))
            self._cluster.closure_queue = queue
            if strategy.needs_monitor:
                threading.Thread(target=_monitor, args=(weakref.ref(queue),),
                                 name="ksync-monitor", daemon=True).start()

    def worker_busy(self):
        """(seconds each worker spent executing steps, steps each executed)."""
        queue = self._cluster.closure_queue
        return list(queue.busy_s), list(queue.steps)

    def iteration_times(self):
        """(median seconds of each worker's last steps, seconds its running step has
        taken so far); None where a worker has no finished or no running step."""
        queue = self._cluster.closure_queue
        # The median: one long step (a freeze that ended) does not make a worker slow.
        usual = [statistics.median(list(r)) if r else None for r in queue.recent]
        return usual, queue.in_flight_s()

    def chief_reads(self) -> dict:
        """Reads of the PS the chief made so far besides the steps, by purpose: "gate"
        (whether a worker may start its next step) and "refresh" (the counters read to
        refresh the rule)."""
        return dict(self._cluster.closure_queue.reads)

    def retried(self) -> int:
        """Steps re-run on another worker because their worker failed mid-step."""
        return self._cluster.closure_queue.retried

    def workers_with_work(self):
        """Live workers that can still push in the current round: all of them while
        steps are queued, else those running a step (None: steps are queued)."""
        queue = self._cluster.closure_queue
        if queue.has_queued():
            return None
        running = queue.running_workers()
        return [w for w in self.live_workers() if w in running]

    def may_wait_in_graph(self, worker) -> bool:
        """Whether ``worker`` runs a step that may wait in the graph for its round
        (`_GatedClosureQueue.may_wait_in_graph`)."""
        return self._cluster.closure_queue.may_wait_in_graph(worker)

    def live_workers(self):
        """Indices of workers with no unrecovered failure."""
        return [w.worker_index for w in self._cluster.workers if not w._is_dead_with_error]
