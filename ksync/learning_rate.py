"""The step size an update rule trains with: learning rate, momentum, warm-up.

A round's gradients are averaged, so at one learning rate an update of K gradients steps
as far as one gradient does: the rate is part of every rule, and comparing rules at one
shared rate measures the rate, not the rule. `LearningRate` is what an arm of a
comparison trains with (the real harness's SGD and the simulator's update alike), and
`linear_scaling` the untuned practitioner's choice (Goyal et al. 2017): the base rate
times the samples of an update over one worker's batch, reached by a linear warm-up.

Warm-up is counted in pushes (gradients received), which is what
``optimizer.iterations`` counts under `strategies.KSyncStrategy` and what the simulator
counts; a count of samples makes it the same stretch of data for every rule.

Example:

>>> lr = linear_scaling(0.02, samples_per_update=256, batch_size=32)
>>> lr.rate, lr.start, lr.warmup_pushes
(0.16, 0.02, 512)
>>> lr.at(0), round(lr.at(256), 6), lr.at(10_000)
(0.02, 0.09, 0.16)
"""

import dataclasses

__all__ = ["LearningRate", "linear_scaling", "LINEAR_WARMUP_SAMPLES"]

#: Samples over which `linear_scaling` warms up: about 5 % of what BSP reads to the
#: benchmark's target (~280,000 samples), as Goyal et al.'s 5 of 90 epochs.
LINEAR_WARMUP_SAMPLES = 16_384


@dataclasses.dataclass(frozen=True)
class LearningRate:
    """SGD with momentum at ``rate``; with ``warmup_pushes`` > 0 the rate rises linearly
    from ``start`` to ``rate`` over the first ``warmup_pushes`` pushes."""

    rate: float
    momentum: float = 0.9
    start: float | None = None
    warmup_pushes: int = 0

    def __post_init__(self):
        if not self.rate > 0:
            raise ValueError(f"learning rate must be > 0, got {self.rate!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if self.warmup_pushes < 0 or (self.warmup_pushes and not (self.start or 0) > 0):
            raise ValueError("a warm-up needs warmup_pushes >= 1 and a start rate > 0")

    def at(self, pushes, minimum=min):
        """The rate after ``pushes`` pushes. ``minimum`` is ``min`` for numbers; pass
        ``tf.minimum`` for a tensor (the real harness's schedule), so both evaluate the
        one formula."""
        if not self.warmup_pushes:
            return self.rate
        return self.start + (self.rate - self.start) * minimum(1.0, pushes / self.warmup_pushes)


def linear_scaling(base: float, samples_per_update: float, batch_size: int,
                   momentum: float = 0.9,
                   warmup_samples: int = LINEAR_WARMUP_SAMPLES) -> LearningRate:
    """``base`` x ``samples_per_update`` / ``batch_size``, warmed up from ``base`` over
    ``warmup_samples`` samples (none when that is the base rate itself).

    >>> linear_scaling(0.02, 32, 32)
    LearningRate(rate=0.02, momentum=0.9, start=None, warmup_pushes=0)
    """
    rate = base * samples_per_update / batch_size
    if rate == base:
        return LearningRate(base, momentum=momentum)
    return LearningRate(rate, momentum=momentum, start=base,
                        warmup_pushes=max(1, round(warmup_samples / batch_size)))
