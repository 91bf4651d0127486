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

import dataclasses
import inspect
import math
import statistics
import typing

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
        (`ksync.lr_scaling`: "adascale", "linear", "sqrt" or None), which decides how
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
    #: (`ksync.lr_scaling.resolve`): none for a fixed rule, whose rate the user tunes.
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


def _check_int(name, value, minimum):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


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
        _check_int("K", k, 1)
        self.k = k

    def _rule(self, num_workers):
        return Rule(k=self.k, wait=True, max_staleness=0)

    def get_config(self):
        return {"k": self.k}


class KAsync(Policy):
    """K-async SGD: an update after any K gradients; workers never wait (K=1 is ASP)."""

    name = "kasync"

    def __init__(self, k: int, max_staleness: int | None = None):
        _check_int("K", k, 1)
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
        _check_int("backups", backups, 0)
        self.backups = backups

    def _rule(self, num_workers):
        if self.backups >= num_workers:
            raise ValueError(f"BackupWorkers(backups={self.backups}) leaves no gradient per "
                             f"update on {num_workers} worker(s); use backups < {num_workers}.")
        return Rule(k=num_workers - self.backups, wait=True, max_staleness=0)

    def get_config(self):
        return {"backups": self.backups}


class _GoodputInputs(typing.NamedTuple):
    """`Adaptive`'s inputs from one observation (live workers only)."""

    times: list         # step time now (a stalled step's running time)
    usual: list         # usual step time
    batches: list       # samples per step
    noise_scale: float  # B_simple, measured or assumed
    measured: bool
    exposure: float


#: worker batches in the noise scale `Adaptive` assumes until the PS has measured one.
#: Not the samples of a BSP update, which grow with the cluster: on 256 simulated
#: workers (8,192 samples) that sent the first decision to K-sync, where the noise
#: scale then measured was 10-30 times what K-async measures (7,600-10,700 samples
#: against 100-900), and kept it there, at about 1.5x K-async's time to target.
ASSUMED_NOISE_BATCHES = 16


#: weight of a new loss report in the smoothed loss `Adaptive`'s stall test follows.
LOSS_SMOOTHING = 0.3
#: loss reports a stall needs besides its updates: with a loss reported once an epoch,
#: ``stall_updates`` can pass between two reports.
STALL_REPORTS = 3
#: an update this close to the floor's size counts as the floor's (measured batches
#: move a little between windows).
FLOOR_SLACK = 1.05


def _assumed_noise_scale(batch: float, workers: int) -> float:
    """The noise scale `Adaptive` assumes before one is measured, in ``batch`` units."""
    return batch * min(workers, ASSUMED_NOISE_BATCHES)


