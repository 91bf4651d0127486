"""Goodput of a rule: how fast it updates, times what its updates are worth.

The model behind `ksync.Adaptive` (in the manner of Pollux, Qiao et al., OSDI 2021, for
parameter-server rules on workers of unequal speed). For a candidate `Rule` and each
worker's step time ``t_i`` and batch ``b_i`` it predicts

- **updates per second and samples per update.** K-sync (``wait``, staleness 0): a
  round ends with the K-th fastest worker's step; only the K fastest contribute.
  K-async: the accepted workers push at ``L = sum 1/t_i`` gradients per second, an
  update every K of them.
- **staleness.** Under K-async a gradient of worker i misses the updates the others'
  pushes make between its read of the parameters and its push: ``s_i = e (L t_i - 1) /
  K``, where the exposure ``e`` is the fraction of a step after the read (1 when the
  step computes on what it read; `ksync.Adaptive` measures it from the staleness the PS
  sees under an asynchronous rule). A bound drops the workers whose ``s_i`` exceeds it,
  which lowers L and so the others' staleness (a fixed point).
- **statistical efficiency of one update.** Batch: ``M / (M + B')`` for ``M`` samples,
  with ``B'`` the gradient noise scale ``B`` (`ksync.noise`) divided by ``(1 + mu) / (1 -
  mu)``, the updates over which momentum ``mu`` averages the gradient noise. Staleness: a
  gradient ``s`` updates old is worth ``1 / (1 + (s / tau)^3)`` of a fresh one, where
  ``tau = tolerance * M / (M + B) / (1 + K / halving)`` is where it has lost half its
  worth, for an update that sums ``K`` gradients. With momentum the loss of worth is
  steep, not gradual: gradients a few updates old still point downhill, those about
  one momentum oscillation old point across it. It is steeper the noisier an update
  (``M`` small against ``B``), and steeper again the more gradients an update sums.
  Both factors are empirical, fitted in the simulator on the benchmark's teacher task
  (SGD, momentum 0.9): with a constant ``tau`` the best value was 2 updates on 8
  workers (K = 4, about 128 samples an update) and 4 on 64 (K = 16, 512 samples), at
  noise scales of 200-900; ``M / (M + B)`` makes one ``tolerance`` serve both, but
  tolerates too much on 256 workers (K = 32-64), where the loss then swings near the
  target; ``1 / (1 + K / halving)`` with ``halving`` 25 gradients takes that back and
  leaves updates of a few gradients almost as they were. As ``B`` grows with
  training, the model asks for larger, fresher updates.

``goodput = updates/s x batch efficiency x mean staleness efficiency`` is in "ideal
updates per second": what an update of infinite batch at the current parameters would
do, per second.

**With learning-rate scaling** (``scaling``, `ksync.lr_scaling`: what the PS applies at
each commit) the batch efficiency above, which assumes a step that grows with the
batch, gives way to what the scaled step makes of an update: its progress in base steps
(steps of one worker's batch ``b0`` at the user's rate),

- ``min(r, r_ada)``, with ``r`` the gain the PS applies to the update's scale ``S``
  (its samples, each gradient's discounted by ``1 / (1 + s)`` for its predicted
  staleness, over ``b0``) and ``r_ada`` AdaScale's gain at the measured noise scale
  ``B``: a step ``r`` times the base one is worth ``r`` base steps as long as the
  update's noise allows it (``r <= r_ada``), and no more beyond. Under "adascale" it is
  ``r = r_ada = (1 + B / b0) / (1 + B / M)``, the batch efficiency ``M / (M + B)`` over
  that of one base batch: the same ``B`` the PS scales with, not divided by momentum's
  horizon (momentum is kept, and the scaled rate already accounts for the noise);
- the staleness tolerance divided by ``r``: the staleness a gradient tolerates falls as
  the step it is applied with grows (asynchronous SGD's stable rate is inversely
  proportional to its delay).

``goodput`` is then in base steps per second. Without scaling the model above is kept
as it was (its constants were fitted on it).

**Under "power" scaling** (`PowerModel`, `ksync.Adaptive`'s default) the PS steps each
update at ``r = S_0 ** (2/3)`` its base rate, ``S_0`` its fresh samples over ``b0``, the
best rate measured for waiting rules (`ksync.lr_scaling`). The model counts

- an update's worth as its batch efficiency above (at the base rate) times what the
  larger step adds, ``f(r) ** exponent``: on a quadratic with the best step ``r`` times
  the base one (McCandlish et al. 2018, the loss a step removes is ``2x - x^2`` of its
  best at ``x`` times the best step), stepping ``r`` instead of 1 removes ``f(r) = r^2 /
  (2r - 1)`` times as much; ``exponent`` (0.8) is what the simulated runs showed: BSP
  on 8 workers went 1.49x and 1.82x faster at 2x and 4x the base rate, BSP on 64 3.1x
  and 6.5x at 4x and 16x, K-sync 16 on 64 2.5x at 4x (tuning seed 100), some 0.8 of
  ``f`` in the log;
- a waiting round as its K-th step plus ``overhead_s``, the gate's latency (a waiting
  worker learns of the new version that long after the commit: 20 ms on this project's
  loopback cluster; the simulated rounds on 8 workers took 0.17 s for 0.127 s steps);
- a stale gradient as worth ``1 / (1 + (s / tolerance)^3)`` with one ``tolerance``
  (6 updates) at every scale, with no gain (stale gradients add no fresh samples), so
  the expected fresh share of an asynchronous update, ``max(0, 1 - s_i)``, sets its
  gain. Fitted on the teacher's tuning seeds (100-101; homogeneous and static, 8 and
  64 workers): 4 and 8 updates were each worse at one scale (8 workers chose BSP, 64
  chose K-async), 5 and 6 gave the same choices.

Example: 8 equal workers under momentum 0.9. At a noise scale of 256 samples K-async
with K = 4 beats BSP and ASP; at 600 (later in training) its updates are noisier, a
stale gradient is worth less, and BSP comes close.

>>> from ksync.rule import Rule
>>> times, batches = [0.1] * 8, [32] * 8
>>> for noise_scale in (256.0, 600.0):
...     for rule in (Rule(k=8, wait=True, max_staleness=0), Rule(k=1, wait=False, max_staleness=16),
...                  Rule(k=4, wait=False, max_staleness=4)):
...         f = forecast(rule, times, batches, noise_scale, tolerance=10.0, momentum=0.9)
...         print(f"{noise_scale:4.0f} {rule.describe():36s} {f.updates_per_s:5.1f} "
...               f"{f.staleness:4.1f} {f.tolerance:4.1f} {f.goodput:5.2f}")
 256 K=8 sync, drop beyond staleness 0     10.0  0.0  5.0  9.50
 256 K=1 async, drop beyond staleness 16   80.0  7.0  1.1  0.22
 256 K=4 async, drop beyond staleness 4    20.0  1.8  3.3 15.81
 600 K=8 sync, drop beyond staleness 0     10.0  0.0  3.0  8.90
 600 K=1 async, drop beyond staleness 16   80.0  7.0  0.5  0.02
 600 K=4 async, drop beyond staleness 4    20.0  1.8  1.8  8.08
"""

