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
from cluster_sim.scenarios.training import TIME_BUDGET_S, TrainingConfig, targets

__all__ = ["RunConfig", "Arm", "ARMS", "parse_arms", "load_data", "targets"]


@dataclasses.dataclass(frozen=True)
class RunConfig(TrainingConfig):
    """A real run's settings that a scenario does not fix: the shared training settings
    (`cluster_sim.scenarios.training.TrainingConfig`, the simulator's too) and the
    harness's own.

    The run stops at the first of: validation loss at ``target_loss`` (validation
    accuracy at ``target_accuracy`` when ``target_loss`` is None and the workload names
    no target loss), ``max_pushes`` pushes, ``max_updates`` updates (None: no limit),
    ``time_budget_s`` seconds of training. Evaluations are ``max(eval_min_gap_s,
    eval_relative_gap * t)`` apart at training time ``t``. ``check_evaluator`` also
    evaluates the final weights with ``model.evaluate`` on the cluster and records both
    (``result["evaluator"]["check"]``), to show the numpy evaluation is Keras's.
    ``target`` names which of the workload's targets counts (``"early"``, ``"late"``:
    `cluster_sim.workloads.Dataset.target_named`); None: its default one. An explicit
    ``target_loss`` wins over both (`targets`). ``speeds`` are the workers' speeds at
    the start (what ``bench`` reports).
    """

    speeds: tuple = (1.0, 1.0, 0.5, 0.25)
    target: str | None = None
    time_budget_s: float = TIME_BUDGET_S
    eval_relative_gap: float = EVAL_RELATIVE_GAP
    eval_min_gap_s: float = 0.25
    check_evaluator: bool = False

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
