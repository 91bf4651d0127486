"""`import ksync` is the one public namespace: every name of `ksync.__all__` resolves, the
TensorFlow-side ones on first use (so `import ksync` alone loads no TensorFlow;
`tests/test_import_graph.py` checks that), and they are the objects where the code lives."""

import json
import subprocess
import sys
from pathlib import Path

import ksync

ROOT = Path(__file__).resolve().parents[1]


def test_the_policy_names_resolve_at_import():
    eager = [name for name in ksync.__all__ if name not in ksync._LAZY]
    assert "Adaptive" in eager and "parse" in eager
    assert all(getattr(ksync, name) is not None for name in eager)


def test_every_name_is_listed_once_and_in_dir():
    assert len(ksync.__all__) == len(set(ksync.__all__))
    assert set(ksync.__all__) <= set(dir(ksync))
    assert {"KSyncStrategy", "KSyncCheckpoint", "strategy_from_tf_config",
            "LocalCluster"} <= set(ksync._LAZY)


def test_an_unknown_name_is_an_attribute_error():
    try:
        ksync.NoSuchThing
    except AttributeError as err:
        assert "no attribute 'NoSuchThing'" in str(err)
    else:
        raise AssertionError("ksync.NoSuchThing resolved")


def test_the_lazy_names_resolve_to_where_the_code_lives():
    """In a fresh interpreter (one TensorFlow import): each lazy name of `__all__`
    resolves, `from ksync import ...` works, and it is the object of its home module."""
    code = """
import json, sys
import ksync
assert "tensorflow" not in sys.modules
from ksync import KSyncStrategy
import cluster_sim.local_cluster, strategies.callbacks, strategies.checkpoint
import strategies.ksync_strategy, strategies.launch, strategies.launch_env
homes = [strategies.ksync_strategy, strategies.callbacks, strategies.checkpoint,
         strategies.launch, strategies.launch_env, cluster_sim.local_cluster]
out = {}
for name in ksync._LAZY:
    value = getattr(ksync, name)
    out[name] = [h.__name__ for h in homes if getattr(h, name, None) is value]
assert KSyncStrategy is ksync.KSyncStrategy
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    homes = json.loads(run.stdout.splitlines()[-1])
    assert set(homes) == set(ksync._LAZY)
    assert homes["KSyncStrategy"] == ["strategies.ksync_strategy"]
    assert homes["LocalCluster"] == ["cluster_sim.local_cluster"]
    assert all(homes.values()), homes