import dataclasses
import math
import statistics

from ksync import lr_scaling
from ksync.rule import Rule


@dataclasses.dataclass(frozen=True)
class Forecast:
    """What `forecast` predicts for one rule (``goodput`` is what `ksync.Adaptive`
    maximises)."""

    rule: Rule
    updates_per_s: float
    samples_per_update: float
    staleness: float         # mean staleness of accepted gradients, in updates
    tolerance: float         # staleness at which a gradient of this rule is worth half
    contributors: int        # workers whose gradients are accepted
    # With lr scaling: what the update is worth (base steps under "adascale", "linear"
    # and "sqrt"; batch efficiency times the larger step's worth under "power").
    batch_efficiency: float
    staleness_efficiency: float
    goodput: float
    gain: float = 1.0        # the learning-rate gain the PS applies to the update

    def describe(self) -> str:
        worth = (f"efficiency {self.batch_efficiency:.2f}" if self.gain == 1.0 else
                 f"lr gain {self.gain:.2f}, worth {self.batch_efficiency:.2f}")
        return (f"{self.rule.describe()}: {self.updates_per_s:.3g} updates/s of "
                f"{self.samples_per_update:.0f} samples from {self.contributors} worker(s), "
                f"staleness {self.staleness:.1f} (tolerance {self.tolerance:.1f}), {worth} x "
                f"{self.staleness_efficiency:.2f}, goodput {self.goodput:.3g}")


