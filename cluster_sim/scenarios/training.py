"""The training configuration every run shares, real or simulated: `TrainingConfig`.

One set of training defaults (batch, learning rate, momentum, model, targets, stopping
counts, the batch allocation's period, seed) for the harness's
`cluster_sim.harness.config.RunConfig` and the simulator's
`cluster_sim.sim.engine.SimConfig`, which both extend it with the settings of their own
side (a wall-clock budget and the evaluator for the harness; costs, worker count and
straggler models for the simulator). A `cluster_sim.scenarios.Scenario` (and its TOML
reader) takes its training defaults from here too. `targets` says which target ends a
run, for both sides.

``allocate_every`` is 20, `strategies.KSyncStrategy`'s and `ksync.RuleController`'s own
default: the lab runs what the product runs.

Example:

>>> TrainingConfig().allocate_every, TrainingConfig(batch_size=64).batch_size
(20, 64)
>>> TrainingConfig.training_fields()[:3]
('us_per_sample', 'batch_size', 'learning_rate')
"""

from __future__ import annotations

import dataclasses

__all__ = ["TrainingConfig", "TIME_BUDGET_S", "targets"]

#: seconds of training a real run may take by default (a scenario's ``time_budget_s``).
TIME_BUDGET_S = 120.0


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """What a run trains and when it stops, whichever side runs it.

    ``us_per_sample``: compute microseconds per sample at speed 1 (the injected delay on
    the harness, the step time in the simulator). ``batch_size`` samples per worker step
    (the base batch of an allocation), SGD ``learning_rate`` and ``momentum``, the MLP's
    ``hidden`` widths. The run's target: validation loss ``target_loss`` when given,
    else validation accuracy ``target_accuracy``. It stops after ``max_pushes`` pushes
    or ``max_updates`` updates (None: no limit). A run with batch allocation
    reallocates every ``allocate_every`` updates. ``seed`` seeds the model, the data
    order and the simulator's randomness.
    """

    us_per_sample: float = 300.0
    batch_size: int = 32
    learning_rate: float = 0.05
    momentum: float = 0.9
    hidden: tuple = (64, 64)
    target_accuracy: float = 0.93
    target_loss: float | None = None
    max_pushes: int | None = 1200
    max_updates: int | None = None
    allocate_every: int = 20
    seed: int = 0

    @classmethod
    def training_fields(cls) -> tuple:
        """The names of the shared training settings (those of this class)."""
        return tuple(f.name for f in dataclasses.fields(TrainingConfig))

    def training(self) -> dict:
        """This config's shared training settings, ``{name: value}``: what a config of
        the other side takes to train the same way.

        >>> TrainingConfig(seed=3).training()["seed"]
        3
        """
        return {name: getattr(self, name) for name in self.training_fields()}


def targets(config, data) -> dict:
    """The run's targets, ``{"target_loss", "target_accuracy"}``: the config's when it
    sets a target loss, else the workload's when that has a loss (``data.target``, or
    the one ``config.target`` names: ``data.target_named``), else the config's accuracy
    alone. A target loss is what ends the run. Naming a target the workload does not
    have raises ValueError. ``config`` is a `TrainingConfig`; a ``target`` attribute
    (the harness's `cluster_sim.harness.config.RunConfig` has one) names the workload's
    target.

    >>> targets(TrainingConfig(target_accuracy=0.9), None)
    {'target_loss': None, 'target_accuracy': 0.9}
    >>> from cluster_sim.workloads import load
    >>> import types
    >>> late = types.SimpleNamespace(target="late", target_loss=None, target_accuracy=0.93)
    >>> targets(late, load("ctr", train_size=10, test_size=10))
    {'target_loss': 0.465, 'target_accuracy': 0.93}
    """
    named = getattr(config, "target", None)
    if config.target_loss is not None:
        return {"target_loss": config.target_loss, "target_accuracy": config.target_accuracy}
    if named is not None:
        if data is None or not hasattr(data, "target_named"):
            raise ValueError(f"target {named!r}: no workload to take it from")
        own = data.target_named(named) or {}
    else:
        own = getattr(data, "target", None) or {}
    if own.get("loss") is not None:
        return {"target_loss": float(own["loss"]),
                "target_accuracy": own.get("accuracy", config.target_accuracy)}
    return {"target_loss": None, "target_accuracy": config.target_accuracy}
