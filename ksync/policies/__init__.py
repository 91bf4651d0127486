"""Synchronisation policies: which `Rule` the parameter servers apply, and when it changes.

A policy is a pure decider: its parameters are set in ``__init__`` and never change, so
one instance can serve any number of strategies or simulations at once. It answers

- ``rule(num_workers) -> Rule``: the rule to start with, validated against the cluster;
- ``observe(observation, context) -> (Rule, reason) | None``: a new rule and why, or
  None to keep the current one, given what was measured (`Observation`) and what the
  run remembers for it (`Context`: the workers, the policy's current rule, the first
  and latest training losses, the policy's own state for the run);
- ``status(context) -> str | None`` (optional): one line on what the policy is waiting
  for or last computed, appended to the explanation.

Everything that belongs to one run (the rule history with reasons, ``explain()``, the
first loss seen) lives in `ksync.RuleController`, which calls the policy; the strategy
and the simulator each own one controller. Static policies never change their rule.

The package's rooms: `base` (`Policy`, `Observation`, `Context`, the stall test),
`fixed` (BSP, ASP, SSP, K-sync, K-async, backup workers), `adaptive` (`Adaptive`; its
goodput model is `ksync.goodput`), `literature` (Sync-Switch, ASHL, Rennala SGD,
Ringmaster ASGD, AdaSync) and `registry` (`get`, `parse`). Import the names from here.

Example: one policy instance, two runs with their own decisions and histories.

>>> import ksync
>>> ksync.KSync(k=2).rule(num_workers=4).describe()
'K=2 sync, drop beyond staleness 0'
>>> policy = ksync.AdaSync(k0=1, refresh_every=10)
>>> a = ksync.RuleController(policy, num_workers=4)
>>> b = ksync.RuleController(policy, num_workers=4)
>>> for version, loss in ((0, None), (10, 1.0), (20, 0.25)):
...     _ = a.refresh(ksync.Measurement(version, live_workers=(0, 1, 2, 3), loss=loss))
>>> a.rule.k, b.rule.k, len(a.history), len(b.history)
(2, 1, 2, 1)

A policy of one's own only decides; the controller records its reason:

>>> class HalveAfter(ksync.Policy):
...     name, refresh_every = "halve", 10
...     def _rule(self, num_workers):
...         return ksync.Rule(k=num_workers, wait=True, max_staleness=0)
...     def observe(self, observation, context):
...         if observation.version >= 50 and context.rule.k > 1:
...             return (ksync.Rule(k=context.rule.k // 2, wait=True, max_staleness=0),
...                     "halved after 50 updates")
...         return None
>>> c = ksync.RuleController(HalveAfter(), num_workers=4)
>>> for version in (0, 50):
...     _ = c.refresh(ksync.Measurement(version, live_workers=(0, 1, 2, 3)))
>>> c.explain()
'K=2 sync, drop beyond staleness 0 since version 50: halved after 50 updates'
"""

from ksync.policies.adaptive import Adaptive
from ksync.policies.base import (RECENT_STEPS, STALL_FACTOR, Context, Observation, Policy,
                                 stalled_workers)
from ksync.policies.fixed import ASP, BSP, SSP, BackupWorkers, KAsync, KSync
from ksync.policies.literature import ASHL, AdaSync, Rennala, Ringmaster, SyncSwitch
from ksync.policies.registry import get, parse

__all__ = ["ASHL", "ASP", "BSP", "SSP", "AdaSync", "Adaptive", "BackupWorkers", "Context",
           "KAsync", "KSync", "Observation", "Policy", "RECENT_STEPS", "Rennala",
           "Ringmaster", "STALL_FACTOR", "SyncSwitch", "get", "parse", "stalled_workers"]
