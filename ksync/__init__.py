"""ksync: the adaptive k-sync / async update rule of the parameter servers.

Pure Python: policies (`BSP`, `ASP`, `SSP`, `KSync`, `KAsync`, `BackupWorkers`,
`Adaptive`, which picks the rule of highest predicted goodput (`ksync.goodput`), and from
the literature `Rennala`, `Ringmaster`, `AdaSync`, `SyncSwitch`,
`ASHL`) choose a `Rule` from their parameters and what the run tells them (`Observation`,
`Context`); `UpdateState` is the reference of what the PS does with it; `RuleController`
is the control loop around a policy that the strategy and the simulator share, and keeps
each run's history of rules with their reasons.
The TensorFlow state that executes a rule on the PS lives in `strategies.ps_state` and is
imported only by the strategy.

`ksync` is also the package's public face: `ksync.KSyncStrategy`, its callbacks
(`KSyncTelemetryCallback`, `KSyncLossCallback`), checkpoints (`KSyncCheckpoint`,
`PS_FAILURES`, `wait_for_ps`), the launch helpers (`strategy_from_tf_config`,
`quiet_tensorflow`) and `LocalCluster` come from the packages where they live
(`strategies`, `cluster_sim`) on first use, so `import ksync` loads no TensorFlow.
"""

from ksync.controller import Decision, Measurement, RuleController
from ksync.policies import (ASHL, ASP, BSP, SSP, AdaSync, Adaptive, BackupWorkers, Context,
                            KAsync, KSync, Observation, Policy, Rennala, Ringmaster, SyncSwitch,
                            get, parse)
from ksync.rule import Rule
from ksync.state import PushResult, UpdateState

__all__ = ["ASHL", "ASP", "SyncSwitch", "BSP", "SSP", "AdaSync", "Adaptive", "BackupWorkers",
           "KAsync", "KSync", "Rennala", "Ringmaster",
           "Context", "Decision", "Measurement", "Observation", "Policy", "PushResult", "Rule",
           "RuleController", "UpdateState", "get", "parse"]

# The public face, not the policy layer: the names a training script uses, imported from
# where they live on first use (PEP 562), so `import ksync` stays free of TensorFlow and
# the policy modules import nothing of `strategies` or `cluster_sim`.
_LAZY = ("KSyncStrategy", "KSyncTelemetryCallback", "KSyncLossCallback", "KSyncCheckpoint",
         "PS_FAILURES", "wait_for_ps", "strategy_from_tf_config", "quiet_tensorflow",
         "LocalCluster")
__all__ += _LAZY


def __getattr__(name):
    if name == "KSyncStrategy":
        from strategies.ksync_strategy import KSyncStrategy as value
    elif name in ("KSyncTelemetryCallback", "KSyncLossCallback"):
        import strategies.callbacks as module
        value = getattr(module, name)
    elif name in ("KSyncCheckpoint", "PS_FAILURES", "wait_for_ps"):
        import strategies.checkpoint as module
        value = getattr(module, name)
    elif name == "strategy_from_tf_config":
        from strategies.launch import strategy_from_tf_config as value
    elif name == "quiet_tensorflow":
        from strategies.launch_env import quiet_tensorflow as value
    elif name == "LocalCluster":
        from cluster_sim.local_cluster import LocalCluster as value
    else:
        raise AttributeError(f"module 'ksync' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
