"""`Adaptive`: the rule of highest predicted goodput (its model is `ksync.goodput`), and
the loss-stall floor that moves it to larger updates late in training.
"""

import dataclasses
import math
import statistics
import typing

from ksync import goodput
from ksync.policies.base import Policy, check_int


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
#: under ``loss_step``: the factor of the learning-rate gain after the smoothed loss rose
#: by `RISE_MARGIN` over its lowest since the last change (or became non-finite).
STEP_BACKOFF = 0.5
#: relative rise of the smoothed loss over its lowest that counts as a step too large.
RISE_MARGIN = 0.1
#: under ``loss_step``: the factor of the gain at a loss stall with no larger update left.
STALL_DECAY = 0.5
#: the stall decays stop at this factor: the stall test (`floor`: 1 % in 200 updates)
#: also fires while the loss falls slowly late in training, and each decay there slows
#: it further (tuning seed 101 went to 0.008 and stalled 0.005 above the late target).
MIN_STALL_FACTOR = 0.125


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

    Adaptive owns the step size: by default the PS scales the user's learning rate at
    each commit by the "power" gain ``S_0 ** (2/3)``, ``S_0`` the update's fresh samples
    over one worker's batch (`ksync.lr_scaling`), and the loss moves a factor of that
    gain (``loss_step``). Under the power gain the model counts, once the noise scale is
    measured, what the larger step adds to an update, charges a waiting round its gate,
    and holds stale gradients to one tolerance (`ksync.goodput.PowerModel`); under
    "adascale", "linear" or "sqrt" (a strategy's or simulator's ``lr_scaling``): an
    update's progress in base steps, at most AdaScale's, and the tolerance divided by
    the gain; with ``lr_scaling=None`` the rate as given.
    ``Context.lr_scaling`` says which scaling the run applies.

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
      power_tolerance: under "power" scaling, the staleness (updates) at which a
        gradient is worth half a fresh one, at any update size (`ksync.goodput.PowerModel`;
        fitted with the scaling on the simulated benchmark's tuning seeds).
      round_overhead_s: under "power" scaling, what a waiting round costs beyond its
        K-th step: the gate's latency (20 ms on this project's loopback cluster).
      loss_step: under a learning-rate scaling, let the loss move the step: the rules
        it chooses carry a factor of the commit's gain (`ksync.Rule.lr_factor`, 1 at
        the start) that `step_factor` halves when the smoothed loss rises 10 % above
        its lowest or is not finite, and at a loss stall with no larger update left
        (down to 1/8 there); docs/design-notes.md, "A step the loss moves". No effect
        without a scaling or without a loss (`strategies.callbacks.KSyncLossCallback`,
        or the simulator's evaluation).

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
    #: the "power" gain with the loss's factor (``loss_step``): with every fixed rule at
    #: its own tuned rate it brought Adaptive from 1.7-4.5x the best tuned rule's time
    #: on 64-256 simulated workers to 0.99-1.20x, and reached the late target and a base
    #: rate 4x the default where the gain without the loss's factor did not
    #: (docs/user-guide.md, Learning rates).
    lr_scaling = "power"

    def __init__(self, refresh_every: int = 20, momentum: float = 0.9,
                 staleness_tolerance: float = 14.0, gradients_halving: float = 25.0,
                 noise_scale: float | None = None, hysteresis: float = 0.15,
                 stall_updates: int | None = 200, stall_margin: float = 0.01,
                 power_tolerance: float = 6.0, round_overhead_s: float = 0.02,
                 loss_step: bool = True):
        check_int("refresh_every", refresh_every, 1)
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
            check_int("stall_updates (None: never)", stall_updates, 1)
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
        if not isinstance(loss_step, bool):
            raise ValueError(f"loss_step must be True (the loss moves the step) or False, got "
                             f"{loss_step!r}.")
        self.loss_step = loss_step
        try:
            self.power = goodput.PowerModel(float(power_tolerance), float(round_overhead_s))
        except (TypeError, ValueError):
            raise ValueError(f"power_tolerance must be a number of updates > 0 and "
                             f"round_overhead_s a number of seconds >= 0, got "
                             f"{power_tolerance!r} and {round_overhead_s!r}.") from None

    def _model(self, context=None, measured: bool = True) -> dict:
        """The goodput model's parameters, as `goodput.forecast` and `goodput.rank` take
        them, with the run's learning-rate scaling and base batch (``context``): under
        "power" from the first decision (the PS applies that gain from the first
        commit), under the other scalings once the noise scale is measured (before, the
        PS's AdaScale gain is still warming up from 1: `ksync.lr_scaling.WARMUP_ROUNDS`
        is `ksync.noise.MIN_NOISE_ROUNDS`), the model without scaling until then."""
        scaling = context.lr_scaling if context is not None and (
            measured or context.lr_scaling == "power") else None
        base = context.base_batch if context is not None else None
        return dict(tolerance=self.staleness_tolerance, momentum=self.momentum,
                    halving=self.gradients_halving, scaling=scaling, base_batch=base,
                    power=self.power)

    def _rule(self, num_workers):
        # Before anything is measured: the rule the model picks for equal workers whose
        # whole step is exposed, at the assumed noise scale (in units of a worker's
        # batch). Measured speeds, noise and staleness refine it after
        # ``first_refresh`` updates.
        equal = [1.0] * num_workers
        return goodput.rank(equal, equal, _assumed_noise_scale(1.0, num_workers),
                            **self._model())[0].rule

    def _inputs(self, observation, context) -> "_GoodputInputs":
        """What the model needs from ``observation``, each computed once."""
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
        # every worker in the model); 1 under a waiting rule, which shows none, and until
        # the noise scale is measured: the first rounds' staleness is below its steady
        # state (every worker's first push is fresh), which flattered small asynchronous
        # updates (0.28 measured at the first decision on 256 equal workers).
        exposure = 1.0
        if (times and not context.rule.wait and observation.staleness_mean is not None
                and measured is not None):
            unbounded = dataclasses.replace(context.rule, max_staleness=None)
            whole = goodput.forecast(unbounded, times, batches, simple,
                                     **self._model(context)).staleness
            if whole > 0:
                exposure = min(1.0, max(0.05, observation.staleness_mean / whole))
        usual = [observation.iteration_times[w] or t for w, t in zip(live, times)]
        return _GoodputInputs(times, usual, batches, simple, measured is not None, exposure)

    def exposure(self, observation, context) -> float:
        """The fraction of a step between the parameter read and the push, from the
        staleness measured under the current rule against the staleness `forecast`
        predicts for a whole step; 1 (a whole step) under a waiting rule, which shows
        none, and before the noise scale is measured (the run's first rounds)."""
        return self._inputs(observation, context).exposure

    def forecasts(self, observation, context) -> list:
        """Every candidate's `ksync.goodput.Forecast` on ``observation``, best first
        (empty while no live worker has a step time)."""
        return self._rank(self._inputs(observation, context), context)

    def _rank(self, inputs, context):
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
        factor, why = self.step_factor(observation, context, largest=not above)
        current_goodput = (current.goodput
                           if current.samples_per_update > FLOOR_SLACK * floor else 0.0)
        if (dataclasses.replace(best.rule, lr_factor=context.rule.lr_factor) == context.rule
                or best.goodput <= (1.0 + self.hysteresis) * current_goodput):
            if factor == context.rule.lr_factor:
                return None
            return dataclasses.replace(context.rule, lr_factor=factor), why
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
        if why:
            reason += f"; {why}"
        return dataclasses.replace(best.rule, lr_factor=factor), reason

    def step_factor(self, observation, context, largest: bool) -> tuple:
        """``(factor, why)``: the learning-rate gain's factor (`ksync.Rule.lr_factor`) the
        loss asks for after ``observation`` (`floor` has taken its report), under
        ``loss_step`` and a learning-rate scaling only (else the current rule's).

        Halved (`STEP_BACKOFF`) when the smoothed loss rises `RISE_MARGIN` above its
        lowest since the last change, or the loss becomes non-finite: the step is past
        the edge (a base rate too high, or a gain too large for it). Halved
        (`STALL_DECAY`) at a loss stall when no larger update is left (``largest``):
        the stall moves the rule to larger updates while there are any (`floor`), whose
        gain grows with them, and the noise floor falls only with the step after that;
        once per new best loss (`floor`'s): a stall that a smaller step did not end is
        a step too small to make progress, not a noise floor; not below
        `MIN_STALL_FACTOR`. Never raised. Kept in ``context.memory``."""
        factor = context.rule.lr_factor
        if not (self.loss_step and context.lr_scaling):
            return factor, ""
        memory = context.memory
        loss, smoothed = observation.loss, memory.get("smoothed")
        if loss is not None and not math.isfinite(loss):
            if memory.get("finite", True):  # once per run of non-finite reports
                memory.update(finite=False, low=None)
                return factor * STEP_BACKOFF, "the loss is not finite: lr gain factor halved"
            return factor, ""
        memory["finite"] = True
        if smoothed is None:
            return factor, ""
        low = memory.get("low")
        if low is None or smoothed < low:
            memory["low"] = smoothed
        elif smoothed > (1.0 + RISE_MARGIN) * low:
            memory["low"] = smoothed
            return factor * STEP_BACKOFF, (f"the smoothed loss {smoothed:.4g} rose over "
                                           f"{low:.4g}: lr gain factor "
                                           f"{factor * STEP_BACKOFF:.3g}")
        if (largest and memory.get("floor_version") == observation.version
                and factor * STALL_DECAY >= MIN_STALL_FACTOR
                and memory["best"] < memory.get("decayed_best", math.inf)):
            memory["decayed_best"] = memory["best"]
            return factor * STALL_DECAY, (f"the loss stalled with no larger update left: lr "
                                          f"gain factor {factor * STALL_DECAY:.3g}")
        return factor, ""

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
                "stall_updates": self.stall_updates, "stall_margin": self.stall_margin,
                "power_tolerance": self.power.tolerance,
                "round_overhead_s": self.power.overhead_s,
                # only when off: a checkpoint names its policy by this, and those written
                # before the option existed must still restore
                **({} if self.loss_step else {"loss_step": False})}
