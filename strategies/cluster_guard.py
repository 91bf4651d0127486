"""The chief's remote calls outside a step, kept out of a cluster being rebuilt.

When a worker fails, TensorFlow's coordinator rebuilds the chief's view of the cluster
(`update_server_def`, from its failure handler's own thread). A remote call issued from
another thread of the chief while that runs can crash the process in native code: a
gate read during a worker preemption under the coordination service took the chief down
with a segmentation fault, and no Python ``except`` can catch that. So every remote read
or write ksync makes from the chief outside a step (the gate's read of the PS, the
rule's refresh, telemetry) goes through `ClusterGuard.call`, which holds the failure
handler's own update lock for the call (no rebuild starts while it runs) and does not
call at all while a rebuild is due or running, once the handler has stopped (a PS was
lost, or the cluster is shutting down), or once the coordinator stopped taking steps.

What it means for training: TensorFlow rebuilds from when it sees a worker fail until
that worker is back and reconnected (its failure handler waits for it). Meanwhile the
gate cannot read the PS nor the rule be refreshed, so under a rule that waits (BSP,
K-sync, Adaptive while it waits) the live workers hold at the gate and the round
completes when the restarted worker has pushed into it; a rule that never waits (ASP,
K-async, SSP) goes on with the live workers, as the stock strategy does. A worker that
freezes without failing (no rebuild) is handled by the rule as before.

The eager context the remote calls go through is one per process, addressed by
device names (``/job:ps/replica:0/task:0``): once another strategy connected in the
same process (a later test, a second run in one script), this cluster's names name the
other cluster's tasks, and that cluster's failure handler rebuilds the context under
a lock this guard does not hold. So a guard whose cluster is no longer the one the
context is connected to (`context.get_server_def` is not its handler's server def)
counts as stopped, and refuses every call, with ``wait`` too: a coordinator left behind
by an earlier strategy that nobody shut down makes no call into the next one's cluster
(its gate read crashed the chief in TensorFlow's own fault-tolerance tests, run one
after another in one process).

The handler's lock, event, run flag and server def are private attributes of TensorFlow's
`cluster_coordinator` (both handlers, with and without the coordination service, have
them), tested with the TensorFlow range of `strategies.compat`.

Example:

```python
guard = ClusterGuard(coordinator._cluster)
try:
    counters = guard.call(state.counters)           # from a coordinator thread
except ClusterRecovering:
    ...                                             # hold the decision, retry later
telemetry = guard.call(state.counters, wait=True)   # from the user's thread
```
"""

import logging
import time

import tensorflow as tf

from strategies import compat

_log = logging.getLogger(__name__)

#: longest a call with ``wait`` waits for the cluster to be whole again.
RECOVERY_WAIT_S = 600.0
#: seconds between two looks at a cluster being rebuilt, for a call that waits.
_POLL_S = 0.05


class ClusterUnavailable(RuntimeError):
    """The chief must not call into the cluster now."""


class ClusterRecovering(ClusterUnavailable):
    """TensorFlow is rebuilding the cluster after a worker failure: call again later."""


class ClusterStopped(ClusterUnavailable):
    """The cluster's failure handling has stopped (a PS was lost, or it is shutting
    down): no remote call from a coordinator thread any more."""


