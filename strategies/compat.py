"""Every private TensorFlow and tf_keras API ksync uses, in one place: what and why.

ksync extends `ParameterServerStrategy` and its `ClusterCoordinator` from the inside,
so it relies on TensorFlow internals that may change between releases. Importing this
module checks the TensorFlow version first (`check_tensorflow_version`: outside the
tested range it raises ImportError naming the fix), then imports the private modules
below; every other module of ksync takes them from here (`tests/test_import_graph.py`
holds them to it). Where a public API does the same, ksync uses that instead
(``tf.errors``, ``tf.compat.v1.get_default_graph``).

Private modules and what they are for:

| name here | private API | what for |
|---|---|---|
| `ParameterServerStrategyV2`, `ParameterServerStrategyV2Extended` | `tensorflow.python.distribute.parameter_server_strategy_v2` | the stock strategy and its extended class, which `KSyncStrategy` subclasses to collect a step's updates into one push |
| `ShardedVariable` | `tensorflow.python.distribute.sharded_variable` | a sharded variable's per-shard pushes and checkpointed aggregates |
| `ClusterCoordinator`, `ResourceClosure`, `ClosureInputError` | `tensorflow.python.distribute.coordinator.cluster_coordinator` | the coordinator `KSyncCoordinator` subclasses; the per-worker resource closures (iterators) the gate never holds; the error of a step whose input pipeline failed, which the harness retries |
| `convert_as_caller` | `tensorflow.python.autograph` (`ag_ctx`, `impl.api`) | a user's function under `strategy.run` keeps its caller's autograph setting while ksync's plumbing runs unconverted |
| `ControlFlowFuncGraph`, `WhileBodyFuncGraph` | `tensorflow.python.ops.control_flow_v2_func_graphs` | whether a push is traced inside a loop of one scheduled function (several steps per function wait in the graph) |
| `ResourceVariable`, `is_resource_variable` | `tensorflow.python.ops.resource_variable_ops` | recognising the strategy's variables, and creating the PS state's variables past the strategy's creator |
| `sleep_dataset` | `tensorflow.python.data.experimental.ops.testing.sleep` | a sleep op that burns no CPU: the PS's in-graph wait and the harness's injected slowdown (no public op sleeps inside a graph) |
| `connected_server_def` | `tensorflow.python.eager.context` | which cluster the process's eager context is connected to (`strategies.cluster_guard`) |

Private attributes ksync reads or sets on TensorFlow's and Keras's objects, where they are
used (each line carries ``# pylint: disable=protected-access``):

- the coordinator's cluster (`strategies.coordinator`, `strategies.cluster_guard`,
  `strategies.ksync_strategy`): ``ClusterCoordinator._cluster`` with its
  ``closure_queue`` (replaced by the gated queue), ``workers`` (``worker_index``,
  ``_is_dead_with_error``: the live workers), ``stop()``, and the closure queue's
  ``_should_process_closures``, ``_tagged_queue`` and ``_queue`` (stopping, per-worker
  closures, steps queued); the failure handler's ``_cluster_update_lock``,
  ``_cluster_due_for_update_or_finish``, ``_worker_up_cond``,
  ``_should_preemption_thread_run``, ``_server_def`` and its poll (no remote call while
  TensorFlow rebuilds the cluster);
- a scheduled closure's ``_concrete_function`` (`KSyncStrategy.pushes_per_call`);
- a per-worker `RemoteValue`'s ``_values`` and ``_status_available_event``
  (`ready_remote_value`);
- the graph's ``_distribution_strategy_stack`` (`set_aside_strategy_scopes`);
- tf_keras's ``fit`` local ``val_x``, read from its stack frame
  (`keras_entry_point_for`).
"""

import contextlib
import sys

import tensorflow as tf

TESTED_RANGE = ((2, 21), (2, 21))


