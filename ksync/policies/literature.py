"""Rules from the literature: staged schedules (Sync-Switch, ASHL), Rennala SGD,
Ringmaster ASGD and AdaSync, each with its paper and where ksync departs from it.

>>> from ksync.policies.literature import SyncSwitch
>>> SyncSwitch(switch_after=0).rule(num_workers=4).describe()
'K=1 async, unbounded'
"""

import math

from ksync.policies.base import Policy, check_int
from ksync.policies.fixed import ASP, BSP, KSync
from ksync.rule import Rule


class _Staged(Policy):
    """Two fixed rules, switching once at update ``switch_after`` (a baseline schedule)."""

    refresh_every = 5

    def __init__(self, switch_after: int):
        check_int("switch_after", switch_after, 0)
        self.switch_after = switch_after

    def _stages(self, num_workers):
        raise NotImplementedError

    def _rule(self, num_workers):
        first, second = self._stages(num_workers)
        return first if self.switch_after > 0 else second

    def observe(self, observation, context):
        second = self._stages(context.num_workers)[1]
        if observation.version < self.switch_after or context.rule == second:
            return None
        return second, f"stage 2 after {self.switch_after} updates"

    def get_config(self):
        return {"switch_after": self.switch_after}


class SyncSwitch(_Staged):
    """BSP for the first ``switch_after`` updates, then ASP (Sync-Switch, Li et al. 2021)."""

    name = "syncswitch"

    def _stages(self, num_workers):
        return BSP()._rule(num_workers), ASP()._rule(num_workers)


class ASHL(_Staged):
    """ASP for the first ``switch_after`` updates, then semi-synchronous K-sync with
    K = ceil(N / 2) (the two-stage schedule of ASHL; its gradient compression is not
    modelled)."""

    name = "ashl"

    def _stages(self, num_workers):
        return ASP()._rule(num_workers), KSync(k=math.ceil(num_workers / 2))._rule(num_workers)


class Rennala(Policy):
    """Rennala SGD (Tyurin and Richtárik, "Optimal time complexities of parallel
    stochastic optimization methods under a fixed computation model", NeurIPS 2023): an
    update from ``batch`` (B) gradients computed at the current version, from whichever
    workers deliver them first. A fast worker contributes several gradients to one round,
    a gradient computed at an older version is discarded, and no worker ever waits.

    As a `Rule`: ``Rule(k=B, wait=False, max_staleness=0)``. B may exceed the number of
    workers: the fast ones fill the round (the controller caps K at the live workers for
    waiting rules only). The paper averages the round's gradients with equal weights;
    ksync weights each by its sample count, the same with equal batches. Its theory
    picks B from the gradient noise and the target accuracy, not from the workers'
    speeds; in practice tune B (the benchmark's grid does).

    Example:

    >>> import ksync
    >>> ksync.Rennala(batch=16).rule(num_workers=4).describe()
    'K=16 async, drop beyond staleness 0'
    """

    name = "rennala"

    def __init__(self, batch: int):
        check_int("Rennala batch (B, gradients per update)", batch, 1)
        self.batch = batch

    def _rule(self, num_workers):
        return Rule(k=self.batch, wait=False, max_staleness=0)

    def get_config(self):
        return {"batch": self.batch}


class Ringmaster(Policy):
    """Ringmaster ASGD (Maranjyan, Tyurin and Richtárik, "Ringmaster ASGD: the first
    asynchronous SGD with optimal time complexity", ICML 2025): asynchronous SGD that
    applies every gradient on arrival and ignores those whose delay (staleness: updates
    applied since the gradient's parameters were read) is above ``max_delay``.

    As a `Rule`: ``Rule(k=1, wait=False, max_staleness=max_delay)``. Under ksync's drop
    semantics this is exactly ``SSP(max_staleness=max_delay)``. It keeps its own name
    because it is a different method with its own parameter and theory: SSP's bound is
    a consistency tolerance, Ringmaster's threshold is chosen, in the paper, from the
    gradient noise and the target accuracy and not from the workers' speeds, which is
    what makes the method optimal without knowing them; results and tuning grids are
    reported under the paper's name. Two differences from the paper: its threshold R
    seems to admit delays *below* R (a public implementation restarts a worker whose
    delay reaches R, and Ringmaster LMO, which builds on it, accepts delays below R;
    the paper's own text was not at hand to check), which makes its R ``max_delay + 1``;
    and its variant with calculation stops (Algorithm 5) interrupts a worker whose
    delay reaches R, while ksync cannot interrupt a running step, so such a gradient is
    computed and dropped on arrival (as in Algorithm 4, without stops).

    Example:

    >>> import ksync
    >>> ksync.Ringmaster(max_delay=3).rule(num_workers=8).describe()
    'K=1 async, drop beyond staleness 3'
    """

    name = "ringmaster"

    def __init__(self, max_delay: int):
        check_int("Ringmaster max_delay (R, the largest delay applied)", max_delay, 0)
        self.max_delay = max_delay

    def _rule(self, num_workers):
        return Rule(k=1, wait=False, max_staleness=self.max_delay)

    def get_config(self):
        return {"max_delay": self.max_delay}


