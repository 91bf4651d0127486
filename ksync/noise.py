"""The gradient noise scale, estimated from the gradients a parameter server receives.

McCandlish et al. (2018, "An Empirical Model of Large-Batch Training", appendix A.1): a
gradient ``g_b`` of ``b`` samples at parameters ``w`` has ``E|g_b|^2 = |G|^2 + tr(S)/b``,
with ``G`` the true gradient and ``S`` the per-sample gradient covariance. A round of
the PS holds several gradients of known sample counts and their sample-weighted mean
(``B`` samples in all), which is enough to solve for both unknowns:

    tr(S) ~ (mean_i |g_i|^2 - |g_B|^2) / (mean_i 1/b_i - 1/B)
    |G|^2 ~ |g_B|^2 - tr(S) / B

The simple noise scale is ``B_simple = tr(S) / |G|^2``: the batch at which the gradient
noise equals the signal. One round's estimate is very noisy (it can be negative); sum
the numerators and denominators over many rounds before dividing, as the paper does.

`RoundNoise` accumulates one round; the PS (`strategies.ps_state`) and the simulator keep
the cumulative sums ``(|G|^2, tr(S), rounds)`` that `ksync.RuleController` windows.

Example: 4 gradients of 8 samples from a distribution with |G|^2 = 1, tr(S) = 16.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> total = np.zeros(2)
>>> for _ in range(2000):
...     grads = [np.array([1.0, 0.0]) + rng.normal(0, np.sqrt(8 / 8), 2) for _ in range(4)]
...     r = RoundNoise()
...     for g in grads:
...         r.add(float(g @ g), 8)
...     agg = np.mean(grads, axis=0)
...     total += r.estimate(float(agg @ agg))
>>> round(float(total[1] / total[0]), 0)
16.0
"""

import math

#: weight of the earlier rounds' noise sums after each `NOISE_WINDOW` rounds more (the
#: controller's window and the learning-rate scaling both fade them so).
NOISE_MEMORY = 0.8
NOISE_WINDOW = 20
#: rounds (faded as the sums) the noise sums must cover before the policy sees a
#: measured noise scale: the estimate of the first few dozen rounds swings 3x (seen in
#: the simulated benchmark: 570-780 at update 35 where it settles near 200), and
#: `ksync.Adaptive` acted on it. The learning-rate scaling's warm-up ends there too.
MIN_NOISE_ROUNDS = 50.0


class RoundNoise:
    """Sufficient statistics of one round: its gradients' squared norms and batches."""

    def __init__(self):
        self.count = 0
        self.sq_norm_sum = 0.0
        self.inv_batch_sum = 0.0
        self.samples = 0.0

    def add(self, sq_norm: float, samples: float) -> None:
        """One accepted gradient: its squared norm and its sample count."""
        self.count += 1
        self.sq_norm_sum += sq_norm
        self.inv_batch_sum += 1.0 / samples
        self.samples += samples

    def estimate(self, aggregate_sq_norm: float) -> tuple:
        """``(|G|^2, tr(S))`` of this round given the squared norm of its sample-weighted
        mean gradient; ``(0.0, 0.0)`` when the round cannot tell (one gradient)."""
        return estimate(self.count, self.sq_norm_sum, self.inv_batch_sum, self.samples,
                        aggregate_sq_norm)


def estimate(count, sq_norm_sum, inv_batch_sum, samples, aggregate_sq_norm) -> tuple:
    """``(|G|^2, tr(S))`` from a round's statistics (see the module docstring); a round of
    one gradient, or of non-finite numbers, gives ``(0.0, 0.0)``.

    >>> estimate(2, 2 * 3.0, 2 / 4, 8, 2.0)     # |g_b|^2 = 3 (b = 4), |g_B|^2 = 2 (B = 8)
    (1.0, 8.0)
    """
    if count < 2 or samples <= 0:
        return 0.0, 0.0
    gap = inv_batch_sum / count - 1.0 / samples
    if gap <= 0:
        return 0.0, 0.0
    trace = (sq_norm_sum / count - aggregate_sq_norm) / gap
    signal = aggregate_sq_norm - trace / samples
    if not (math.isfinite(trace) and math.isfinite(signal)):
        return 0.0, 0.0
    return float(signal), float(trace)


def noise_scale(signal_sum: float, trace_sum: float) -> float | None:
    """``B_simple = tr(S) / |G|^2`` from summed estimates; None when the sums cannot
    tell (no rounds, or a signal not above zero: noise dominates the window).

    >>> noise_scale(2.0, 300.0), noise_scale(0.0, 5.0)
    (150.0, None)
    """
    if not (signal_sum > 0 and trace_sum > 0):
        return None
    return float(trace_sum / signal_sum)


def fade(sums, window, rounds: float) -> tuple:
    """``sums`` (any tuple of running sums) faded by `NOISE_MEMORY` per `NOISE_WINDOW`
    rounds over ``rounds`` rounds, plus ``window``, the sums of those rounds.

    >>> fade((10.0, 1.0), (2.0, 1.0), rounds=20)
    (10.0, 1.8)
    """
    weight = NOISE_MEMORY ** (rounds / NOISE_WINDOW)
    return tuple(weight * float(a) + float(b) for a, b in zip(sums, window))
