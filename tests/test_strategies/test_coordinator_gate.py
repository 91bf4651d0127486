"""The chief's k-sync gate (`strategies.coordinator`) without a cluster.

The gate, the strategy's rule refresh and the K cap for the workers with steps left run
here as they do in `KSyncStrategy`, against the reference PS state
(`ksync.state.UpdateState`) in place of the TensorFlow one and a closure queue in place
of TensorFlow's. Each worker is a thread of its own, as in `ClusterCoordinator`, and the
order of every event is set by the test: no timing decides an outcome.
"""

import concurrent.futures
import queue
import threading
import time
import types
import weakref

import numpy as np
import pytest

import ksync
from ksync.state import UpdateState
from strategies import cluster_guard, coordinator
from strategies.cluster_guard import ClusterGuard
from strategies.coordinator import KSyncCoordinator, _GatedClosureQueue
from strategies.gate_cache import COUNTED_ROUNDS
from strategies.rule_loop import RuleLoop

N = 3
BINS = 17


class Closure:
    """A scheduled step; ``pushes`` as `KSyncStrategy.pushes_per_call` would tell it
    (1: one step of `model.fit`; None: several steps in a loop, which wait in the graph)."""

    def __init__(self, pushes=1):
        self.pushes = pushes


class TFClosureQueue:
    """What the gate uses of TensorFlow's `_CoordinatedClosureQueue`."""

    def __init__(self):
        self._should_process_closures = True
        self._queue = queue.Queue()
        self._tagged_queue = [queue.Queue() for _ in range(N)]

    def get(self, timeout=None, tag=None):
        try:
            return self._queue.get(timeout=10 if timeout is None else timeout)
        except queue.Empty:
            return None

    def put(self, closure, tag=None):
        (self._queue if tag is None else self._tagged_queue[tag]).put(closure)

    def mark_finished(self):
        pass

    def put_back(self, closure):
        self._queue.put(closure)


class PS:
    """The PS state through the calls the chief makes (`PSUpdateState.gate_state`,
    `counters`, `set_rule`), on the reference state."""

    def __init__(self, rule):
        self.ref = UpdateState(N, rule)
        self.samples = [0.0] * N

    def push(self, worker, version_read=None, finite=True):
        """A gradient of ``worker`` computed at ``version_read`` (None: the current)."""
        self.samples[worker] += 32
        read = self.ref.version if version_read is None else version_read
        return self.ref.push(worker, version_read=read, samples=32, finite=finite)

    def gate_state(self):
        r = self.ref
        return dict(version=r.version, pending=r.pending, k=r.rule.k,
                    complete=r.pending >= r.rule.k, nonfinite=r.nonfinite,
                    contributed=np.array(r.contributed))

    def counters(self):
        r = self.ref
        return dict(version=r.version, contributed=np.array(r.contributed),
                    staleness_hist=np.zeros((N, BINS), np.int64),
                    worker_samples=np.array(self.samples), noise_sums=np.zeros(0))

    def set_rule(self, rule):
        self.ref.set_rule(rule)


class Loop(RuleLoop):
    """`RuleLoop` over a fake PS; a step's pushes are what its `Closure` says."""

    def pushes_per_call(self, closure):
        return closure.pushes


class Strategy:
    """What the gate uses of a `KSyncStrategy` (its `RuleLoop`) over a fake PS and
    coordinator."""

    def __init__(self, policy):
        self.controller = ksync.RuleController(policy, N)
        self._state = PS(self.controller.rule)
        # No monitor thread: the tests call `_refresh` where the monitor would.
        self.loop = Loop(self.controller, self._state, may_wait=False)
        self.loop.waits_in_graph = True  # as after a first push traced under a waiting rule
        self.tf_queue = TFClosureQueue()
        coordinator = object.__new__(KSyncCoordinator)  # no cluster to connect to
        # What the guard uses of TensorFlow's failure handler: its update lock, the
        # event set while a rebuild of the cluster is due, its run flag and the server
        # def the process's eager context is connected with (this "cluster" is the
        # process's current one).
        lock = threading.Lock()
        self.failure_handler = types.SimpleNamespace(
            _cluster_update_lock=lock, _cluster_due_for_update_or_finish=threading.Event(),
            _worker_up_cond=threading.Condition(lock), _should_preemption_thread_run=True,
            _server_def=cluster_guard.connected_server_def())
        coordinator._cluster = types.SimpleNamespace(
            closure_queue=self.tf_queue, stop=lambda: None,
            failure_handler=self.failure_handler,
            workers=[types.SimpleNamespace(worker_index=w, _is_dead_with_error=False)
                     for w in range(N)])
        coordinator._loop = self.loop
        self.loop.attach(coordinator._cluster)
        self.queue = _GatedClosureQueue(self.tf_queue, self.loop, N)
        coordinator._cluster.closure_queue = self.queue
        self.coordinator = coordinator
        self.guard = self.loop.guard

    @property
    def rule(self):
        return self.loop.rule

    def rule_capped_for_work(self):
        return self.loop.rule_capped_for_work()


