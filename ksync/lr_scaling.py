"""Learning-rate scaling at the commit: how far an update of several gradients steps.

A round's gradients are averaged, so at a fixed learning rate an update of K gradients
steps as far as one gradient does. The PS scales the user's learning rate ``lr`` (tuned,
or not, for one worker's batch ``b0``, the *base batch*) by a gain ``r`` at every
commit, for any rule:

- ``"adascale"`` (AdaScale, Johnson et al., ICML 2020; used by Pollux):
  ``r = (sigma^2 + |G|^2) / (sigma^2 / S + |G|^2)``, where ``sigma^2`` is the variance
  of a base batch's gradient. `ksync.noise` estimates the per-sample covariance trace
  ``tr(S)`` and ``|G|^2``, so ``sigma^2 = tr(S) / b0`` and, with the noise scale
  ``B = tr(S) / |G|^2`` and ``M = S b0`` samples,

      r = (tr(S) / b0 + |G|^2) / (tr(S) / M + |G|^2) = (1 + B / b0) / (1 + B / M)

  in ``[1, S]``: ``S`` (linear) while the gradient noise dominates (``B >> M``), 1 when
  the signal does (``B << b0``). It equals ``M / (M + B)`` over ``b0 / (b0 + B)``: the
  goodput model's batch efficiency of the update over that of one base batch.
- ``"power"``: ``r = S_0 ** POWER_EXPONENT`` (2/3), ``S_0`` the update's *fresh*
  samples over ``b0`` (gradients of staleness 0; a stale gradient adds none): the
  scaling law of the best learning rate measured on the benchmark (see "Why a power
  law" below); `ksync.Adaptive`'s default, an opt-in for every other rule.
- ``"linear"``: ``r = S`` (Goyal et al. 2017); ``"sqrt"``: ``r = sqrt(S)``;
  None: ``r = 1`` (no scaling; the update's samples only lower its noise).

**S, the update's scale, and staleness.** ``S = sum_i b_i / (1 + s_i) / b0``: each
gradient's samples count ``1 / (1 + s)`` as much when it is ``s`` updates stale, as
the staleness-aware learning rate of Zhang et al. (2016) discounts its step; a fresh
round (K-sync, BSP) has ``S = M / b0``. ``S`` is floored at 1: an update never steps
less than the user's rate (the product's behaviour without scaling), and a stale
gradient gains nothing beyond what fresh-equivalent samples justify, so K-async updates
of a few stale gradients step as before and ASP is never scaled. Under "power" a
stale gradient counts 0 (`stale_weight`).

**Why a power law, and why fresh samples only.** The best learning rate of a waiting
rule, tuned on the fair race's tuning seeds (100-101; teacher workload, SGD momentum
0.9, base rate 0.02 for one worker's batch of 32), was 0.08 for BSP on 8 workers
(``S = 8``) and 0.32 for BSP and K-sync 48 on 64 (``S = 64``, 48): ``S ** (2/3)``
times the base rate at both scales (K-sync 4-6 on 8 workers: 0.04, within the grid's
factor 2). The noisy quadratic model (Zhang et al., NeurIPS 2019) gives such a power
law, between square-root and linear, when the curvature spectrum is spread; AdaScale's
gain at the measured noise scale does not (it gave 0.11-0.12 on 8 workers, past the
best rate, and 0.2 on 64, short of it). Under momentum the law holds for the rate
itself: the momentum is kept, so the effective step ``lr r / (1 - mu)`` follows it.
A stale gradient gets no gain: asynchrony already acts as momentum of its own
(Mitliagkas et al. 2016), and scaling K-async updates by their staleness-discounted
samples made Adaptive's asynchronous rules slower (8 workers, static: 165-176 s
against 138 s unscaled, tuning seeds). The law is relative to the user's rate: it does
not measure the curvature, so a base rate twice too large stays twice too large.

**Noise estimates, smoothing, warm-up.** The gain of a commit uses the noise sums of
the rounds committed *before* it (so it is known when the commit starts), faded as the
controller fades its window (`ksync.noise.fade`: weight `ksync.noise.NOISE_MEMORY` per
`ksync.noise.NOISE_WINDOW` rounds; about the last 100 rounds count); only rounds that
give an estimate (two gradients or more, finite) count. AdaScale's gain ramps from 1:
``r = 1 + w (r_full - 1)`` with ``w = min(1, rounds / WARMUP_ROUNDS)`` over the faded
count of measured rounds (the first few dozen rounds' estimates swing 3x). With no
signal left (``|G|^2 <= 0`` over the window: noise dominates) the gain is ``S``; with no
measured noise (``tr(S) <= 0``) it is 1. ``"linear"`` and ``"sqrt"`` are the user's
explicit rules and have no warm-up (a warm-up of the rate is the user's schedule).

**A factor set by the rule.** A `ksync.Rule` carries ``lr_factor`` (1.0 by default):
the commit's gain is ``lr_factor * r`` (on the PS too). It is how a policy moves the step
from the loss: `ksync.Adaptive` with ``loss_step`` halves it when the smoothed loss rises
and at a loss stall with no larger update left, so a base rate that is too high is
corrected (a factor below 1) and the noise floor falls late in training.

**Progress** is counted in scale-invariant iterations: the sum of the applied gains
(`LRScaling.progress`), the base-batch steps the run's updates are worth.

**Momentum.** The learning rate is scaled, the momentum kept (AdaScale's practice for
momentum SGD): with heavy-ball momentum ``mu`` the effective step ``lr r / (1 - mu)``
scales by ``r`` too, and a change of ``r`` acts on the new gradient only (the velocity
holds the older ones at the rates they were applied at). Nothing bounds ``lr r`` for
stability but ``r <= S`` and, for AdaScale, ``r <= 1 + B / b0``: the curvature that
sets the bound (``lr L < 2 (1 + mu)`` on a quadratic) is not measured. ``max_lr`` caps
the scaled rate when the user knows one.

**Optimizers.** The optimizer's learning rate is scaled for that apply, never the
gradient, so scale-invariant optimizers get a meaningful rule (`optimizer_gain`):

    =====================================  ===========================  ===============
    optimizer family                       what the commit scales       by
    =====================================  ===========================  ===============
    SGD                                    learning rate                r
    SGD + momentum (heavy ball, Nesterov)  learning rate, momentum kept r
    Adam, AdamW, RMSprop, Adagrad, LAMB    learning rate                sqrt(r)
    (normalised by the gradient's scale)
    =====================================  ===========================  ===============

Adam-like updates do not grow with the gradient; their noise does fall with the batch,
and the square-root rule (Malladi et al., NeurIPS 2022) keeps their SDE the same.

Pure Python: no TensorFlow. `ksync.UpdateState` owns an `LRScaling` and applies it at
every commit; the simulator uses that state, and the TF PS state must mirror it.

Example: a base batch of 32, updates of 8 batches, noise scale 320 samples (10 batches).

>>> round(gain("adascale", 8.0, noise_scale=320.0, base_batch=32.0), 4)
4.8889
>>> gain("linear", 8.0), gain("sqrt", 4.0), gain(None, 8.0), gain("linear", 0.5)
(8.0, 2.0, 1.0, 1.0)
>>> round(gain("power", 8.0), 6), round(gain("power", 64.0), 6)
(4.0, 16.0)
>>> scaling = LRScaling("adascale", base_batch=32)
>>> scaling.commit(8.0)          # nothing measured yet: the warm-up starts at 1
1.0
>>> for _ in range(200):
...     scaling.observe(signal=1.0, trace=320.0)
>>> round(scaling.commit(8.0), 4), round(scaling.progress, 4)
(4.8889, 5.8889)
"""

