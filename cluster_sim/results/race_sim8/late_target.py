"""The teacher workload's late target (issue 46, item 5), measured with the simulator.

Long BSP runs on ``bench/homogeneous``, 8 workers, the bench costs
(``cluster_sim/scenarios/bench/costs_25ms.json``), no target (80,000 pushes = 10,000
updates), at lr 0.1 (BSP's best to the early target on 8 workers) and 0.05, tuning seeds
100 and 101 (never reported). ``late_target_curves.jsonl`` keeps each run's curve
(simulated seconds, updates, validation loss).

    PYTHONPATH=. nice -n 19 python cluster_sim/results/race_sim8/late_target.py run \\
        > cluster_sim/results/race_sim8/late_target_curves.jsonl     # ~2 min of a core
    PYTHONPATH=. python cluster_sim/results/race_sim8/late_target.py  # the numbers

The late target is 80 % of the way from the early target (0.98) to tuned BSP's long-run
loss (the trailing mean of the last 5 evaluations after 10,000 updates, median over the
seeds, at the rate that ends lowest): `LATE_TARGETS` in `cluster_sim.cli.bench_config`.
"""

import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
EARLY = 0.98
WINDOW = 5


def measure(specs=("bsp@0.1", "bsp@0.05"), seeds=(100, 101), pushes=80_000):
    import argparse
    import dataclasses
    from threadpoolctl import threadpool_limits
    from cluster_sim.cli import bench_config, bench_costs
    from cluster_sim.cli.arm_grid import bench_arms, scenario_base
    from cluster_sim.cli.bench_matrix import simulate_arm
    from cluster_sim.harness.config import load_data
    threadpool_limits(1)
    args = argparse.Namespace(max_pushes=None, time_budget=None, traces=None,
                              machine_usage=None, max_updates=None, us_per_sample=None,
                              compute_ratio=4.0, target="early")
    costs = json.loads((HERE.parents[1] / "scenarios/bench/costs_25ms.json").read_text())["costs"]
    scenario = bench_config.load_bench_scenario("homogeneous", args)
    us = bench_costs.us_per_sample(scenario, dict(costs), args, lambda text: None)
    scenario = bench_config.load_bench_scenario("homogeneous", args, us)
    run_config, data = bench_config.run_config(scenario, args), load_data(scenario)
    for spec in specs:
        arm = bench_arms([spec], 8, base=scenario_base(scenario))[0].arm
        for seed in seeds:
            config = dataclasses.replace(bench_config.sim_config(costs, scenario, run_config,
                                                                 data, 8),
                                         seed=seed, max_pushes=pushes, target_loss=-1.0,
                                         stop_at_target=False)
            r = simulate_arm(arm, config, data, run_config)
            print(json.dumps({"spec": spec, "seed": seed, "pushes": pushes,
                              "updates": r["version"], "curve": [
                                  [round(c["wall_s"], 3), c["version"], round(c["loss"], 5)]
                                  for c in r["curve"]]}), flush=True)


def trailing(losses, window=WINDOW):
    return [statistics.fmean(losses[max(0, i - window + 1):i + 1]) for i in range(len(losses))]


def report(path=HERE / "late_target_curves.jsonl"):
    runs = [json.loads(line) for line in path.read_text().splitlines()]
    ends = {}
    for r in runs:
        losses = trailing([c[2] for c in r["curve"]])
        ends.setdefault(r["spec"], []).append(losses[-1])
        first = lambda t: next((c[1] for c, l in zip(r["curve"], losses) if l <= t), None)
        print(f"{r['spec']} seed {r['seed']}: initial loss {r['curve'][0][2]:.3f}, after "
              f"{r['updates']} updates {losses[-1]:.3f}; updates to 0.98: {first(0.98)}, "
              f"0.90: {first(0.90)}, 0.80: {first(0.80)}, 0.76: {first(0.76)}")
    spec, long_run = min(((s, statistics.median(v)) for s, v in ends.items()),
                         key=lambda item: item[1])
    late = EARLY - 0.8 * (EARLY - long_run)
    print(f"long-run loss of tuned BSP ({spec}): {long_run:.3f}; late target "
          f"{EARLY} - 0.8 x ({EARLY} - {long_run:.3f}) = {late:.3f}")
    return late


if __name__ == "__main__":
    measure() if sys.argv[1:] == ["run"] else report()