class Chief:
    """A strategy and one thread per worker taking steps through the gate."""

    def __init__(self, policy=None):
        self.strategy = Strategy(policy or ksync.BSP())
        self.queue = self.strategy.queue
        self.ps = self.strategy._state
        self.threads = [concurrent.futures.ThreadPoolExecutor(1) for _ in range(N)]
        self.taking = [None] * N  # each worker's call of `get` under way
        self.running = [None] * N  # each worker's step, held as TensorFlow's thread does

    def schedule(self, *closures):
        for closure in closures:
            self.queue.put(closure)  # through the gated queue, as `schedule` does

    def take(self, worker):
        """The worker's thread asks for its next step (through the gate)."""
        self.taking[worker] = self.threads[worker].submit(self.queue.get, None, worker)

    def took(self, worker, timeout=10):
        closure, self.taking[worker] = self.taking[worker].result(timeout), None
        assert closure is not None
        self.running[worker] = closure  # held while it runs, as by TensorFlow's thread
        return closure

    def push_and_finish(self, worker, version_read=None, finite=True):
        """The worker's running step pushes its gradient (computed at ``version_read``;
        None: the current version) and ends."""
        self.ps.push(worker, version_read, finite)
        self.threads[worker].submit(self.queue.mark_finished).result(10)

    def may_start(self, worker):
        """The gate's answer for ``worker`` now, from a fresh read of the PS (here the
        fake PS changes without a step finishing, which is what moves the generation)."""
        with self.queue._changed:
            self.queue._generation += 1
            seen = self.queue._generation
        return self.queue._may_start(worker, seen, read=True)

    def refresh(self):
        """A refresh of the rule (the monitor's tick, or a worker's 0.5 s re-check)."""
        done = self.queue.reads["refresh"]
        self.queue._refresh(wait=True)  # logs an error and keeps the rule if it failed
        assert self.queue.reads["refresh"] > done, "the refresh failed (see the log)"

    def close(self):
        self.strategy.tf_queue._should_process_closures = False
        with self.queue._changed:
            self.queue._generation += 1
            self.queue._changed.notify_all()
        self.schedule(*[Closure() for _ in range(N)])
        for thread in self.threads:
            thread.shutdown(wait=True)


@pytest.fixture
def chief():
    chiefs = []

    def make(policy=None):
        chiefs.append(Chief(policy))
        return chiefs[-1]

    yield make
    for c in chiefs:
        c.close()


def start_round(c, *workers):
    """``workers`` each take one step of the queued ones (the first round is open)."""
    c.schedule(*[Closure() for _ in workers])
    for w in workers:
        c.take(w)
        c.took(w)


def test_a_step_that_pushed_and_no_step_queued_keep_k(chief):
    """The failure seen under load: BSP through `model.fit` (one push per step). Worker 0
    has pushed into the open round and is finishing its step; the others passed the gate
    and wait for steps the chief has not scheduled yet. A refresh then must not lower K
    to worker 0 alone: the round would be complete, the gate would let worker 0 through
    and its next step would push a second gradient into the round."""
    c = chief()
    start_round(c, 0)
    c.take(1)
    c.take(2)  # passed the gate, waiting for a step
    c.ps.push(0)
    assert c.strategy.coordinator.workers_with_work() == [0]
    c.refresh()
    assert c.strategy.rule.k == N and not c.strategy.rule_capped_for_work()
    c.threads[0].submit(c.queue.mark_finished).result(10)
    assert not c.may_start(0)
    c.take(0)
    # The chief catches up: the two steps go to the workers that have not pushed.
    c.schedule(Closure(), Closure())
    c.took(1)
    c.took(2)
    assert not c.may_start(0) and not c.taking[0].done()
    c.push_and_finish(1)
    assert not c.may_start(0)
    c.push_and_finish(2)
    assert c.ps.ref.version == 1 and c.ps.ref.contributed == [0, 0, 0]
    assert c.may_start(0)
    c.schedule(Closure())
    c.took(0)