class Adaptive(Policy):
    """Choose the rule with the highest predicted goodput, every ``refresh_every`` updates.

    Goodput is training progress per second: updates per second times what an update is
    worth (`ksync.goodput`). From each live worker's measured step time (or, for a
    stalled worker, its running step's time) and batch, the model predicts for every
    candidate rule (K-sync for K on a grid, BSP included; K-async for K on a grid with a
    staleness bound that drops only a stalled step's gradient) the updates per second,
    the samples per update and each worker's staleness. An update's worth is its batch
    efficiency ``M / (M + B')``, with ``B'`` the gradient noise scale ``B`` the PS
    measures (`ksync.noise`) averaged over momentum's horizon, times the mean worth of
    its gradients' staleness, ``1 / (1 + (s / tau)^3)`` with ``tau =
    staleness_tolerance * M / (M + B) / (1 + K / gradients_halving)`` for an update of
    K gradients: the noisier an update, and the more gradients it sums, the less a
    stale gradient is worth. ``B`` grows as the loss falls, which moves the choice toward
    larger, fresher updates as training goes. It starts with the rule the
    model picks for equal workers whose whole step is exposed, at the noise scale it
    assumes until one is measured (not with BSP: a synchronous start, then K-async, was
    slower in the simulated benchmark than K-async from the start), decides first after
    ``first_refresh`` updates, and moves to another rule only when that rule's predicted
    goodput beats the current one's by more than ``hysteresis``. `ksync.RuleController`
    keeps each decision's reason: the noise scale, the exposure, the chosen rule's
    predicted updates/s, samples, staleness and tolerance, and the runner-up's goodput.

    A run of Adaptive scales the learning rate at each commit by AdaScale's gain
    (`lr_scaling`, `ksync.lr_scaling`; the strategy's or simulator's ``lr_scaling``
    overrides it). Once the noise scale is measured the model then counts an update by
    its progress in base steps (the gain the PS applies, at most AdaScale's) instead of
    ``M / (M + B')``, and divides the staleness tolerance by the gain
    (`ksync.goodput`); ``Context.lr_scaling`` says which scaling the run applies.

    Args:
      refresh_every: updates between two decisions.
      momentum: the optimizer's momentum; it averages gradient noise over about
        ``(1 + momentum) / (1 - momentum)`` updates, which divides the noise scale that
        matters for an update's batch efficiency.
      staleness_tolerance: staleness (in updates) at which a gradient of a noise-free
        update of one gradient is worth half a fresh one; an update of ``M`` samples
        at noise scale ``B`` tolerates ``M / (M + B)`` of it.
      gradients_halving: the gradients per update at which that tolerance is halved
        again: an update of ``K`` gradients tolerates ``1 / (1 + K / gradients_halving)``
        of it. The defaults (14 and 25) were fitted on the simulated benchmark (SGD,
        momentum 0.9, whole steps exposed) at 8, 64 and 256 workers; see README's
        policy section for how.
      noise_scale: the noise scale ``B_simple`` to assume until the PS has measured one
        (None: the samples of ``ASSUMED_NOISE_BATCHES`` workers' batches, or of all
        workers when there are fewer).
      hysteresis: relative goodput gain a new rule needs over the current one (the
        inputs are noisy, and a small value flaps between near-equal K).
      stall_updates: updates after which a training loss that has not fallen by
        ``stall_margin`` means the current updates have reached their noise floor:
        from then on only rules with larger updates (more samples each) are chosen,
        for the rest of the run. None: never. Needs a loss (``Observation.loss``:
        `strategies.callbacks.KSyncLossCallback`, or the simulator's evaluation);
        without one the rule follows the goodput model alone.
      stall_margin: relative fall of the smoothed loss that counts as progress.

    Example: the rule it starts with, and its decisions on four workers of 32 samples a
    step, one four times slower (here from BSP, as a user's earlier rule): K-async early
    in training (noise scale 100), waiting for the three fast workers later (600).

    >>> import ksync
    >>> policy = ksync.Adaptive()
    >>> policy.rule(8).describe()
    'K=3 async, drop beyond staleness 5'
    >>> context = ksync.Context(num_workers=4, rule=ksync.BSP().rule(4))
    >>> for noise_scale in (100.0, 600.0):
    ...     observation = ksync.Observation(
    ...         version=20, iteration_times=(0.1, 0.1, 0.1, 0.4), live_workers=(0, 1, 2, 3),
    ...         noise_scale=noise_scale, batch_sizes=(32, 32, 32, 32))
    ...     print(policy.observe(observation, context)[0].describe())
    K=2 async, drop beyond staleness 12
    K=3 sync, drop beyond staleness 0
    """

    name = "adaptive"
    first_refresh = 5
    #: no scaling unless asked (``lr_scaling="adascale"``, `ksync.lr_scaling`): in the
    #: simulator AdaScale made Adaptive 1.2-1.5x slower on 8 workers (its gain took
    #: the step past tuned BSP's under momentum 0.9) and 1.3-1.9x faster on 64; the
    #: default waits for the gain to account for momentum and for the fair race.
    lr_scaling = None

    def __init__(self, refresh_every: int = 20, momentum: float = 0.9,
                 staleness_tolerance: float = 14.0, gradients_halving: float = 25.0,
                 noise_scale: float | None = None, hysteresis: float = 0.15,
                 stall_updates: int | None = 200, stall_margin: float = 0.01):
        _check_int("refresh_every", refresh_every, 1)
        if not (isinstance(momentum, (int, float)) and 0.0 <= momentum < 1.0):
            raise ValueError(f"momentum must be a number in [0, 1), the optimizer's "
                             f"momentum, got {momentum!r}.")
        if not (isinstance(staleness_tolerance, (int, float)) and staleness_tolerance > 0):
            raise ValueError(f"staleness_tolerance must be a number of updates > 0, got "
                             f"{staleness_tolerance!r}.")
        if not (isinstance(gradients_halving, (int, float)) and gradients_halving > 0):
            raise ValueError(f"gradients_halving must be a number of gradients > 0 "
                             f"(math.inf: no halving), got {gradients_halving!r}.")
        if noise_scale is not None and not (isinstance(noise_scale, (int, float))
                                            and noise_scale > 0):
            raise ValueError(f"noise_scale must be None (measure it) or a number > 0, got "
                             f"{noise_scale!r}.")
        if not (isinstance(hysteresis, (int, float)) and hysteresis >= 0):
            raise ValueError(f"hysteresis must be a number >= 0, got {hysteresis!r}.")
        if stall_updates is not None:
            _check_int("stall_updates (None: never)", stall_updates, 1)
        if not (isinstance(stall_margin, (int, float)) and 0 < stall_margin < 1):
            raise ValueError(f"stall_margin must be a fraction in (0, 1), e.g. 0.01 for "
                             f"1 %, got {stall_margin!r}.")
        self.refresh_every = refresh_every
        self.momentum = float(momentum)
        self.staleness_tolerance = float(staleness_tolerance)
        self.gradients_halving = float(gradients_halving)
        self.noise_scale = None if noise_scale is None else float(noise_scale)
        self.hysteresis = float(hysteresis)
        self.stall_updates = stall_updates
        self.stall_margin = float(stall_margin)

    def _model(self, context=None, measured: bool = True) -> dict:
        """The goodput model's parameters, as `goodput.forecast` and `goodput.rank` take
        them, with the run's learning-rate scaling and base batch (``context``) once the
        noise scale is measured. Before, the PS's AdaScale gain is still warming up from
        1 (`ksync.lr_scaling.WARMUP_ROUNDS` is `ksync.noise.MIN_NOISE_ROUNDS`), and the
        model without scaling holds."""
        scaling = context.lr_scaling if context is not None and measured else None
        base = context.base_batch if context is not None else None
        return dict(tolerance=self.staleness_tolerance, momentum=self.momentum,
                    halving=self.gradients_halving, scaling=scaling, base_batch=base)

    def _rule(self, num_workers):
        # Before anything is measured: the rule the model picks for equal workers whose
        # whole step is exposed, at the assumed noise scale (in units of a worker's
        # batch). Measured speeds, noise and staleness refine it after
        # ``first_refresh`` updates.
        from ksync import goodput
        equal = [1.0] * num_workers
        return goodput.rank(equal, equal, _assumed_noise_scale(1.0, num_workers),
                            **self._model())[0].rule

    def _inputs(self, observation, context) -> "_GoodputInputs":
        """What the model needs from ``observation``, each computed once."""
        from ksync import goodput
        now = observation.effective_times()
        live = [w for w in observation.live_workers
                if now[w] is not None and math.isfinite(now[w]) and now[w] > 0]
        sizes = observation.batch_sizes
        times = [now[w] for w in live]
        # A worker with no push in the window (stalled) has its batch of the others': a
        # size of 1 would make the noise scale, in samples, dwarf its updates.
        known = [float(sizes[w]) for w in live if sizes and sizes[w]]
        usual_batch = statistics.median(known) if known else 1.0
        batches = [float(sizes[w]) if sizes and sizes[w] else usual_batch for w in live]
        measured = observation.noise_scale
        simple = measured if measured is not None else (
            self.noise_scale if self.noise_scale is not None else
            _assumed_noise_scale(usual_batch, len(batches)))
        # Exposure: the staleness measured under the current rule against the staleness
        # predicted for whole steps (unbounded: with whole steps exposed a bound may drop
        # every worker in the model); 1 under a waiting rule, which shows none.
        exposure = 1.0
        if times and not context.rule.wait and observation.staleness_mean is not None:
            unbounded = dataclasses.replace(context.rule, max_staleness=None)
            whole = goodput.forecast(unbounded, times, batches, simple,
                                     **self._model(context, measured is not None)).staleness
            if whole > 0:
                exposure = min(1.0, max(0.05, observation.staleness_mean / whole))
        usual = [observation.iteration_times[w] or t for w, t in zip(live, times)]
        return _GoodputInputs(times, usual, batches, simple, measured is not None, exposure)

    def exposure(self, observation, context) -> float:
        """The fraction of a step between the parameter read and the push, from the
        staleness measured under the current rule against the staleness `forecast`
        predicts for a whole step; 1 (a whole step) under a waiting rule, which shows
        none."""
        return self._inputs(observation, context).exposure

    def forecasts(self, observation, context) -> list:
        """Every candidate's `ksync.goodput.Forecast` on ``observation``, best first
        (empty while no live worker has a step time)."""
        return self._rank(self._inputs(observation, context), context)

    def _rank(self, inputs, context):
        from ksync import goodput
        if not inputs.times:
            return []
        return goodput.rank(inputs.times, inputs.batches, inputs.noise_scale,
                            exposure=inputs.exposure, usual_times=inputs.usual,
                            **self._model(context, inputs.measured))

    def floor(self, observation, context, samples: float) -> float:
        """The run's floor on samples per update after ``observation``'s loss, given the
        current rule's ``samples`` per update; 0 while the loss has never stalled.

        The smoothed loss (each new report weighted `LOSS_SMOOTHING`) stalls when it
        has not fallen by ``stall_margin`` below its best for ``stall_updates`` updates
        and `STALL_REPORTS` reports. With the learning rate fixed, SGD's loss stops
        falling at a floor set by the noise of its updates, and only larger updates
        lower it; the measured noise scale does not show it (it settles where the rule
        that measures it keeps the gradient), so the floor is what moves the rule to
        larger updates late in training. It rises to the current update's size at each
        stall and never falls. Kept in ``context.memory``."""
        memory = context.memory
        loss = observation.loss
        # A new report is a new value: callers repeat their latest loss between reports.
        if loss is not None and math.isfinite(loss) and loss != memory.get("loss"):
            smoothed = memory.get("smoothed")
            smoothed = loss if smoothed is None else smoothed + LOSS_SMOOTHING * (
                loss - smoothed)
            memory.update(loss=float(loss), smoothed=float(smoothed))
            best = memory.get("best")
            if best is None or best - smoothed > self.stall_margin * abs(best):
                memory.update(best=float(smoothed), since=int(observation.version), reports=0)
            else:
                memory["reports"] += 1
        if (self.stall_updates is not None and "since" in memory
                and observation.version - memory["since"] >= self.stall_updates
                and memory["reports"] >= STALL_REPORTS):
            memory["floor"] = max(memory.get("floor", 0.0), float(samples))
            memory.update(since=int(observation.version), reports=0,
                          floor_version=int(observation.version))
        return memory.get("floor", 0.0)

    def observe(self, observation, context):
        from ksync import goodput
        inputs = self._inputs(observation, context)
        ranked = self._rank(inputs, context)
        if not ranked:
            return None
        current = goodput.forecast(context.rule, inputs.times, inputs.batches,
                                   inputs.noise_scale, exposure=inputs.exposure,
                                   **self._model(context, inputs.measured))
        floor = self.floor(observation, context, current.samples_per_update)
        above = [f for f in ranked if f.samples_per_update > FLOOR_SLACK * floor]
        best = above[0] if above else max(ranked, key=lambda f: f.samples_per_update)
        if best.rule == context.rule:
            return None
        current_goodput = (current.goodput
                           if current.samples_per_update > FLOOR_SLACK * floor else 0.0)
        if best.goodput <= (1.0 + self.hysteresis) * current_goodput:
            return None
        per_update = goodput.per_update(inputs.noise_scale, self.momentum)
        how = (f"lr scaling {context.lr_scaling}" if context.lr_scaling and inputs.measured
               else f"{per_update:.0f} per update under momentum {self.momentum:g}")
        reason = (f"noise scale {inputs.noise_scale:.0f} "
                  f"({'measured' if inputs.measured else 'assumed'}; {how}), exposure "
                  f"{inputs.exposure:.2f}: {best.describe()}; current rule's goodput "
                  f"{current.goodput:.3g}")
        if floor:
            reason += (f"; the loss stalled, so updates of at most {floor:.0f} samples "
                       f"are ruled out")
        runner_up = [f for f in (above or ranked) if f is not best]
        if runner_up:
            reason += f"; runner-up {runner_up[0].rule.describe()} {runner_up[0].goodput:.3g}"
        return best.rule, reason

    def status(self, context):
        floor = context.memory.get("floor")
        if not floor:
            return None
        return (f"Adaptive: the loss stalled at version {context.memory['floor_version']}, "
                f"so updates of at most {floor:.0f} samples are ruled out")

    def get_config(self):
        return {"refresh_every": self.refresh_every, "momentum": self.momentum,
                "staleness_tolerance": self.staleness_tolerance,
                "gradients_halving": self.gradients_halving,
                "noise_scale": self.noise_scale, "hysteresis": self.hysteresis,
                "stall_updates": self.stall_updates, "stall_margin": self.stall_margin}


