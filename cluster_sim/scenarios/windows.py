"""A scenario's speeds as a matrix, one row per worker and one column per window: what
`predictor.regime` replays allocation on (``predictor`` never imports ``cluster_sim``, so
the scenario is turned into numbers here).

`speed_matrix` samples each worker's `Scenario.effective_speed` (the scenario's
schedules, traces and machine-usage factors, and 0 while the worker is paused or
killed: `Scenario.downtime`) at the middle of each window of ``window_s`` seconds over
``[0, until_s)``. By default a window is one allocation period at nominal speed,
``allocate_every`` updates of ``batch_size`` samples at ``us_per_sample``
(`cluster_sim.scenarios.training.TrainingConfig`), and ``until_s`` the scenario's
``time_budget_s``.

Example:

>>> from cluster_sim.scenarios import Event, Scenario, SpeedSchedule
>>> s = Scenario("two", 2, slowdowns=((), (SpeedSchedule((0.0,), (0.5,)),)),
...              events=(Event(2.0, 1, "pause"), Event(3.0, 1, "resume")), time_budget_s=4.0)
>>> speed_matrix(s, window_s=1.0).tolist()
[[1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.0, 0.5]]
"""

from __future__ import annotations

import numpy as np

from cluster_sim.scenarios.model import Scenario
from cluster_sim.scenarios.training import TrainingConfig

__all__ = ["speed_matrix", "allocation_window_s"]


def allocation_window_s(scenario: Scenario,
                        allocate_every: int = TrainingConfig.allocate_every) -> float:
    """Seconds of ``allocate_every`` updates of the scenario's batch at speed 1.

    >>> from cluster_sim.scenarios import load_scenario
    >>> round(allocation_window_s(load_scenario("static")), 6)   # 20 x 32 x 300 us
    0.192
    """
    return allocate_every * scenario.batch_size * scenario.us_per_sample * 1e-6


def speed_matrix(scenario: Scenario, window_s: float | None = None,
                  until_s: float | None = None) -> np.ndarray:
    """``[workers, windows]`` speeds of ``scenario`` (see the module doc): 1.0 is the
    reference machine, 0.0 a stopped worker. ``window_s`` defaults to
    `allocation_window_s`, ``until_s`` to the scenario's ``time_budget_s``.

    A scenario with events at fractions of a reference run (``at_fraction``) must be
    placed first (`Scenario.resolve_events`): raises
    `cluster_sim.scenarios.UnresolvedEvents` naming how.
    """
    scenario.check_resolved()
    window_s = allocation_window_s(scenario) if window_s is None else float(window_s)
    until_s = scenario.time_budget_s if until_s is None else float(until_s)
    if not (window_s > 0 and np.isfinite(window_s)):
        raise ValueError(f"window_s must be a number of seconds > 0, got {window_s!r}")
    if not (until_s > 0 and np.isfinite(until_s)):
        raise ValueError(f"until_s must be a number of seconds > 0, got {until_s!r}")
    middles = np.arange(0.0, until_s, window_s) + window_s / 2
    return np.array([[scenario.effective_speed(w, t) for t in middles]
                     for w in range(scenario.num_workers)])