def lowered_for_a_step_waiting_in_the_graph(c):
    """Worker 0 runs several steps in one function and waits in its graph for the round;
    worker 1's step (one push) has pushed into it too; worker 2 waits for a step and none
    is queued: K drops to worker 0, the round is complete."""
    c.schedule(Closure(pushes=None), Closure())
    c.take(0)
    c.took(0)
    c.take(1)
    c.took(1)
    c.push_and_finish(1)
    c.ps.push(0)
    c.take(2)
    c.refresh()
    assert c.strategy.rule.k == 1 and c.strategy.rule_capped_for_work()
    assert c.ps.gate_state()["complete"]


def test_a_round_completed_for_steps_waiting_in_the_graph_is_theirs_to_commit(chief):
    """A worker at the gate whose gradient is in that round waits for worker 0's wait
    in the graph to commit it, rather than push a second gradient into it."""
    c = chief()
    lowered_for_a_step_waiting_in_the_graph(c)
    assert not c.may_start(1)
    assert c.ps.ref.commit_complete_round()  # worker 0's `PSUpdateState.wait_turn`
    assert c.may_start(1)


def test_a_read_made_while_k_was_lowered_for_work_does_not_open_the_gate(chief):
    """K goes back up (a step arrived) between a worker's read of the PS, which saw the
    round complete, and its decision: the round is no longer complete, it must wait."""
    c = chief()
    lowered_for_a_step_waiting_in_the_graph(c)
    with c.queue._changed:
        seen = c.queue._generation
    c.queue._gate_snapshot(seen)
    c.schedule(Closure())
    c.took(2)
    assert c.strategy.rule.k == N and not c.strategy.rule_capped_for_work()
    assert not c.queue._may_start(1, seen)
    c.push_and_finish(2)
    assert c.ps.ref.version == 1 and c.may_start(1)


def test_a_round_completed_when_a_worker_died_commits_on_the_next_push(chief):
    """K lowered to the live workers after their gradients arrived, with one push per
    step: only a push can commit the round, so the gate lets a worker through."""
    c = chief()
    start_round(c, 0, 1, 2)
    c.push_and_finish(0)
    c.push_and_finish(1)
    assert not c.may_start(0) and not c.may_start(1)
    # Worker 2 fails: TensorFlow re-queues its step (from its thread) and marks it dead.
    step = c.queue._timing.started(2)[1]
    c.threads[2].submit(c.queue.put_back, step).result(10)
    c.strategy.coordinator._cluster.workers[2]._is_dead_with_error = True
    c.refresh()
    assert c.strategy.rule.k == 2 and not c.strategy.rule_capped_for_work()
    assert c.may_start(0) and c.may_start(1)
    # The simulator asks the same place (`UpdateState.may_start`) on its own state.
    assert c.ps.ref.pending == c.ps.ref.rule.k == 2
    assert c.ps.ref.may_start(0) and c.ps.ref.may_start(1)


def test_the_coordinator_and_the_simulator_answer_the_gate_alike(chief):
    """Each case of the gate (open round, full round committed by a push, full round
    committed in the graph, committed round), asked of the coordinator on the PS's
    gate state and of `UpdateState.may_start` on the same state, as the simulator asks."""
    c = chief()
    lowered_for_a_step_waiting_in_the_graph(c)  # full round, K lowered for work
    in_graph = c.strategy.rule_capped_for_work()
    answers = [(c.may_start(w), c.ps.ref.may_start(w, commits_in_graph=in_graph))
               for w in range(N)]
    assert answers == [(False, False), (False, False), (True, True)]
    assert c.ps.ref.commit_complete_round()
    assert [c.may_start(w) for w in range(N)] == [c.ps.ref.may_start(w) for w in range(N)] \
        == [True, True, True]