def batch_efficiency(samples: float, noise_scale: float) -> float:
    """Worth of an update of ``samples`` against one of infinite batch: ``M / (M + B)``.

    >>> batch_efficiency(64, 64)
    0.5
    """
    return samples / (samples + noise_scale) if samples > 0 else 0.0


def staleness_efficiency(staleness: float, tolerance: float) -> float:
    """Worth of a gradient ``staleness`` updates old against a fresh one.

    >>> staleness_efficiency(0, 4.0), staleness_efficiency(4, 4.0)
    (1.0, 0.5)
    """
    return 1.0 / (1.0 + (max(staleness, 0.0) / tolerance) ** 3)


def per_update(noise_scale: float, momentum: float) -> float:
    """The noise scale that matters per update: momentum ``mu`` averages the gradient
    noise over about ``(1 + mu) / (1 - mu)`` updates.

    >>> round(per_update(190.0, 0.9), 6)
    10.0
    """
    return noise_scale * (1.0 - momentum) / (1.0 + momentum)


def tolerance_at(samples: float, noise_scale: float, tolerance: float,
                 gradients: float = 1.0, halving: float = math.inf) -> float:
    """The staleness at which a gradient is worth half a fresh one, for updates of
    ``samples`` samples summing ``gradients`` gradients at noise scale ``noise_scale``:
    ``tolerance`` (that of a noise-free update of one gradient) times the update's
    signal fraction ``M / (M + B)``, divided by ``1 + gradients / halving``.

    >>> tolerance_at(128, 384, 8.0), tolerance_at(512, 384, 8.0)
    (2.0, 4.571428571428571)
    >>> tolerance_at(512, 384, 8.0, gradients=16, halving=16.0)
    2.2857142857142856
    """
    signal = samples / (samples + noise_scale) if samples > 0 else 1.0
    return tolerance * signal / (1.0 + gradients / halving)


def scaled_progress(scaling, scale: float, noise_scale: float, base_batch: float) -> tuple:
    """``(gain, progress)`` of an update of scale ``scale`` (base batches, staleness
    discounted) when the PS applies ``scaling``: the gain ``r`` it applies and the base
    steps the update is worth, ``min(r, r_ada)`` (module docstring).

    >>> scaled_progress("linear", 8.0, 64.0, 32.0), scaled_progress("adascale", 8.0, 64.0, 32.0)
    ((8.0, 2.4), (2.4, 2.4))
    """
    r = lr_scaling.gain(scaling, scale, noise_scale, base_batch)
    return r, min(r, lr_scaling.adascale_gain(scale, noise_scale, base_batch))


@dataclasses.dataclass(frozen=True)
class PowerModel:
    """The goodput model's constants under "power" scaling (module docstring): the
    staleness ``tolerance`` (updates), the waiting round's ``overhead_s`` beyond its
    K-th step, and the ``exponent`` of the step's worth `power_worth`."""

    tolerance: float = 6.0
    overhead_s: float = 0.02
    exponent: float = 0.8

    def __post_init__(self):
        if not (self.tolerance > 0 and self.overhead_s >= 0 and self.exponent > 0):
            raise ValueError(f"PowerModel needs tolerance > 0, overhead_s >= 0 and "
                             f"exponent > 0, got {self}.")


def power_worth(gain: float, exponent: float = 0.8) -> float:
    """What a step ``gain`` times the base one adds when it is the best step:
    ``(r^2 / (2r - 1)) ** exponent`` (1 at ``r = 1``).

    >>> power_worth(1.0), round(power_worth(4.0, 1.0), 4), round(power_worth(16.0), 3)
    (1.0, 2.2857, 5.414)
    """
    r = max(float(gain), 1.0)
    return (r * r / (2.0 * r - 1.0)) ** exponent