def check_tensorflow_version(version: str | None = None) -> None:
    """Raise ImportError naming the fix when TensorFlow is outside the tested range.

    KSyncStrategy subclasses the parameter-server strategy's extended class and wraps the
    coordinator's closure queue, both private; other versions may differ silently.

    >>> check_tensorflow_version("2.21.0")
    >>> check_tensorflow_version("2.22.1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ImportError: ksync was tested with TensorFlow 2.21.x to 2.21.x ...
    """
    version = version or tf.__version__
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    low, high = TESTED_RANGE
    if not low <= major_minor <= high:
        raise ImportError(
            f"ksync was tested with TensorFlow {low[0]}.{low[1]}.x to {high[0]}.{high[1]}.x "
            f"and relies on private parameter-server APIs; found {version}. Install a "
            f"tested version: pip install 'tensorflow>={low[0]}.{low[1]},<{high[0]}."
            f"{high[1] + 1}' 'tf-keras>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}'")


# Before the private imports: outside the tested range they may not exist at all.
check_tensorflow_version()

# pylint: disable=wrong-import-position
from tensorflow.python.autograph.core import ag_ctx as _ag_ctx  # noqa: E402
from tensorflow.python.autograph.impl import api as _autograph  # noqa: E402
from tensorflow.python.data.experimental.ops import testing as _data_testing  # noqa: E402
from tensorflow.python.distribute import parameter_server_strategy_v2 as _pss_v2  # noqa: E402
from tensorflow.python.distribute.coordinator import cluster_coordinator as _cc  # noqa: E402
from tensorflow.python.distribute.sharded_variable import ShardedVariable  # noqa: E402,F401
from tensorflow.python.eager import context as _context  # noqa: E402
from tensorflow.python.ops import control_flow_v2_func_graphs as _cf_graphs  # noqa: E402
from tensorflow.python.ops import resource_variable_ops as _rvo  # noqa: E402

ParameterServerStrategyV2 = _pss_v2.ParameterServerStrategyV2
ParameterServerStrategyV2Extended = _pss_v2.ParameterServerStrategyV2Extended
ClusterCoordinator = _cc.ClusterCoordinator
ResourceClosure = _cc.ResourceClosure
ClosureInputError = _cc.ClosureInputError
ControlFlowFuncGraph = _cf_graphs.ControlFlowFuncGraph
WhileBodyFuncGraph = _cf_graphs.WhileBodyFuncGraph
ResourceVariable = _rvo.ResourceVariable
is_resource_variable = _rvo.is_resource_variable


def convert_as_caller(fn):
    """``fn`` converted by autograph as its caller's code is (converted inside a
    converted tf.function, left alone otherwise)."""
    return _autograph.tf_convert(fn, _ag_ctx.control_status_ctx(), convert_by_default=False)


def sleep_dataset(microseconds):
    """The tf.data transformation that sleeps ``microseconds`` per element without
    burning CPU."""
    return _data_testing.sleep(microseconds)


def connected_server_def():
    """The server def the process's eager context is connected with (None: none)."""
    return _context.context().get_server_def()


def ready_remote_value(remote):
    """The value of a per-worker `RemoteValue` once it exists on its worker, else None
    (being created, or its worker failed): never waits for it."""
    # pylint: disable=protected-access
    return remote._values if remote._status_available_event.is_set() else None


@contextlib.contextmanager
def set_aside_strategy_scopes():
    """Within it, this thread sees no entered `tf.distribute` strategy scope (TensorFlow
    keeps the stack of entered scopes on the default graph)."""
    graph = tf.compat.v1.get_default_graph()
    scopes = graph._distribution_strategy_stack  # pylint: disable=protected-access
    graph._distribution_strategy_stack = []  # pylint: disable=protected-access
    try:
        yield
    finally:
        graph._distribution_strategy_stack = scopes  # pylint: disable=protected-access


def keras_entry_point_for(dataset, depth: int = 1):
    """The innermost tf_keras ``fit``, ``evaluate`` or ``predict`` on the caller's stack,
    and whether ``dataset`` is that ``fit``'s validation input: ``(name, is_validation)``,
    or ``(None, False)`` outside tf_keras. ``depth``: frames to skip above this one."""
    frame = sys._getframe(depth)  # pylint: disable=protected-access
    while frame is not None:
        if (frame.f_globals.get("__name__", "").startswith("tf_keras")
                and frame.f_code.co_name in ("fit", "evaluate", "predict")):
            return frame.f_code.co_name, frame.f_locals.get("val_x") is dataset
        frame = frame.f_back
    return None, False