class AdaSync(Policy):
    """AdaSync (Dutta, Wang and Joshi, "Slow and stale gradients can win the race:
    error-runtime trade-offs in distributed SGD", AISTATS 2018; journal version "Slow and
    stale gradients can win the race", IEEE JSAIT 2021): K-sync SGD whose K is raised
    during training as the training loss falls. A small K early on runs fast while the
    loss falls whatever the gradient noise; a larger K later lowers the noise floor.

    K starts at ``k0`` and, every ``refresh_every`` updates, becomes
    ``min(workers, ceil(k0 * sqrt(F0 / F)))``, where F0 is the first loss reported and
    F the latest (the paper's rule K = ceil(sqrt(F(w0) / F(wt)) * K0), written from our
    reading of it; its text was not at hand to re-check). Two choices of ours: F0 is
    the first *reported* loss (with `strategies.callbacks.KSyncLossCallback` the first
    epoch's, not the loss at initialisation), and K never goes down (a loss that ticks
    up from noise does not undo a round size). The loss comes from ``Observation.loss``:
    on the strategy `KSyncStrategy.report_loss` (the callback calls it), in the
    simulator its evaluated loss. Without any reported loss K stays at ``k0``, and the
    controller's `explain` says so.

    Example (through the controller, which keeps F0 and the latest loss for the run):

    >>> import ksync
    >>> controller = ksync.RuleController(ksync.AdaSync(k0=1, refresh_every=10), 8)
    >>> def at(version, loss):
    ...     m = ksync.Measurement(version, live_workers=tuple(range(8)), loss=loss)
    ...     return controller.refresh(m).rule.k
    >>> at(0, None), at(10, 2.0)        # the first loss is F0: K stays 1
    (1, 1)
    >>> at(20, 0.5)                     # ceil(1 * sqrt(2.0 / 0.5)) = 2
    2
    >>> at(30, 0.01)                    # sqrt(200) > 8: capped at the 8 workers
    8
    >>> controller.explain()  # doctest: +ELLIPSIS
    'K=8 sync, drop beyond staleness 0 since version 30: loss fell from 2 to 0.01: ...'
    """

    name = "adasync"

    def __init__(self, k0: int = 1, refresh_every: int = 20):
        check_int("AdaSync k0 (the starting K)", k0, 1)
        check_int("refresh_every", refresh_every, 1)
        self.k0 = k0
        self.refresh_every = refresh_every

    def _rule(self, num_workers):
        return Rule(k=self.k0, wait=True, max_staleness=0)

    def _k(self, first_loss, loss, context):
        """K for ``loss`` given F0 = ``first_loss``: never below the current K, never
        above the workers; and the loss ratio it came from."""
        ratio = first_loss / loss if loss > 0 else math.inf
        wanted = self.k0 * math.sqrt(ratio) if ratio > 1 else self.k0
        return min(context.num_workers, max(context.rule.k, math.ceil(wanted - 1e-9))), ratio

    def observe(self, observation, context):
        loss = observation.loss
        # The controller noted this loss in the context (as F0 if it is the first).
        if loss is None or not math.isfinite(loss) or context.first_loss is None:
            return None
        first = context.first_loss[1]
        if first <= 0:
            return None  # a loss that starts at or below zero has no ratio to scale K by
        k, _ = self._k(first, float(loss), context)
        if k == context.rule.k:
            return None
        return (Rule(k=k, wait=True, max_staleness=0),
                f"loss fell from {first:.4g} to {float(loss):.4g}: "
                f"K = min({context.num_workers}, ceil({self.k0} * sqrt(F0 / F))) = {k}")

    def status(self, context):
        if context.first_loss is None:
            return (f"AdaSync: no training loss reported yet, so K stays at K0={self.k0} "
                    "(report it with strategy.report_loss(loss) or "
                    "strategies.callbacks.KSyncLossCallback)")
        (version0, first), (version, loss) = context.first_loss, context.last_loss
        if first <= 0:
            return (f"AdaSync: initial loss F0={first:.4g} is not positive, so K stays at "
                    f"{context.rule.k}")
        if version == version0:
            return f"AdaSync: initial loss F0={first:.4g} at version {version0}, K0={self.k0}"
        k, ratio = self._k(first, loss, context)
        return (f"AdaSync: loss {loss:.4g} from F0={first:.4g}: ceil({self.k0} * "
                f"sqrt({ratio:.3g})) capped at {context.num_workers} workers, never "
                f"lowered: K={k}")

    def get_config(self):
        return {"k0": self.k0, "refresh_every": self.refresh_every}
