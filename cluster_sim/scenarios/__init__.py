"""Scenarios: who trains what, and how each worker is slowed, paused or killed over time.

* `cluster_sim.scenarios.model`: the data model (`Scenario`, `SpeedSchedule`, `Event`);
* `cluster_sim.scenarios.reader`: the TOML reader (`load_scenario`, `parse_scenario`);
* `cluster_sim.scenarios.traces`: the Alibaba-PAI trace reader and its conversion into
  speed schedules;
* `cluster_sim.scenarios.machine_usage`: co-located load from the Alibaba 2018
  machine-usage trace (read by path, never shipped) as speed schedules;
* `cluster_sim.scenarios.training`: `TrainingConfig`, the training settings and defaults
  the harness, the simulator and scenario files share, and `targets`;
* `cluster_sim.scenarios.windows`: `speed_matrix`, a scenario's speeds per window as a
  ``[workers, windows]`` matrix (what `predictor.regime` replays);
* the built-in scenario files ``*.toml`` in this folder (4 workers, the demo's), and the
  benchmark's 8-worker set in ``bench/`` (``load_scenario("bench/static")``).

Pure data: imports neither the harness nor the simulator, both of which read scenarios.
"""

from cluster_sim.scenarios.model import (Event, RelativeEvent, Scenario, SpeedSchedule,
                                         UnresolvedEvents)
from cluster_sim.scenarios.reader import (BENCH_DIR, BUILTIN_DIR, bench_names, builtin_names,
                                          load_scenario, parse_scenario)
from cluster_sim.scenarios.traces import DEFAULT_TRACE_DIR

__all__ = ["SpeedSchedule", "Event", "RelativeEvent", "UnresolvedEvents", "Scenario",
           "load_scenario", "builtin_names",
           "bench_names", "parse_scenario", "BUILTIN_DIR", "BENCH_DIR", "DEFAULT_TRACE_DIR"]