def test_a_worker_whose_gradient_came_stale_starts_at_once(chief):
    """K-sync, K = 2 of 3: workers 0 and 1 close round 0 and start round 1 (the gate
    reads the PS for that); worker 2's gradient, computed at version 0, arrives after
    and is dropped. Its worker must start at once, not wait for round 1 as if its
    gradient had joined it: that idled fast workers out of phase with the rounds and
    made K-sync rounds as slow as the medium workers on 8 workers."""
    c = chief(ksync.get("ksync", k=2))
    start_round(c, 0, 1, 2)
    c.push_and_finish(0)
    c.push_and_finish(1)
    assert c.ps.ref.version == 1
    start_round(c, 0, 1)
    c.push_and_finish(2, version_read=0)
    assert c.ps.ref.dropped == 1 and c.ps.ref.pending == 0
    with c.queue._changed:
        seen = c.queue._generation
    assert c.queue._may_start(2, seen)  # as `get` asks first (read=False)
    # Its next gradient is fresh and joins round 1: now the guess holds, no read.
    start_round(c, 2)
    c.push_and_finish(2)
    reads = c.queue.reads["gate"]
    assert not c.queue._may_start(2, seen)
    assert c.queue.reads["gate"] == reads


def gate_says(c, worker):
    """The gate's answer for ``worker`` as `get` asks it (from what it knows, reading
    the PS only if that does not tell)."""
    with c.queue._changed:
        seen = c.queue._generation
    return c.queue._may_start(worker, seen)


def bsp_rounds(c, rounds, nan_at=None):
    """``rounds`` of BSP steps, each worker's thread doing what `get` does: its step
    ends (pushing, at the version it began at), it asks the gate, and if told to wait
    it asks again once the other steps of the round have ended (as when notified);
    let through, it begins its next step. Returns the rounds in which an answer of the
    gate differed from the PS's (`UpdateState.may_start`). ``nan_at``: (round,
    worker) whose gradient is non-finite."""
    wrong = []
    began = getattr(c, "began", None)  # where the last call left the workers
    if began is None:
        start_round(c, *range(N))
        began = {w: c.ps.ref.version for w in range(N)}
    for r in range(rounds):
        waiting, free = [], []
        for w in sorted(began):
            c.push_and_finish(w, began[w], finite=(r, w) != nan_at)
            c.threads[w].submit(c.queue._step_finished).result(10)
            (free if gate_says(c, w) else waiting).append(w)
        for w in waiting:
            if gate_says(c, w):
                free.append(w)
        if any(c.ps.ref.may_start(w) != (w in free) for w in range(N)):
            wrong.append(r)
        assert free, f"round {r}: no worker may start"
        began = {}
        for w in free:
            c.running[w] = Closure()  # held while it runs, as by TensorFlow's thread
            c.queue._timing.start(w, time.monotonic(), c.running[w])
            began[w] = c.ps.ref.version
    c.began = began
    return wrong


def test_bsp_rounds_are_followed_by_counting_pushes(chief):
    """Under BSP the chief knows a round has committed once every worker has pushed into
    it: after the first round it reads the PS once in COUNTED_ROUNDS + 1 rounds, and
    the gate's answer is the PS's at every step."""
    c = chief()
    assert bsp_rounds(c, 1) == []  # its steps began before any read: it reads
    reads = c.queue.reads["gate"]
    rounds = 3 * (COUNTED_ROUNDS + 1)
    assert bsp_rounds(c, rounds) == []
    assert c.ps.ref.version == 1 + rounds and c.ps.ref.dropped == 0
    assert c.queue.reads["gate"] - reads == 3, (reads, c.queue.reads)


def test_a_refresh_makes_the_next_round_read(chief):
    """A refresh may change the rule: the round after it is read, not counted."""
    c = chief()
    bsp_rounds(c, 3)
    reads = c.queue.reads["gate"]
    c.refresh()
    assert bsp_rounds(c, 2) == [] and c.queue.reads["gate"] == reads + 1


def test_a_non_finite_gradient_misleads_the_count_until_the_next_read(chief):
    """The PS drops a non-finite gradient, which the chief cannot see: the count takes
    the round for committed and lets workers through, who push a second (fresh)
    gradient into it. Training goes on; the next read puts the gate right and shows
    the PS has seen a non-finite gradient, and from then on the gate reads every round
    (a worker that made one may make more)."""
    c = chief()
    bsp_rounds(c, 2)
    wrong = bsp_rounds(c, COUNTED_ROUNDS + 1, nan_at=(0, N - 1))
    assert c.ps.ref.nonfinite == 1
    assert wrong and max(wrong) < COUNTED_ROUNDS, wrong
    reads = c.queue.reads["gate"]
    assert bsp_rounds(c, 5) == [] and c.queue.reads["gate"] - reads >= 5