def forecast(rule: Rule, step_times, batches, noise_scale: float, tolerance: float,
             exposure: float = 1.0, momentum: float = 0.0,
             halving: float = math.inf, scaling: str | None = None,
             base_batch: float | None = None, power: PowerModel | None = None) -> Forecast:
    """Predicted throughput, staleness and goodput of ``rule`` for workers with step
    times ``step_times`` (seconds) and batches ``batches`` (samples per step), at the
    simple noise scale ``noise_scale`` (samples) under SGD momentum ``momentum``;
    ``tolerance`` is the staleness tolerance of a noise-free update of one gradient,
    ``halving`` the gradients per update that halve it (`tolerance_at`).

    ``exposure`` is the fraction of a step between reading the parameters and pushing
    the gradient: 1 when the whole step computes on the parameters read at its start
    (an accelerator's step), less when part of it is spent before the read (an input
    pipeline that waits). Staleness scales with it.

    ``scaling`` is the learning-rate scaling the PS applies (`ksync.lr_scaling`; None:
    none, the model as fitted), ``base_batch`` the batch its rate is meant for (None:
    the median of ``batches``), ``power`` the constants under "power" (None: the
    defaults of `PowerModel`)."""
    times = [float(t) for t in step_times]
    if not times or min(times) <= 0:
        raise ValueError(f"step times must be positive seconds, got {step_times!r}")
    batch_scale = per_update(noise_scale, momentum)
    base = float(base_batch) if base_batch else float(statistics.median(batches))
    if rule.wait:
        order = sorted(range(len(times)), key=times.__getitem__)[:rule.k]
        if len(order) < rule.k:
            return _forecast(rule, 0.0, 0.0, 0.0, tolerance, 0, 1.0, batch_scale)
        samples = float(sum(batches[i] for i in order))
        tau = tolerance_at(samples, noise_scale, tolerance, rule.k, halving)
        if scaling == "power":
            power = power or PowerModel()
            r = lr_scaling.gain("power", samples / base)
            return _forecast(rule, 1.0 / (times[order[-1]] + power.overhead_s), samples, 0.0,
                             power.tolerance, len(order), 1.0, batch_scale,
                             (r, batch_efficiency(samples, batch_scale)
                              * power_worth(r, power.exponent)))
        if scaling is None:
            return _forecast(rule, 1.0 / times[order[-1]], samples, 0.0, tau, len(order), 1.0,
                             batch_scale)
        r, progress = scaled_progress(scaling, samples / base, noise_scale, base)
        return _forecast(rule, 1.0 / times[order[-1]], samples, 0.0, tau / r, len(order), 1.0,
                         batch_scale, (r, progress))
    accepted = list(range(len(times)))
    for _ in range(len(times) + 1):
        rate = sum(1.0 / times[i] for i in accepted)
        stale = {i: exposure * max(0.0, (rate * times[i] - 1.0) / rule.k)
                 for i in range(len(times))}
        bound = math.inf if rule.max_staleness is None else rule.max_staleness
        now = [i for i in range(len(times)) if stale[i] <= bound]
        if now == accepted or not now:
            accepted = now
            break
        accepted = now
    if not accepted:
        return _forecast(rule, 0.0, 0.0, 0.0, tolerance, 0, 1.0, batch_scale)
    rate = sum(1.0 / times[i] for i in accepted)
    flow = {i: batches[i] / times[i] for i in accepted}   # samples per second
    total = sum(flow.values())
    samples = rule.k * total / rate
    tau = tolerance_at(samples, noise_scale, tolerance, rule.k, halving)
    scaled = None
    if scaling == "power":
        # The expected fresh share of worker i's gradients: no update during its step.
        power = power or PowerModel()
        tau = power.tolerance
        fresh = rule.k * sum(batches[i] / times[i] * max(0.0, 1.0 - stale[i])
                             for i in accepted) / rate / base
        r = lr_scaling.gain("power", fresh)
        scaled = (r, batch_efficiency(samples, batch_scale) * power_worth(r, power.exponent))
    elif scaling is not None:
        # An update's K gradients come from worker i in proportion to its pushes.
        scale = rule.k * sum(batches[i] / times[i] / (1.0 + stale[i])
                             for i in accepted) / rate / base
        scaled = scaled_progress(scaling, scale, noise_scale, base)
        tau /= scaled[0]
    mean_stale = sum(flow[i] * stale[i] for i in accepted) / total
    worth = sum(flow[i] * staleness_efficiency(stale[i], tau) for i in accepted) / total
    return _forecast(rule, rate / rule.k, samples, mean_stale, tau, len(accepted), worth,
                     batch_scale, scaled)


