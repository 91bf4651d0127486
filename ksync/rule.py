"""The decision a parameter server applies to every pushed gradient.

A `Rule` is what a policy decides at one moment: how many gradients make an update,
whether a worker that has contributed to the current round waits for the next version,
and what happens to a gradient computed from an old version. It is plain data so the
same rule drives the TensorFlow PS state, the pure-Python reference state and the
discrete-event simulator.

Example:

>>> rule = Rule(k=3, wait=True, max_staleness=0)
>>> rule.weight(staleness=0), rule.weight(staleness=1)
(1.0, 0.0)
"""

import dataclasses
import math

STALE_ACTIONS = ("drop", "downweight")


@dataclasses.dataclass(frozen=True)
class Rule:
    """How the PS treats pushed gradients until the policy decides otherwise.

    Args:
      k: gradients aggregated into one update (1 = apply every gradient).
      wait: True for k-sync: a worker whose gradient joined the current round waits for
        the next version before it starts another step. False for k-async.
      max_staleness: gradients whose staleness (current version minus the version they
        were computed from) exceeds this are dropped or down-weighted. None = unbounded.
      stale_action: "drop" or "downweight" (weight 1 / (1 + staleness)) beyond the bound.
      staleness_scaling: weight every accepted gradient 1 / (1 + staleness), the
        staleness-aware learning rate of Zhang et al. (2016): asynchrony acts like extra
        momentum, and without it K-async over many workers diverges with momentum 0.9.
      lr_factor: a multiplier of the learning-rate gain of every commit under this rule
        (a number > 0, below 1 to step less than the user's rate; `ksync.lr_scaling`:
        the commit's gain is ``lr_factor * r``). No effect on a run that does not scale
        its rate. `ksync.Adaptive` sets it from the loss (``loss_step``): halved when
        the smoothed loss rises, and at a loss stall with no larger update left.
    """

    k: int
    wait: bool
    max_staleness: int | None = None
    stale_action: str = "drop"
    staleness_scaling: bool = False
    lr_factor: float = 1.0

    def __post_init__(self):
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"K must be an integer >= 1 (gradients per update), got {self.k!r}.")
        if self.max_staleness is not None and (
                not isinstance(self.max_staleness, int) or self.max_staleness < 0):
            raise ValueError("max_staleness must be None (unbounded) or an integer >= 0, got "
                             f"{self.max_staleness!r}.")
        if not (isinstance(self.lr_factor, (int, float)) and not isinstance(self.lr_factor, bool)
                and math.isfinite(self.lr_factor) and self.lr_factor > 0):
            raise ValueError(f"lr_factor must be a finite number > 0 (a multiplier of the "
                             f"learning-rate gain; 1.0: none), got {self.lr_factor!r}.")
        if self.stale_action not in STALE_ACTIONS:
            raise ValueError(f"stale_action must be one of {STALE_ACTIONS}, got "
                             f"{self.stale_action!r}.")

    def weight(self, staleness: int) -> float:
        """Multiplier of a gradient's sample weight; 0.0 means the gradient is dropped."""
        if self.max_staleness is None or staleness <= self.max_staleness:
            return 1.0 / (1.0 + staleness) if self.staleness_scaling else 1.0
        return 0.0 if self.stale_action == "drop" else 1.0 / (1.0 + staleness)

    def describe(self) -> str:
        mode = "sync" if self.wait else "async"
        bound = "unbounded" if self.max_staleness is None else (
            f"{self.stale_action} beyond staleness {self.max_staleness}")
        scaling = ", weight 1/(1+staleness)" if self.staleness_scaling else ""
        factor = "" if self.lr_factor == 1.0 else f", lr gain x {self.lr_factor:.3g}"
        return f"K={self.k} {mode}, {bound}{scaling}{factor}"