def test_no_read_while_tensorflow_rebuilds_the_cluster(chief):
    """A worker failed and TensorFlow's failure handler is rebuilding the cluster (its
    event set, as under its update lock): a remote call then can crash the chief in
    native code, so the gate holds the worker and the refresh keeps the rule, with no
    read of the PS; once the cluster is whole the gate reads again. After the handler
    stopped (a PS lost, shutdown) nothing reads and the step goes to TensorFlow, which
    reports the failure."""
    c = chief()
    start_round(c, 0, 1, 2)
    for w in range(N):
        c.push_and_finish(w)  # the round commits: each worker may start its next step
    due = c.strategy.failure_handler._cluster_due_for_update_or_finish
    reads = dict(c.queue.reads)
    due.set()
    assert c.may_start(0) is False
    c.queue._refresh(wait=True)
    assert c.queue.reads == reads
    due.clear()
    assert c.may_start(0) is True and c.queue.reads["gate"] == reads["gate"] + 1
    c.strategy.failure_handler._should_preemption_thread_run = False
    due.set()  # as the handler's stop() leaves it
    assert c.may_start(1) is True and c.queue.reads["gate"] == reads["gate"] + 1


def test_telemetry_waits_for_the_rebuild_and_coordinator_threads_never_do(chief):
    from strategies.cluster_guard import ClusterRecovering, ClusterStopped
    c = chief()
    guard, handler = c.strategy.guard, c.strategy.failure_handler
    calls = []
    handler._cluster_due_for_update_or_finish.set()
    with pytest.raises(ClusterRecovering):
        guard.call(calls.append, "gate")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(guard.call, calls.append, "telemetry", wait=True)
        time.sleep(0.2)
        assert calls == [] and not waiting.done()  # never during a rebuild
        with handler._cluster_update_lock:
            handler._cluster_due_for_update_or_finish.clear()  # the handler's last step
        waiting.result(10)
    assert calls == ["telemetry"]
    handler._should_preemption_thread_run = False
    with pytest.raises(ClusterStopped):
        guard.call(calls.append, "gate")
    guard.call(calls.append, "telemetry", wait=True)  # TensorFlow reports what it finds
    assert calls == ["telemetry", "telemetry"]


def test_code_that_reaches_into_the_stock_queue_changes_the_stock_queue(chief):
    """TensorFlow's own tests bump ``closure_queue._inflight_closure_count``: the count
    must land on the stock queue, which ``mark_finished`` decrements."""
    c = chief()
    c.strategy.tf_queue._inflight_closure_count = 0
    c.queue._inflight_closure_count += 1
    assert c.strategy.tf_queue._inflight_closure_count == 1
    assert "_inflight_closure_count" not in vars(c.queue)
    c.queue.reads = {"gate": 5}  # the wrapper's own fields stay its own
    assert c.queue.reads == {"gate": 5} and not hasattr(c.strategy.tf_queue, "reads")


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_worker_waiting_at_the_gate_with_no_step_queued_makes_no_call(chief, monkeypatch):
    """A worker whose gradient is in the open round waits at the gate. While no step is
    queued there is nothing to let through: its re-checks neither refresh the rule nor
    read the PS. A coordinator nobody used any more (an earlier test's, in one process)
    kept polling this way, and its read crashed the chief while the next cluster was
    being rebuilt. Once a step is queued, the re-checks refresh and read again."""
    c = chief()
    c.queue._clock.idle_s = 0.02
    start_round(c, 0, 1, 2)
    c.push_and_finish(0)
    before = c.queue.reads["gate"]
    c.take(0)
    wait_until(lambda: c.queue.reads["gate"] > before)  # the check as its step ended
    reads = dict(c.queue.reads)
    time.sleep(0.5)  # some 25 re-checks
    assert c.queue.reads == reads and not c.taking[0].done()
    c.schedule(Closure())
    wait_until(lambda: c.queue.reads["refresh"] > reads["refresh"])
    assert not c.taking[0].done()  # the round is still open: it waits, reading now
    c.push_and_finish(1)
    c.push_and_finish(2)
    assert c.took(0) is not None and c.ps.ref.version == 1


