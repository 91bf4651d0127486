"""Scenarios: who trains what, and how each worker is slowed, paused or killed over time.

* `cluster_sim.scenarios.model`: the data model (`Scenario`, `SpeedSchedule`, `Event`);
* `cluster_sim.scenarios.reader`: the TOML reader (`load_scenario`, `parse_scenario`);
* `cluster_sim.scenarios.traces`: the Alibaba-PAI trace reader and its conversion into
  speed schedules;
* the built-in scenario files ``*.toml`` in this folder.

Pure data: imports neither the harness nor the simulator, both of which read scenarios.
"""

from cluster_sim.scenarios.model import Event, Scenario, SpeedSchedule
from cluster_sim.scenarios.reader import (BUILTIN_DIR, builtin_names, load_scenario,
                                          parse_scenario)
from cluster_sim.scenarios.traces import DEFAULT_TRACE_DIR

__all__ = ["SpeedSchedule", "Event", "Scenario", "load_scenario", "builtin_names",
           "parse_scenario", "BUILTIN_DIR", "DEFAULT_TRACE_DIR"]
