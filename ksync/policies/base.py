"""The base of the policies: what a policy is given (`Observation`, `Context`), what it
answers (`Policy`), and the stall test the strategy and the simulator share.

>>> from ksync.policies.base import Observation
>>> Observation(version=3, iteration_times=(0.01, 0.01), live_workers=(0, 1),
...             running_times=(None, 0.5)).effective_times()   # worker 1 is stalled
(0.01, 0.5)
"""

import dataclasses

from ksync.rule import Rule


#: steps behind each worker's iteration time in an `Observation` (the strategy and the
#: simulator measure it the same way).
RECENT_STEPS = 10
#: a step running this many times its worker's usual step time is a stall.
STALL_FACTOR = 4.0


def stalled_workers(iteration_times, running_times) -> tuple:
    """Workers whose running step has taken over `STALL_FACTOR` times their usual step
    (for a worker with no finished step yet: the fastest worker's usual step).

    >>> stalled_workers((0.01, 0.01, None), (None, 0.5, 0.02))
    (1,)
    """
    known = [t for t in iteration_times if t]
    if not known or not running_times:
        return ()
    fastest = min(known)
    return tuple(w for w, (t, r) in enumerate(zip(iteration_times, running_times))
                 if r is not None and r > STALL_FACTOR * (t or fastest))


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the strategy measured over the last window, given to `Policy.observe`.

    Args:
      version: the PS version now.
      iteration_times: median time (s) of each worker's last `RECENT_STEPS` steps; None
        for a worker with no finished step.
      live_workers: indices of workers the coordinator considers alive.
      staleness_p95: 95th percentile of staleness in the window (None if no pushes).
      staleness_mean: mean staleness of the window's pushes (None if no pushes).
      running_times: seconds each worker's current step has run so far (None: not
        running); a step running far longer than usual is a stall (a frozen or suddenly
        slowed worker), seen before the step ends.
      loss: the latest training loss reported to the caller (None: none reported), e.g.
        by `strategies.callbacks.KSyncLossCallback` or the simulator's evaluation; the
        policies that follow the loss (`AdaSync`, and `Adaptive` to see it stall) read
        it, the others ignore it.
      noise_scale: the gradient noise scale ``B_simple`` measured by the PS over recent
        rounds (`ksync.noise`; None: not measured, e.g. only one gradient per update).
      batch_sizes: each worker's mean samples per step in the window (None: unknown).
    """

    version: int
    iteration_times: tuple
    live_workers: tuple
    staleness_p95: float | None = None
    staleness_mean: float | None = None
    running_times: tuple | None = None
    loss: float | None = None
    noise_scale: float | None = None
    batch_sizes: tuple | None = None

    def effective_times(self) -> tuple:
        """Each worker's iteration time as it stands now: its usual step time, or, for
        a stalled worker, the time its running step has taken so far."""
        stalled = stalled_workers(self.iteration_times, self.running_times)
        return tuple(self.running_times[w] if w in stalled else t
                     for w, t in enumerate(self.iteration_times))


@dataclasses.dataclass(frozen=True)
class Context:
    """What one run remembers for its policy, given to `Policy.observe` and
    `Policy.status` by the `ksync.RuleController` that owns it.

    Args:
      num_workers: workers of the cluster.
      rule: the policy's current rule: its initial rule or the last it chose (before
        the controller caps K at the live workers).
      first_loss: ``(version, loss)`` of the first finite training loss an observation
        carried, the current one included (None: no loss yet).
      last_loss: ``(version, loss)`` of the latest such loss (None: no loss yet).
      memory: the policy's own state for this run, JSON-able (the controller keeps it
        across observations and in its checkpoints; `Adaptive` keeps its loss record
        there).
      lr_scaling: the learning-rate scaling the PS applies at each commit
        (`ksync.lr_scaling`: "adascale", "power", "linear", "sqrt" or None), which decides how
        far an update steps and so what it is worth (`Adaptive`'s model).
      base_batch: samples of the batch the learning rate is meant for (one worker's
        batch; None: unknown, the observed median batch stands in).
    """

    num_workers: int
    rule: Rule
    first_loss: tuple | None = None
    last_loss: tuple | None = None
    memory: dict = dataclasses.field(default_factory=dict)
    lr_scaling: str | None = None
    base_batch: float | None = None


class Policy:
    """Base class of the policies: parameters only (see the module docstring).

    Subclasses set `name`, implement `_rule` and, to change the rule while training,
    ``refresh_every`` and `observe`.
    """

    name = "policy"
    #: the learning-rate scaling a run of this policy applies unless told otherwise
    #: (`ksync.lr_scaling.resolve`): none for a fixed rule, whose rate the user tunes
    #: (`Adaptive` sets "power": it chooses the update, so it chooses the step).
    lr_scaling = None
    #: updates between two calls of `observe` (0: never observed).
    refresh_every = 0
    #: updates before the first call of `observe` (None: ``refresh_every``).
    first_refresh = None

    def rule(self, num_workers: int) -> Rule:
        """The rule to start with on a cluster of `num_workers`; raises ValueError if unfit."""
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}.")
        rule = self._rule(num_workers)
        # Only a waiting rule needs K <= workers: each worker joins a round at most once
        # and then waits for it, so a larger K never completes. Without waiting a worker
        # pushes again into the same round (Rennala SGD's B may exceed the workers).
        if rule.wait and rule.k > num_workers:
            raise ValueError(
                f"{self!r} needs K={rule.k} gradients per update but the cluster has only "
                f"{num_workers} worker(s); use K <= {num_workers} or add workers.")
        return rule

    def _rule(self, num_workers: int) -> Rule:
        raise NotImplementedError

    def observe(self, observation: Observation, context: Context) -> tuple | None:
        """``(new rule, reason)`` given what was measured, or None to keep the current
        rule (``context.rule``)."""
        return None

    def status(self, context: Context) -> str | None:
        """One line on what the policy waits for or last computed (None: nothing to
        add), shown after the current rule's reason by `RuleController.explain`."""
        return None

    def get_config(self) -> dict:
        return {}

    def __getattr__(self, name):
        # Policies kept a run's history before; name where it went instead of a bare
        # AttributeError.
        if name in ("history", "explain", "record"):
            raise AttributeError(
                f"{type(self).__name__} has no {name!r}: a policy only decides, and the "
                f"run's controller keeps the history with reasons; use "
                f"strategy.explain(), strategy.controller.history or, in the simulator, "
                f"sim.controller.explain() / .history.")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def check_int(name, value, minimum):
    """Raise ValueError naming ``name`` unless ``value`` is an integer >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