def test_no_call_once_another_strategy_connected_the_process(chief, monkeypatch):
    """The process's eager context connected to another cluster (a later strategy):
    this cluster's device names now name that cluster's tasks, rebuilt under that
    cluster's failure handler. The guard refuses every call, from a coordinator thread
    and from the user's (telemetry) alike; the gate lets the step go to TensorFlow."""
    from strategies.cluster_guard import ClusterStopped
    c = chief()
    start_round(c, 0, 1, 2)
    for w in range(N):
        c.push_and_finish(w)
    guard, calls = c.strategy.guard, []
    assert not guard.stopped()
    monkeypatch.setattr(cluster_guard, "connected_server_def", lambda: object())
    assert guard.stopped() and guard.superseded()
    reads = dict(c.queue.reads)
    with pytest.raises(ClusterStopped):
        guard.call(calls.append, "gate")
    with pytest.raises(ClusterStopped):
        guard.call(calls.append, "telemetry", wait=True)
    c.queue._refresh(wait=True)
    assert c.may_start(0) is True
    assert calls == [] and c.queue.reads == reads


def test_a_stopped_queue_lets_steps_through_and_ends_the_monitor(chief):
    """Dropping the coordinator stops TensorFlow's queue (`ClusterCoordinator.__del__`):
    from then on the gate lets every step through to the stock queue, whatever the
    rule says, and the monitor thread ends at its next tick."""
    c = chief()
    start_round(c, 0)
    c.push_and_finish(0)  # worker 0 joined the open round of BSP: it would wait
    c.strategy.tf_queue._should_process_closures = False
    nxt = Closure()
    c.schedule(nxt)
    c.take(0)
    assert c.took(0) is nxt
    started = time.monotonic()
    coordinator._monitor(weakref.ref(c.queue))  # returns at its first tick
    assert time.monotonic() - started < 5.0


def test_a_step_left_behind_does_not_keep_its_function_alive(chief):
    """TensorFlow drops a closure once processed (so that a coordinator nobody holds is
    destroyed and stops its threads); the gate's record of a running step must not
    keep it either, e.g. a step whose worker failed while the queue was cancelled,
    which is neither finished nor put back."""
    import gc
    c = chief()
    start_round(c, 0)
    ref = weakref.ref(c.running[0])
    assert c.queue.may_wait_in_graph(0) is False  # one push: known while it runs
    c.running[0] = None
    gc.collect()
    assert ref() is None and 0 in c.queue.running_workers()
    assert c.queue.may_wait_in_graph(0) is True  # its pushes no longer known


def test_a_worker_free_at_the_last_read_goes_on_while_tensorflow_rebuilds(chief):
    """While TensorFlow rebuilds the cluster no read is made; a worker the last read
    found outside the open round, which has pushed nothing since, is still free and
    goes on (as under the stock strategy: its steps may push nothing, and the rebuild
    may wait for a worker its user restarts only once they are done, as in
    TensorFlow's testAsyncWaitIsNoOp). A worker whose gradient is in the open round
    waits."""
    c = chief()
    start_round(c, 0, 1, 2)
    for w in range(N):
        c.push_and_finish(w)  # the round commits
    assert c.may_start(0) and c.may_start(1)  # a read: both free
    start_round(c, 0)
    c.push_and_finish(0)  # worker 0 joins the next round; worker 1 pushed nothing
    due = c.strategy.failure_handler._cluster_due_for_update_or_finish
    reads = dict(c.queue.reads)
    due.set()
    assert c.may_start(1) is True and c.may_start(0) is False
    assert c.queue.reads == reads


