#!/usr/bin/env python
"""Runs one of TensorFlow's own parameter-server test modules with the stock strategy,
or with ksync's KSyncStrategy substituted for ParameterServerStrategyV2 wherever the test
code constructs it (the module's, its test base's and strategy_combinations' own
namespaces), to check that ksync survives what the stock strategy survives.

The upstream tests are public sources, run from outside the repository and never
committed: copy them at the pinned TensorFlow version into a folder of their own (e.g.
tensorflow/python/distribute/coordinator/fault_tolerance_test.py and
fault_tolerance_coordination_service_test.py into /tmp/upstream; their test base ships
with the TensorFlow wheel), then, from that folder:

    cp /path/to/ksync/tests/test_strategies/upstream_runner.py run_upstream && chmod +x run_upstream
    UPSTREAM_MODULE=fault_tolerance_coordination_service_test UPSTREAM_STRATEGY=ksync \\
        KSYNC_ROOT=/path/to/ksync UPSTREAM_PROGRESS=progress.txt ./run_upstream

It must run as an executable file: TensorFlow's multi_process_runner re-executes
sys.argv[0] in its child processes, so the substitution happens at import time here.

Environment:
  UPSTREAM_MODULE   test module in the folder (e.g. fault_tolerance_test)
  UPSTREAM_STRATEGY stock | ksync
  KSYNC_ROOT        the ksync checkout to import
  KSYNC_POLICY      optional ksync policy name for the substituted strategy (default:
                    KSyncStrategy's default, Adaptive)
  UPSTREAM_FILTER   optional regex on test method names; the others are removed (from
                    shared base classes too: filter on the method name, not the class)
  UPSTREAM_PROGRESS file receiving one line per test start / outcome (parent process)
"""
import importlib
import os
import re
import sys
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
sys.path.insert(1, os.environ["KSYNC_ROOT"])

from tensorflow.python.distribute import multi_process_runner  # noqa: E402
from tensorflow.python.distribute import parameter_server_strategy_v2 as _stock  # noqa: E402

MODULE = os.environ["UPSTREAM_MODULE"]
STRATEGY = os.environ.get("UPSTREAM_STRATEGY", "stock")


def _substitute(module):
    """Replace `parameter_server_strategy_v2` in `module`'s namespace by a proxy whose
    ParameterServerStrategyV2 is KSyncStrategy (everything else forwarded)."""
    from strategies import KSyncStrategy
    cls = KSyncStrategy
    policy = os.environ.get("KSYNC_POLICY")
    if policy:
        class KSyncStrategyWithPolicy(KSyncStrategy):
            def __init__(self, cluster_resolver, variable_partitioner=None, **kw):
                kw.setdefault("policy", policy)
                super().__init__(cluster_resolver, variable_partitioner, **kw)
        cls = KSyncStrategyWithPolicy
    proxy = types.ModuleType(_stock.__name__)
    proxy.__dict__.update(vars(_stock))
    proxy.ParameterServerStrategyV2 = cls
    if getattr(module, "parameter_server_strategy_v2", None) is not None:
        module.parameter_server_strategy_v2 = proxy
        return True
    return False


mod = importlib.import_module(MODULE)
if STRATEGY == "ksync":
    from tensorflow.python.distribute import strategy_combinations
    from tensorflow.python.distribute.coordinator import fault_tolerance_test_base
    done = [m.__name__ for m in (mod, fault_tolerance_test_base, strategy_combinations)
            if _substitute(m)]
    if "pid_logged" not in os.environ:
        os.environ["pid_logged"] = "1"
        print(f"[run_upstream] KSyncStrategy substituted in {done}", flush=True)

# Filter test methods.
pattern = os.environ.get("UPSTREAM_FILTER")
for name, obj in list(vars(mod).items()):
    if isinstance(obj, type) and issubclass(obj, unittest.TestCase):
        globals()[name] = obj
        if pattern:
            for klass in obj.__mro__:
                for attr in list(vars(klass)):
                    if attr.startswith("test") and not re.search(pattern, f"{obj.__name__}.{attr}"):
                        try:
                            delattr(klass, attr)
                        except AttributeError:
                            pass
# Loop variables must not leave a second reference to a test class in this namespace
# (the loader would run its tests twice).
for _n in ("name", "obj", "klass", "attr"):
    globals().pop(_n, None)

# Progress log (parent only: the children of multi_process_runner report back).
_progress = os.environ.get("UPSTREAM_PROGRESS")
_orig_run = unittest.TestCase.run


def _run(self, result=None):
    if result is None or not _progress or multi_process_runner.is_oss() and False:
        return _orig_run(self, result)
    counts = (len(result.failures), len(result.errors), len(result.skipped))
    t0 = time.time()
    with open(_progress, "a") as f:
        f.write(f"START {self.id()} pid={os.getpid()} {time.strftime('%H:%M:%S')}\n")
    try:
        return _orig_run(self, result)
    finally:
        after = (len(result.failures), len(result.errors), len(result.skipped))
        outcome = ("FAIL" if after[0] > counts[0] else "ERROR" if after[1] > counts[1]
                   else "SKIP" if after[2] > counts[2] else "PASS")
        with open(_progress, "a") as f:
            f.write(f"{outcome} {self.id()} {time.time() - t0:.1f}s\n")


unittest.TestCase.run = _run

if __name__ == "__main__":
    from tensorflow.python.compat import v2_compat
    v2_compat.enable_v2_behavior()
    spawned = "-c" in sys.argv[1:]
    try:
        multi_process_runner.test_main()
    except SystemExit as e:
        if spawned:
            raise
        # The results are printed; do not wait for TensorFlow's non-daemon coordinator
        # threads (a failure handler stuck in update_server_def keeps the stock
        # strategy's process alive after its last test).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.code if isinstance(e.code, int) else 1)
