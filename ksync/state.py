"""Pure-Python reference of the parameter-server update state.

`UpdateState` applies a `Rule` to a sequence of pushes exactly as the TensorFlow PS
state (`ksync.tf_state.PSUpdateState`) does, with counters instead of tensors. The
discrete-event simulator uses it directly; tests use it as the oracle for the TF state.

Example:

>>> from ksync.rule import Rule
>>> state = UpdateState(num_workers=2, rule=Rule(k=2, wait=True, max_staleness=0))
>>> state.push(worker=0, version_read=0, samples=32).committed
False
>>> state.may_start(0), state.may_start(1)
(False, True)
>>> state.push(worker=1, version_read=0, samples=32).committed, state.version
(True, 1)
"""

import dataclasses
import math

from ksync.rule import Rule


@dataclasses.dataclass(frozen=True)
class PushResult:
    accepted: bool
    weight: float       # multiplier of the gradient's sample count in the aggregate
    staleness: int
    committed: bool     # this push completed an update
    version: int        # version after the push


class UpdateState:
    """Versions, counters and the current round's aggregate of one parameter server."""

    def __init__(self, num_workers: int, rule: Rule):
        self.num_workers = num_workers
        self.rule = rule
        self.version = 0
        self.pushed = 0
        self.applied = 0
        self.dropped = 0
        self.nonfinite = 0
        self.pending = 0            # accepted gradients waiting for the round to commit
        self.pending_samples = 0.0
        self.contributed = [-1] * num_workers  # version of the round each joined last

    def set_rule(self, rule: Rule) -> None:
        """Switch rule; a round that now has enough gradients commits when a waiting
        worker calls `commit_complete_round` or on the next push."""
        self.rule = rule

    def commit_complete_round(self) -> bool:
        """Commit the current round if it already holds K gradients (K was lowered after
        they arrived: a worker died, or the others have no steps left).

        >>> state = UpdateState(num_workers=3, rule=Rule(k=3, wait=True, max_staleness=0))
        >>> _ = state.push(worker=0, version_read=0, samples=8)
        >>> state.commit_complete_round()
        False
        >>> state.set_rule(Rule(k=1, wait=True, max_staleness=0))
        >>> state.commit_complete_round(), state.version, state.applied, state.pending
        (True, 1, 1, 0)
        """
        if not 0 < self.pending >= self.rule.k:
            return False
        self.applied += self.pending
        self.pending = 0
        self.pending_samples = 0.0
        self.version += 1
        return True

    def may_start(self, worker: int) -> bool:
        """Whether `worker` may start a step now (False: it waits for the next version)."""
        return not (self.rule.wait and self.contributed[worker] == self.version)

    def push(self, worker: int, version_read: int, samples: float,
             finite: bool = True) -> PushResult:
        self.pushed += 1
        staleness = self.version - version_read
        weight = self.rule.weight(staleness) if finite else 0.0
        if weight == 0.0 or not math.isfinite(samples) or samples <= 0:
            self.dropped += 1
            self.nonfinite += int(not finite)
            return PushResult(False, 0.0, staleness, False, self.version)
        self.pending += 1
        self.pending_samples += samples
        self.contributed[worker] = self.version
        committed = self.pending >= self.rule.k
        if committed:
            self.applied += self.pending
            self.pending = 0
            self.pending_samples = 0.0
            self.version += 1
        return PushResult(True, weight, staleness, committed, self.version)

    def check_invariants(self) -> None:
        if self.applied + self.dropped + self.pending != self.pushed:
            raise AssertionError(f"applied {self.applied} + dropped {self.dropped} + pending "
                                 f"{self.pending} != pushed {self.pushed}")
