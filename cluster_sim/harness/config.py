"""What a harness run is: its settings (`RunConfig`), the contenders (`Arm`, `ARMS`, from
`cluster_sim.harness.arms`), the workload and the targets. No TensorFlow here, so
commands can plan runs (and the simulator can mirror them) without importing it.

Example:

>>> parse_arms("bsp, lb-bsp")
['bsp', 'lb-bsp']
>>> RunConfig(target_loss=0.5).target_loss
0.5
"""

import dataclasses

from cluster_sim.harness.arms import ARMS, Arm, parse_arms
from cluster_sim.report.results import EVAL_RELATIVE_GAP

__all__ = ["RunConfig", "Arm", "ARMS", "parse_arms", "load_data", "targets"]


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Settings of a run that a scenario does not fix.

    The run stops at the first of: validation loss at ``target_loss`` (validation
    accuracy at ``target_accuracy`` when ``target_loss`` is None and the workload names
    no target loss), ``max_pushes`` pushes, ``max_updates`` updates (None: no limit),
    ``time_budget_s`` seconds of training. Evaluations are ``max(eval_min_gap_s,
    eval_relative_gap * t)`` apart at training time ``t``. ``check_evaluator`` also
    evaluates the final weights with ``model.evaluate`` on the cluster and records both
    (``result["evaluator"]["check"]``), to show the numpy evaluation is Keras's.
    ``target`` names which of the workload's targets counts (``"early"``, ``"late"``:
    `cluster_sim.workloads.Dataset.target_named`); None: its default one. An explicit
    ``target_loss`` wins over both (`targets`).
    """

    speeds: tuple = (1.0, 1.0, 0.5, 0.25)
    us_per_sample: float = 300.0
    batch_size: int = 32
    learning_rate: float = 0.05
    momentum: float = 0.9
    hidden: tuple = (64, 64)
    max_pushes: int = 1200
    max_updates: int | None = None
    target_accuracy: float = 0.93
    target_loss: float | None = None
    target: str | None = None
    time_budget_s: float = 120.0
    eval_relative_gap: float = EVAL_RELATIVE_GAP
    eval_min_gap_s: float = 0.25
    allocate_every: int = 10
    check_evaluator: bool = False
    seed: int = 0

    @classmethod
    def from_scenario(cls, scenario, **overrides) -> "RunConfig":
        """The run a `cluster_sim.scenarios.Scenario` describes (its speeds at t = 0);
        ``overrides`` win, and a name that is no field raises TypeError."""
        values = dict(speeds=tuple(scenario.speeds_at(0.0)),
                      us_per_sample=scenario.us_per_sample, batch_size=scenario.batch_size,
                      learning_rate=scenario.learning_rate, momentum=scenario.momentum,
                      hidden=tuple(scenario.hidden), max_pushes=scenario.max_pushes,
                      target_accuracy=scenario.target_accuracy,
                      target_loss=scenario.target_loss, target=scenario.target,
                      time_budget_s=scenario.time_budget_s)
        return cls(**dict(values, **overrides))


def load_data(scenario):
    """The scenario's workload (``scenario.data``), the same rows for every seed."""
    from cluster_sim.workloads import load
    return load(scenario.data, seed=0)


def targets(config, data) -> dict:
    """The run's targets, ``{"target_loss", "target_accuracy"}``: the config's when it
    sets a target loss, else the workload's when that has a loss (``data.target``, or
    the one ``config.target`` names: ``data.target_named``), else the config's accuracy
    alone. A target loss is what ends the run. Naming a target the workload does not
    have raises ValueError.

    >>> targets(RunConfig(target_accuracy=0.9), None)
    {'target_loss': None, 'target_accuracy': 0.9}
    >>> from cluster_sim.workloads import load
    >>> targets(RunConfig(target="late"), load("ctr", train_size=10, test_size=10))
    {'target_loss': 0.465, 'target_accuracy': 0.93}
    """
    if config.target_loss is not None:
        return {"target_loss": config.target_loss, "target_accuracy": config.target_accuracy}
    if config.target is not None:
        if data is None or not hasattr(data, "target_named"):
            raise ValueError(f"target {config.target!r}: no workload to take it from")
        own = data.target_named(config.target) or {}
    else:
        own = getattr(data, "target", None) or {}
    if own.get("loss") is not None:
        return {"target_loss": float(own["loss"]),
                "target_accuracy": own.get("accuracy", config.target_accuracy)}
    return {"target_loss": None, "target_accuracy": config.target_accuracy}