def test_a_worker_that_never_pushed_goes_on_while_tensorflow_rebuilds_before_any_read(
        chief):
    """TensorFlow's testAsyncWaitIsNoOp (fault_tolerance_test, no coordination service)
    as the gate sees it: the worker threads ask for steps before any is scheduled, so
    their first steps pass with no read of the PS; those steps push nothing, and a
    worker fails while they run. A worker that has pushed nothing goes on during the
    rebuild although the gate never read (it hung there: the rebuild waits for a worker
    the test restarts only after those steps); one whose step pushed waits."""
    c = chief()
    for w in range(N):
        c.take(w)  # before any step: through to the stock queue, no read
    c.schedule(Closure(pushes=0), Closure(pushes=0), Closure(pushes=1))
    steps = {w: c.took(w) for w in range(N)}
    pusher = next(w for w, step in steps.items() if step.pushes == 1)
    idle = [w for w in range(N) if w != pusher]
    c.push_and_finish(pusher)  # into the open BSP round (1 of 3)
    for w in idle:
        c.threads[w].submit(c.queue.mark_finished).result(10)
    c.strategy.failure_handler._cluster_due_for_update_or_finish.set()  # a worker failed
    assert c.queue.reads["gate"] == 0
    assert [c.may_start(w) for w in idle] == [True, True] and c.may_start(pusher) is False
    c.take(idle[0])
    c.schedule(Closure(pushes=0))
    c.took(idle[0])  # through the gate while the cluster is rebuilt
    assert c.queue.reads["gate"] == 0


def test_a_lost_coordination_service_asks_for_another_rebuild():
    """After a rebuild that failed part way, TensorFlow 2.21's task-state poll raises
    FailedPreconditionError ("Coordination service is not enabled") on every tick: the
    guard turns each into a request for a new rebuild; other poll errors stay errors."""
    from tensorflow.python.framework import errors
    lock = threading.Lock()
    raised = []

    def poll():
        raise raised.pop(0)

    handler = types.SimpleNamespace(
        _cluster_update_lock=lock, _cluster_due_for_update_or_finish=threading.Event(),
        _should_preemption_thread_run=True, _server_def=cluster_guard.connected_server_def(),
        _task_state_poller_thread=types.SimpleNamespace(function=poll))
    guard = ClusterGuard(types.SimpleNamespace(failure_handler=handler))
    tick = handler._task_state_poller_thread.function  # what TensorFlow's timer calls now
    raised.append(errors.FailedPreconditionError(None, None,
                                                 "Coordination service is not enabled."))
    tick()
    assert handler._cluster_due_for_update_or_finish.is_set() and guard.rebuilds_asked == 1
    handler._cluster_due_for_update_or_finish.clear()
    raised.append(errors.FailedPreconditionError(None, None, "something else"))
    with pytest.raises(errors.FailedPreconditionError, match="something else"):
        tick()
    handler._should_preemption_thread_run = False  # stopped: nothing to rebuild
    raised.append(errors.FailedPreconditionError(None, None,
                                                 "Coordination service is not enabled."))
    tick()
    assert not handler._cluster_due_for_update_or_finish.is_set()


def test_the_coordinator_refreshes_when_the_controllers_clock_says(chief):
    """The coordinator asks `ksync.controller.RefreshClock` (which the simulator can ask
    the same way): under BSP (no periodic observation) the first finished step refreshes
    (no refresh has seen the live workers), later ones do not, and the first step after
    a worker died does."""
    c = chief()
    refreshes = lambda: c.queue.reads["refresh"]  # noqa: E731
    start_round(c, 0, 1, 2)
    c.push_and_finish(0)
    assert refreshes() == 1
    c.push_and_finish(1)
    c.push_and_finish(2)
    assert refreshes() == 1 and c.ps.ref.version == 1
    c.strategy.coordinator._cluster.workers[2]._is_dead_with_error = True
    c.schedule(Closure())
    c.take(0)
    c.took(0)
    c.push_and_finish(0)
    assert refreshes() == 2 and c.strategy.rule.k == 2


def test_no_read_nor_refresh_before_a_step_is_scheduled(chief):
    """A worker thread asks for a step as soon as the coordinator exists; until a step is
    scheduled nobody has pushed, so the gate neither reads the PS nor refreshes the rule
    (the stock threads do nothing then either: a coordinator dropped unused must not be
    busy). The first step scheduled turns the gate on."""
    c = chief()
    assert c.queue.get(timeout=0.01, tag=0) is None  # nothing queued: the stock answer
    assert c.queue.reads == {"gate": 0, "refresh": 0}
    start_round(c, 0, 1, 2)
    c.push_and_finish(0)
    c.take(0)  # worker 0 joined the open BSP round: the gate holds it
    for w in (1, 2):
        c.push_and_finish(w)
    c.schedule(Closure())
    c.took(0)
    assert c.queue.reads["gate"] >= 1  # the gate read the PS to let it through
