"""The fixed rules: policies whose rule never changes during a run.

>>> from ksync.policies.fixed import KAsync
>>> KAsync(k=2).rule(num_workers=4).describe()
'K=2 async, unbounded'
"""

from ksync.policies.base import Policy, check_int
from ksync.rule import Rule


class BSP(Policy):
    """Bulk-synchronous: every worker contributes one gradient per update and waits."""

    name = "bsp"

    def _rule(self, num_workers):
        return Rule(k=num_workers, wait=True, max_staleness=0)


class ASP(Policy):
    """Asynchronous: every gradient is applied on arrival, whatever its staleness."""

    name = "asp"

    def _rule(self, num_workers):
        return Rule(k=1, wait=False)


class SSP(Policy):
    """Asynchronous with bounded staleness: gradients staler than the bound are dropped
    (or down-weighted by 1 / (1 + staleness) with ``stale_action="downweight"``)."""

    name = "ssp"

    def __init__(self, max_staleness: int = 4, stale_action: str = "drop"):
        if not isinstance(max_staleness, int) or max_staleness < 0:
            raise ValueError(f"SSP staleness bound must be an integer >= 0, got "
                             f"{max_staleness!r}; use ASP() for no bound.")
        self.max_staleness = max_staleness
        self.stale_action = stale_action
        Rule(k=1, wait=False, max_staleness=max_staleness, stale_action=stale_action)

    def _rule(self, num_workers):
        return Rule(k=1, wait=False, max_staleness=self.max_staleness,
                    stale_action=self.stale_action)

    def get_config(self):
        return {"max_staleness": self.max_staleness, "stale_action": self.stale_action}


class KSync(Policy):
    """K-sync SGD: an update after the first K gradients of a round; workers wait for
    the new version, and gradients of the old round that arrive late are dropped."""

    name = "ksync"

    def __init__(self, k: int):
        check_int("K", k, 1)
        self.k = k

    def _rule(self, num_workers):
        return Rule(k=self.k, wait=True, max_staleness=0)

    def get_config(self):
        return {"k": self.k}


class KAsync(Policy):
    """K-async SGD: an update after any K gradients; workers never wait (K=1 is ASP)."""

    name = "kasync"

    def __init__(self, k: int, max_staleness: int | None = None):
        check_int("K", k, 1)
        self.k = k
        self.max_staleness = max_staleness
        Rule(k=k, wait=False, max_staleness=max_staleness)

    def _rule(self, num_workers):
        return Rule(k=self.k, wait=False, max_staleness=self.max_staleness)

    def get_config(self):
        return {"k": self.k, "max_staleness": self.max_staleness}


class BackupWorkers(Policy):
    """Synchronous with ``backups`` backup workers: each update takes the first N - b of
    N gradients of a round and drops the rest (Chen et al., 2016)."""

    name = "backup"

    def __init__(self, backups: int = 1):
        check_int("backups", backups, 0)
        self.backups = backups

    def _rule(self, num_workers):
        if self.backups >= num_workers:
            raise ValueError(f"BackupWorkers(backups={self.backups}) leaves no gradient per "
                             f"update on {num_workers} worker(s); use backups < {num_workers}.")
        return Rule(k=num_workers - self.backups, wait=True, max_staleness=0)

    def get_config(self):
        return {"backups": self.backups}