def _forecast(rule, updates_per_s, samples, staleness, tolerance, contributors, worth,
              batch_scale, scaled=None):
    """``scaled``: ``(gain, progress)`` under learning-rate scaling (None: batch
    efficiency, the unscaled model)."""
    gain, batch = (1.0, batch_efficiency(samples, batch_scale)) if scaled is None else scaled
    return Forecast(rule, updates_per_s, samples, staleness, tolerance, contributors, batch,
                    worth, updates_per_s * batch * worth, gain)


def grid(n: int) -> list:
    """Values 1..n on a roughly geometric grid (every value up to 4, n included).

    >>> grid(8), grid(40)
    ([1, 2, 3, 4, 6, 8], [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40])
    """
    values, v = set(), 1
    while v <= n:
        values.update({v, min(n, v + v // 2)})
        v *= 2
    return sorted(values | {n} | set(range(1, min(n, 4) + 1)))


def candidates(step_times, slack: float = 2.0, exposure: float = 1.0,
               usual_times=None) -> list:
    """The rules `ksync.Adaptive` chooses among: K-sync for every K of `grid` from 2
    (BSP included; waiting for the K fastest is how a slow worker is left out), and
    K-async for every K of `grid` with a staleness bound ``slack`` times the staleness
    the slowest worker has at its usual step time (``usual_times``, default
    ``step_times``): every worker that keeps its pace contributes, and a gradient from a
    step that stalled (a paused or suddenly slowed worker) arrives beyond the bound and
    is dropped. ``exposure`` as for `forecast`.

    >>> [r.describe() for r in candidates([1.0, 1.0, 4.0])]  # doctest: +NORMALIZE_WHITESPACE
    ['K=2 sync, drop beyond staleness 0', 'K=3 sync, drop beyond staleness 0',
     'K=2 async, drop beyond staleness 8', 'K=3 async, drop beyond staleness 6']
    """
    times = sorted(float(t) for t in (usual_times or step_times))
    n = len(times)
    # K >= 2 (with 2 workers or more): a round of one gradient tells nothing of the
    # gradient noise, so the noise scale could not follow training.
    ks = [k for k in grid(n) if k >= 2] or [1]
    rules = [Rule(k=k, wait=True, max_staleness=0) for k in ks]
    rate = sum(1.0 / t for t in times)
    for k in ks:
        worst = exposure * max(0.0, (rate * times[-1] - 1.0) / k)
        rules.append(Rule(k=k, wait=False, max_staleness=max(1, math.ceil(slack * worst))))
    return rules


def rank(step_times, batches, noise_scale: float, tolerance: float, exposure: float = 1.0,
         usual_times=None, momentum: float = 0.0, halving: float = math.inf,
         scaling: str | None = None, base_batch: float | None = None,
         power: PowerModel | None = None) -> list:
    """Every `candidates` rule's `Forecast`, best goodput first (ties in candidate order).

    >>> rank([0.1] * 8, [32] * 8, noise_scale=256.0, tolerance=10.0, momentum=0.9)[0].rule.describe()
    'K=4 async, drop beyond staleness 4'
    """
    out = [forecast(rule, step_times, batches, noise_scale, tolerance, exposure, momentum,
                    halving, scaling, base_batch, power)
           for rule in candidates(step_times, exposure=exposure, usual_times=usual_times)]
    return sorted(out, key=lambda f: -f.goodput)