import math

from ksync.noise import MIN_NOISE_ROUNDS, fade

MODES = ("adascale", "power", "linear", "sqrt")
#: exponent of the "power" rule, ``r = S ** POWER_EXPONENT`` (module docstring).
POWER_EXPONENT = 2.0 / 3.0
#: a setting that means "the policy's own default" (`resolve`).
AUTO = "auto"
#: faded count of measured rounds over which AdaScale's gain ramps from 1 to its full
#: value (the rounds before the controller trusts a noise scale).
WARMUP_ROUNDS = MIN_NOISE_ROUNDS


def check(mode) -> None:
    """Raise ValueError unless ``mode`` is one of `MODES` or None."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"lr_scaling must be one of {MODES} or None (no scaling), got "
                         f"{mode!r}.")


def resolve(setting, policy) -> str | None:
    """The scaling a run applies: ``setting``, or for `AUTO` the policy's default
    (``policy.lr_scaling``: "power" for `ksync.Adaptive`, which chooses the update and
    so its step; None for the fixed rules, whose rate the user tunes).

    >>> import ksync
    >>> resolve(AUTO, ksync.Adaptive()), resolve(AUTO, ksync.BSP()), resolve("linear", ksync.BSP())
    ('power', None, 'linear')
    """
    if setting != AUTO and setting is not None and setting not in MODES:
        raise ValueError(f"lr_scaling must be {AUTO!r} (the policy's own: 'power' for "
                         f"Adaptive, none for the fixed rules), one of {MODES}, or "
                         f"None (no scaling), got {setting!r}.")
    mode = getattr(policy, "lr_scaling", None) if setting == AUTO else setting
    check(mode)
    return mode


def stale_weight(mode, staleness: float) -> float:
    """How much a gradient ``staleness`` updates old counts in its update's scale:
    ``1 / (1 + s)`` (negative counts as 0), and for "power" 1 when fresh, else 0.

    >>> stale_weight("adascale", 3), stale_weight("power", 0), stale_weight("power", 1)
    (0.25, 1.0, 0.0)
    """
    if mode == "power":
        return 1.0 if staleness <= 0 else 0.0
    return 1.0 / (1.0 + max(float(staleness), 0.0))


def scale(samples, staleness, base_batch: float, mode=None) -> float:
    """An update's scale ``S``: its gradients' samples, each weighted by `stale_weight`
    under ``mode``, over the base batch.

    >>> scale([32, 32, 32, 32], [0, 0, 0, 0], 32), scale([32, 32], [1, 3], 32)
    (4.0, 0.75)
    >>> scale([32, 32, 32], [0, 0, 2], 32, "power")
    2.0
    """
    return sum(float(b) * stale_weight(mode, s)
               for b, s in zip(samples, staleness)) / float(base_batch)


def adascale_gain(scale_: float, noise_scale: float | None, base_batch: float) -> float:
    """AdaScale's ``r = (1 + B / b0) / (1 + B / (S b0))`` for ``S >= 1`` (``S`` for no
    signal, ``noise_scale`` None or infinite; 1 for ``S <= 1`` or no noise).

    >>> adascale_gain(4.0, 0.0, 32), adascale_gain(4.0, math.inf, 32), adascale_gain(4.0, 32.0, 32)
    (1.0, 4.0, 1.6)
    """
    s = max(float(scale_), 1.0)
    if noise_scale is None or math.isinf(noise_scale):
        return s
    b = max(float(noise_scale), 0.0) / float(base_batch)
    return (1.0 + b) / (1.0 + b / s)


def noise_scale_of(signal: float, trace: float) -> float | None:
    """``B = tr(S) / |G|^2`` for the gain: infinite when no signal is left (noise
    dominates), 0 when no noise is measured, None when nothing is (both zero)."""
    if trace <= 0:
        return 0.0 if signal > 0 else None
    return math.inf if signal <= 0 else trace / signal


def gain(mode, scale_: float, noise_scale: float | None = None,
         base_batch: float = 1.0) -> float:
    """The full gain of an update of scale ``S`` (floored at 1) under ``mode``, before
    any warm-up; ``noise_scale`` (samples) is needed by "adascale" only (None: nothing
    measured, gain 1)."""
    s = max(float(scale_), 1.0)
    if mode is None:
        return 1.0
    if mode == "linear":
        return s
    if mode == "sqrt":
        return math.sqrt(s)
    if mode == "power":
        return s ** POWER_EXPONENT
    check(mode)
    return 1.0 if noise_scale is None else adascale_gain(s, noise_scale, base_batch)


def optimizer_gain(r, family: str = "sgd", sqrt=math.sqrt):
    """The factor of the optimizer's learning rate for a gain ``r`` (module docstring's
    table): ``r`` for "sgd" (with or without momentum), ``sqrt(r)`` for "adam"
    (Adam-like optimizers, normalised by the gradient's scale). ``sqrt`` is
    ``math.sqrt`` for numbers; the PS passes ``tf.sqrt`` for its gain tensor, so both
    follow the one table.

    >>> optimizer_gain(4.0, "sgd"), optimizer_gain(4.0, "adam")
    (4.0, 2.0)
    """
    if family == "sgd":
        return r
    if family == "adam":
        return sqrt(r)
    raise ValueError(f"optimizer family must be 'sgd' or 'adam', got {family!r}.")


class LRScaling:
    """The gain of each commit of one run, and what it needs to remember.

    ``signal``, ``trace`` and ``rounds`` are the faded sums of the measured rounds'
    ``(|G|^2, tr(S))`` estimates and of their count; ``progress`` the applied gains'
    sum (scale-invariant iterations); ``commits`` and ``last_gain`` what their names say.

    Args:
      mode: one of `MODES`, or None (gain 1 always).
      base_batch: samples of one worker's batch, the batch ``lr`` is meant for.
      max_lr: cap of the scaled learning rate (`learning_rate`; None: no cap).
    """

    def __init__(self, mode, base_batch: float, max_lr: float | None = None):
        check(mode)
        if not (isinstance(base_batch, (int, float)) and base_batch > 0):
            raise ValueError(f"base_batch must be a number of samples > 0 (one worker's "
                             f"batch), got {base_batch!r}.")
        if max_lr is not None and not (isinstance(max_lr, (int, float)) and max_lr > 0):
            raise ValueError(f"max_lr must be None (no cap) or a rate > 0, got {max_lr!r}.")
        self.mode = mode
        self.base_batch = float(base_batch)
        self.max_lr = None if max_lr is None else float(max_lr)
        self.signal = self.trace = self.rounds = 0.0
        self.progress = 0.0
        self.commits = 0
        self.last_gain = 1.0

    def warmup(self) -> float:
        """AdaScale's warm-up weight: the faded measured rounds over `WARMUP_ROUNDS`."""
        return min(1.0, self.rounds / WARMUP_ROUNDS)

    def noise_scale(self) -> float | None:
        """The smoothed noise scale the gain uses (samples; see `noise_scale_of`)."""
        return noise_scale_of(self.signal, self.trace)

    def gain(self, scale_: float, factor: float = 1.0) -> float:
        """The gain an update of scale ``S`` gets now (warm-up included) times the
        rule's ``factor`` (`ksync.Rule.lr_factor`), not counted."""
        full = gain(self.mode, scale_, self.noise_scale(), self.base_batch)
        if self.mode == "adascale":
            full = 1.0 + self.warmup() * (full - 1.0)
        return full * float(factor)

    def commit(self, scale_: float, factor: float = 1.0) -> float:
        """The gain of a commit of scale ``S`` (times ``factor``), counted in `progress`."""
        r = self.gain(scale_, factor)
        self.progress += r
        self.commits += 1
        self.last_gain = r
        return r

    def observe(self, signal: float, trace: float) -> None:
        """Add one committed round's ``(|G|^2, tr(S))`` estimate (`ksync.noise.estimate`);
        ``(0.0, 0.0)``, a round that could not tell, is skipped."""
        if signal == 0.0 and trace == 0.0:
            return
        if not (math.isfinite(signal) and math.isfinite(trace)):
            return
        self.signal, self.trace, self.rounds = fade(
            (self.signal, self.trace, self.rounds), (signal, trace, 1.0), 1.0)

    def learning_rate(self, base_lr: float, r: float) -> float:
        """The rate an update of gain ``r`` applies: ``base_lr r``, at most ``max_lr``."""
        lr = float(base_lr) * float(r)
        return lr if self.max_lr is None else min(lr, self.max_lr)

    def get_state(self) -> dict:
        return {"signal": self.signal, "trace": self.trace, "rounds": self.rounds,
                "progress": self.progress, "commits": self.commits,
                "last_gain": self.last_gain}

    def set_state(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, type(getattr(self, key))(value))

    def describe(self) -> str:
        scale_ = self.noise_scale()
        noise = "" if scale_ is None else f", noise scale {scale_:.0f}"
        return (f"lr scaling {self.mode}: gain {self.last_gain:.2f} at the last of "
                f"{self.commits} commits, progress {self.progress:.0f} base steps{noise}")
