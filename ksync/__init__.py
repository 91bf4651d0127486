"""ksync: the adaptive k-sync / async update rule of the parameter servers.

Pure Python: policies (`BSP`, `ASP`, `SSP`, `KSync`, `KAsync`, `BackupWorkers`,
`Adaptive`, which picks the rule of highest predicted goodput (`ksync.goodput`), and from
the literature `Rennala`, `Ringmaster`, `AdaSync`, `SyncSwitch`,
`ASHL`) choose a `Rule` from their parameters and what the run tells them (`Observation`,
`Context`); `UpdateState` is the reference of what the PS does with it; `RuleController`
is the control loop around a policy that the strategy and the simulator share, and keeps
each run's history of rules with their reasons.
The TensorFlow state that executes a rule on the PS lives in `ksync.tf_state` and is
imported only by the strategy.
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
