"""Pure-Python reference of the parameter-server update state.

`UpdateState` applies a `Rule` to a sequence of pushes exactly as the TensorFlow PS
state (`strategies.ps_state.PSUpdateState`) does, with counters instead of tensors. The
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

With learning-rate scaling (`ksync.lr_scaling`) each commit carries its gain: the PS
applies ``lr * gain``. Linear scaling on BSP steps by the update's batches:

>>> from ksync.lr_scaling import LRScaling
>>> state = UpdateState(2, Rule(k=2, wait=True, max_staleness=0), LRScaling("linear", 32))
>>> _ = state.push(worker=0, version_read=0, samples=32)
>>> result = state.push(worker=1, version_read=0, samples=32)
>>> result.gain, state.learning_rate(0.02, result)
(2.0, 0.04)
"""

import dataclasses
import math

from ksync.lr_scaling import stale_weight
from ksync.rule import Rule


@dataclasses.dataclass(frozen=True)
class PushResult:
    accepted: bool
    weight: float       # multiplier of the gradient's sample count in the aggregate
    staleness: int
    committed: bool     # this push completed an update
    version: int        # version after the push
    gain: float = 1.0   # the commit's learning-rate gain (1.0 when no commit)


class UpdateState:
    """Versions, counters and the current round's aggregate of one parameter server."""

    def __init__(self, num_workers: int, rule: Rule, scaling=None):
        """``scaling``: a `ksync.lr_scaling.LRScaling` giving each commit its gain
        (None: gain 1, the rate as given)."""
        self.num_workers = num_workers
        self.rule = rule
        self.scaling = scaling
        self.version = 0
        self.pushed = 0
        self.applied = 0
        self.dropped = 0
        self.nonfinite = 0
        self.pending = 0            # accepted gradients waiting for the round to commit
        self.pending_samples = 0.0
        # The open round's samples, each gradient's weighted for its staleness
        # (`ksync.lr_scaling.stale_weight`): its scale in base batches times the base
        # batch (`ksync.lr_scaling.scale`).
        self.pending_scaled = 0.0
        self.last_gain = 1.0  # gain of the last commit
        self.contributed = [-1] * num_workers  # version of the round each joined last

    def set_rule(self, rule: Rule) -> None:
        """Switch rule; a round that now has enough gradients commits when a waiting
        worker calls `commit_complete_round` or on the next push (`gate_opens` lets
        a worker of that round through to make it)."""
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
        self._commit()
        return True

    def _commit(self) -> float:
        """Apply the open round: its gain (`ksync.lr_scaling.LRScaling.commit` on its
        staleness-discounted samples, times the rule's ``lr_factor``), counters and
        version."""
        self.last_gain = (1.0 if self.scaling is None else
                          self.scaling.commit(self.pending_scaled / self.scaling.base_batch,
                                              self.rule.lr_factor))
        self.applied += self.pending
        self.pending = 0
        self.pending_samples = 0.0
        self.pending_scaled = 0.0
        self.version += 1
        return self.last_gain

    def learning_rate(self, base_lr: float, result: PushResult | None = None) -> float:
        """The rate a commit applies: ``base_lr`` times its gain (``result``'s, else the
        last commit's), capped by the scaling's ``max_lr``."""
        r = self.last_gain if result is None else result.gain
        return base_lr * r if self.scaling is None else self.scaling.learning_rate(base_lr, r)

    def observe_noise(self, signal: float, trace: float) -> None:
        """The committed round's ``(|G|^2, tr(S))`` estimate (`ksync.noise.estimate`), for
        the gains of the later commits (nothing without AdaScale)."""
        if self.scaling is not None:
            self.scaling.observe(signal, trace)

    def may_start(self, worker: int, commits_in_graph=False) -> bool:
        """Whether `worker` may start a step now (False: it waits for the next version):
        `gate_opens` on this state. ``commits_in_graph`` as there.

        >>> state = UpdateState(num_workers=3, rule=Rule(k=3, wait=True, max_staleness=0))
        >>> _ = state.push(worker=0, version_read=0, samples=8)
        >>> state.may_start(0)          # it joined the open round, which needs 2 more
        False
        >>> state.set_rule(Rule(k=1, wait=True, max_staleness=0))
        >>> state.may_start(0)          # the round is full: its next push commits it
        True
        """
        return self.gate_opens(wait=self.rule.wait, k=self.rule.k, version=self.version,
                               pending=self.pending, joined=self.contributed[worker],
                               commits_in_graph=commits_in_graph)

    @staticmethod
    def gate_opens(*, wait: bool, k: int, version: int, pending: int, joined: int,
                   commits_in_graph=False) -> bool:
        """The gate, decided in one place for the strategy's coordinator (on the PS's
        `gate_state`) and the simulator (on this state): whether a worker that last
        joined the round of version ``joined`` may start a step, with the PS at
        ``version`` holding ``pending`` gradients of a round that commits at ``k``.

        - a rule without ``wait``: always;
        - the round the worker joined has committed (``joined != version``): yes;
        - it joined the open round and the round needs more gradients: no, it waits;
        - it joined a round that holds K gradients but has not committed (K was lowered
          after they arrived: a worker died, the others have no steps left, or the
          policy lowered K): a step that waits in the graph on the PS commits it
          (``commits_in_graph``: a bool, or a function asked only in this case), so
          the worker waits for that rather than push a second gradient into the
          round; otherwise only a push commits it, and this worker's next one does.

        >>> UpdateState.gate_opens(wait=True, k=2, version=4, pending=2, joined=4)
        True
        >>> UpdateState.gate_opens(wait=True, k=2, version=4, pending=2, joined=4,
        ...                        commits_in_graph=lambda: True)
        False
        """
        if not wait or joined != version:
            return True
        if pending < k:
            return False
        return not (commits_in_graph() if callable(commits_in_graph) else commits_in_graph)

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
        if self.scaling is not None:
            self.pending_scaled += samples * stale_weight(self.scaling.mode, staleness)
        self.contributed[worker] = self.version
        committed = self.pending >= self.rule.k
        gain = self._commit() if committed else 1.0
        return PushResult(True, weight, staleness, committed, self.version, gain)

    def check_invariants(self) -> None:
        if self.applied + self.dropped + self.pending != self.pushed:
            raise AssertionError(f"applied {self.applied} + dropped {self.dropped} + pending "
                                 f"{self.pending} != pushed {self.pushed}")