class ClusterGuard:
    """Runs the chief's remote calls only while the cluster is whole (see the module doc)."""

    def __init__(self, cluster):
        self._cluster = cluster
        self._handler = cluster.failure_handler
        self._lock = self._handler._cluster_update_lock  # pylint: disable=protected-access
        self._due = self._handler._cluster_due_for_update_or_finish  # pylint: disable=protected-access
        # What the strategy connected the process's eager context with (both handlers
        # keep it to rebuild the cluster; TensorFlow sets the context with this object).
        self._server_def = self._handler._server_def  # pylint: disable=protected-access
        #: calls refused while the cluster was being rebuilt (`ClusterRecovering`).
        self.refused = 0
        #: rebuilds asked for after the coordination service went away (`_poll_states`).
        self.rebuilds_asked = 0
        poller = getattr(self._handler, "_task_state_poller_thread", None)
        if poller is not None:  # the handler under the coordination service
            self._poll = poller.function
            poller.function = self._poll_states

    def _poll_states(self, *args):
        """The coordination-service handler's task-state poll, which asks for another
        rebuild when the service is gone.

        A rebuild that fails part way (a worker killed again, or not yet listening,
        while `update_server_def` runs) leaves the chief's coordination service agent
        down, and TensorFlow 2.21 then raises ``FailedPreconditionError: Coordination
        service is not enabled`` from every poll, where its handler expects an
        ``InternalError``. The stock handler lets the poll die each time: the task
        states stay as they were, no rebuild is asked for, and training waits forever
        (seen in a kill soak under BSP after 9,972 pushes). A new rebuild brings the
        service back; while a worker is still down it fails, and the next poll asks
        again, every few seconds, as TensorFlow retries a rebuild itself."""
        try:
            self._poll(*args)
        except tf.errors.FailedPreconditionError as err:
            if "coordination service is not enabled" not in str(err).lower():
                raise
            if not self._handler._should_preemption_thread_run:  # pylint: disable=protected-access
                return
            if not self.rebuilds_asked:
                _log.warning("ksync: the coordination service is down after a cluster "
                             "rebuild failed part way; asking TensorFlow to rebuild again")
            self.rebuilds_asked += 1
            self._due.set()

    def stopped(self) -> bool:
        """Whether failure handling or the closure queue has stopped, or the process's
        eager context is connected to another cluster now (`superseded`)."""
        return not (self._handler._should_preemption_thread_run  # pylint: disable=protected-access
                    and self._cluster.closure_queue._should_process_closures  # pylint: disable=protected-access
                    and not self.superseded())

    def superseded(self) -> bool:
        """Whether another strategy has connected the process's eager context to its
        own cluster since this one's: this cluster's device names are not its own."""
        return connected_server_def() is not self._server_def

    def recovering(self) -> bool:
        """Whether a rebuild of the cluster is due or running now."""
        return self._due.is_set() and not self.stopped()

    def call(self, fn, *args, wait: bool = False):
        """``fn(*args)`` while no rebuild of the cluster can start.

        Without ``wait`` (a coordinator thread, which must never block on a rebuild):
        raises `ClusterRecovering` while the cluster is being rebuilt, `ClusterStopped`
        once it is shutting down or lost a PS. With ``wait`` (the user's thread): waits
        up to `RECOVERY_WAIT_S` for a rebuild to end, and still calls after the handler
        stopped (TensorFlow then reports an unreachable server as the error it is),
        but never once another cluster has replaced this one (`ClusterStopped`)."""
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while True:
            stopped = self.stopped()
            if stopped and (not wait or self.superseded()):
                raise ClusterStopped("the cluster is shutting down, lost a parameter "
                                     "server or was replaced by another strategy's; ksync "
                                     "makes no more calls into it")
            if self._lock.acquire(timeout=_POLL_S if wait else 0):
                try:
                    # Under the lock: a rebuild neither runs nor starts while fn does.
                    if stopped or not self._due.is_set():
                        return fn(*args)
                finally:
                    self._lock.release()
            if not wait:
                self.refused += 1
                raise ClusterRecovering("TensorFlow is rebuilding the cluster after a "
                                        "worker failure")
            if time.monotonic() > deadline:
                raise ClusterRecovering(
                    f"the cluster has been recovering from a worker failure for over "
                    f"{RECOVERY_WAIT_S:.0f} s; is the failed worker being restarted?")
            time.sleep(_POLL_S)


def connected_server_def():
    """The server def the process's eager context is connected with (None: none)."""
    return compat.connected_server_def()


__all__ = ["ClusterGuard", "ClusterUnavailable", "ClusterRecovering", "ClusterStopped",
           "RECOVERY_WAIT_S"]