class _Staged(Policy):
    """Two fixed rules, switching once at update ``switch_after`` (a baseline schedule)."""

    refresh_every = 5

    def __init__(self, switch_after: int):
        _check_int("switch_after", switch_after, 0)
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
        _check_int("Rennala batch (B, gradients per update)", batch, 1)
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
        _check_int("Ringmaster max_delay (R, the largest delay applied)", max_delay, 0)
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
        _check_int("AdaSync k0 (the starting K)", k0, 1)
        _check_int("refresh_every", refresh_every, 1)
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


_BY_NAME = {cls.name: cls for cls in (BSP, ASP, SSP, KSync, KAsync, BackupWorkers, Adaptive,
                                      SyncSwitch, ASHL, Rennala, Ringmaster, AdaSync)}


def parse(spec: str) -> Policy:
    """A fresh policy from ``name`` or ``name:key=value;...`` (e.g. ``"ksync:k=8"``)."""
    import json
    name, _, args = str(spec).strip().partition(":")
    kwargs = {}
    for item in filter(None, args.split(";")):
        key, _, value = item.partition("=")
        try:
            kwargs[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key.strip()] = value
    return get(name, **kwargs)


def get(name: str, **kwargs) -> Policy:
    """A policy by name, e.g. ``get("ksync", k=2)``."""
    if isinstance(name, Policy):
        return name
    key = str(name).lower().replace("-", "").replace("_", "")
    if key not in _BY_NAME:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(_BY_NAME)}.")
    cls = _BY_NAME[key]
    # Name the arguments and show a working call, not Python's bare "missing 1 required
    # positional argument" or "unexpected keyword argument".
    params = {p: v for p, v in inspect.signature(cls).parameters.items()
              if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)}
    missing = [p for p, v in params.items()
               if v.default is inspect.Parameter.empty and p not in kwargs]
    unknown = [k for k in kwargs if k not in params]
    if missing or unknown:
        takes = ", ".join(f"{p}=..." if v.default is inspect.Parameter.empty
                          else f"{p}={v.default!r}" for p, v in params.items())
        problem = " and ".join(([f"needs {', '.join(missing)}"] if missing else []) +
                               ([f"has no argument {', '.join(unknown)}"] if unknown else []))
        message = f"policy {name!r} {problem}; it takes {cls.__name__}({takes})"
        if missing:
            p = missing[0]
            message += f', e.g. ksync.get("{key}", {p}=2) or the spec "{key}:{p}=2"'
        raise ValueError(message + ".")
    return cls(**kwargs)
