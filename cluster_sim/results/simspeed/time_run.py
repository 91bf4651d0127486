"""Time one simulated run of the benchmark as `bench policies --simulate` makes it (issue
46, item 9): the bench scenario with the calibrated costs (`costs_25ms.json`), one arm,
one seed, one BLAS thread; prints the run's CPU and wall seconds and a digest of its
curve (equal digests: the same floats).

    PYTHONPATH=. python cluster_sim/results/simspeed/time_run.py static 8 bsp@0.08 0
    PYTHONPATH=. python cluster_sim/results/simspeed/time_run.py ctr_static 64 asp@0.01 0 2000

Arguments: scenario (``bench/NAME``), workers, arm spec, seed, and optionally the
scenario's ``max_pushes`` (scaled by workers / 8 as the bench scales it). Run it in two
checkouts side by side (README.md) to compare code versions on one loaded machine.
"""

import argparse
import dataclasses
import hashlib
import json
import sys
import time

from threadpoolctl import threadpool_limits

from cluster_sim.cli import bench_config, bench_costs
from cluster_sim.cli.arm_grid import matrix_specs, scenario_arms
from cluster_sim.cli.bench_matrix import simulate_arm
from cluster_sim.harness.config import load_data

COSTS = "cluster_sim/scenarios/bench/costs_25ms.json"


#: the late target's budget, as the race's late matrices run (design notes, "The late
#: target on `static` / 8"): a push cap alone censors the asynchronous arms.
LATE_BUDGET = {"time_budget": 4000, "max_pushes": 256000}


def main(argv, target="early"):
    """One run; ``target="late"`` runs to the late target under `LATE_BUDGET`."""
    name, workers, spec, seed = argv[0], int(argv[1]), argv[2], int(argv[3])
    budget = LATE_BUDGET if target == "late" else {"time_budget": None, "max_pushes": None}
    if len(argv) > 4:
        budget = {**budget, "max_pushes": int(argv[4])}
    args = argparse.Namespace(traces=None, machine_usage=None, us_per_sample=None,
                              compute_ratio=4.0, target=target, max_updates=None, **budget)
    costs = bench_costs.load_costs(COSTS)
    scenario = bench_config.load_bench_scenario(name, args)
    us = bench_costs.us_per_sample(scenario, costs, args, lambda _text: None)
    scenario = bench_config.load_bench_scenario(name, args, us)
    run_config = bench_config.run_config(scenario, args)
    data = load_data(scenario)
    config = dataclasses.replace(
        bench_config.sim_config(costs, scenario, run_config, data, workers), seed=seed)
    (arm,) = [a for a in scenario_arms(matrix_specs(spec), workers, scenario, None)
              if spec.startswith("bsp") or a.family != "bsp"]
    with threadpool_limits(1):
        cpu, wall = time.process_time(), time.perf_counter()
        run = simulate_arm(arm.arm, config, data, run_config)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    curve = json.dumps([(p["wall_s"], p["loss"], p["accuracy"]) for p in run["curve"]])
    print(json.dumps({"scenario": name, "workers": workers, "arm": arm.arm.label,
                      "target": target, "seed": seed, "tta_s": run["tta_s"],
                      "pushes": run["pushed"], "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                      "curve_sha256": hashlib.sha256(curve.encode()).hexdigest()[:16]}))


if __name__ == "__main__":
    main(sys.argv[1:])
