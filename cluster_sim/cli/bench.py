"""Benchmarks (not tests): ``python -m cluster_sim bench overhead|allocation|ps-scaling|policies|standing|tables``.

``policies``: every synchronisation rule, each fixed one tuned, on the 8-worker
benchmark scenarios, real or simulated (`cluster_sim.cli.bench_policies`).

``tables``: the fair race's tables (issue 46) regenerated from a compact store committed
in the repository (`cluster_sim.cli.bench_tables`).

``overhead``: a step through ksync beside a stock step, per rule, and where its CPU goes
(chief, workers, PS; the chief's reads of the PS) (`cluster_sim.cli.overhead`).

``allocation``: equal batches against per-worker batch allocation under one scenario's
slowdowns (default ``slow3x``), arms interleaved seed by seed on one cluster, each run
for a fixed number of pushes (no stop at the target). Prints medians over seeds of the
steady state (the second half of each run, after profiling and the first allocations):
slowest over fastest mean step time, samples/s and hardware efficiency (samples/s over
the sum of the workers' busy-time speeds), and the slowest worker's final batch over
the mean of the others'.
"""

import argparse
import gc
import statistics
import sys

from cluster_sim.cli import bench_policies, bench_tables, overhead, prepare_tensorflow, ps_scaling
from cluster_sim.report import standing


def allocation(args) -> int:
    prepare_tensorflow()
    from cluster_sim.harness.run import ARMS, RunConfig, parse_arms, run_arm
    from cluster_sim.report import format_cell, median_of, paired_ratio_ci, step_time_spread
    from cluster_sim.scenarios import load_scenario

    try:
        names = parse_arms(args.arms)
        scenario = load_scenario(args.scenario, traces_dir=args.traces)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    overrides = dict(max_pushes=args.pushes, target_accuracy=2.0,  # never stops early
                     target_loss=-1.0, time_budget_s=float("inf"))
    if args.us_per_sample is not None:
        overrides["us_per_sample"] = args.us_per_sample
    config = RunConfig.from_scenario(scenario, **overrides)
    if args.seeds < 1 or args.pushes < 30 * scenario.num_workers:
        print(f"error: need --seeds >= 1 and --pushes >= {30 * scenario.num_workers} "
              "(fifteen steps per worker in each half: the steady state is the second "
              "half)", file=sys.stderr)
        return 2
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.local_cluster import LocalCluster

    rows = {n: [] for n in names}
    print(f"scenario {scenario.summary()}; {config.us_per_sample:g} us per sample at speed "
          f"1, global batch {config.batch_size * scenario.num_workers}, {args.pushes} "
          f"pushes per run", flush=True)
    with LocalCluster(num_workers=scenario.num_workers) as cluster:
        for seed in range(args.seeds):
            for name in names:
                r = run_arm(cluster, ARMS[name], scenario, seed=seed, config=config)
                steady = r["steady"]
                sizes = r["batch_sizes"][-1]["sizes"] if r["batch_sizes"] else None
                slowest = min(range(len(config.speeds)), key=lambda w: config.speeds[w])
                ratio = (sizes[slowest] / statistics.mean(
                    [b for w, b in enumerate(sizes) if w != slowest]) if sizes else None)
                row = (step_time_spread(steady), steady["samples_per_s"],
                       steady["hardware_efficiency"], r["hardware_efficiency"], ratio)
                rows[name].append(row)
                print(f"seed {seed} {ARMS[name].label:>18}: spread {format_cell(row[0], '.2f')}, "
                      f"{format_cell(row[1], '.0f')} samples/s, hw eff {format_cell(row[2], '.2f')} "
                      f"(whole run {format_cell(row[3], '.2f')}), sizes {sizes}", flush=True)
                gc.collect()
    print(f"\nsteady state (second half of each run), median of {args.seeds} seed(s):")
    print(f"{'arm':>18}  spread  samples/s  vs first [intvl]    hw eff  whole-run eff  "
          "slow/others batch")
    base = [r[1] for r in rows[names[0]]]
    for name in names:
        med = [median_of([r[i] for r in rows[name]]) for i in range(5)]
        # Arms are paired by seed: the ratio of each seed's samples/s.
        vs, low, high, _ = paired_ratio_ci([r[1] for r in rows[name]], base)
        vs_text = f"{vs:.2f} [{low:.2f}, {high:.2f}]"
        print(f"{ARMS[name].label:>18}  {format_cell(med[0], '.2f'):>6}  {format_cell(med[1], '.0f'):>9}  "
              f"{vs_text:>17}  {format_cell(med[2], '.2f'):>6}  {format_cell(med[3], '.2f'):>13}  "
              f"{format_cell(med[4], '.2f'):>17}")
    print(f"('vs first': median over seeds of samples/s over the first arm's "
          f"({ARMS[names[0]].label}) in the same seed; a range under 5 seeds, a 90 % CI from 5)")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    overhead.add_arguments(sub.add_parser(
        "overhead", help="a step through ksync beside a stock step, and where it goes",
        description=overhead.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    p = sub.add_parser("allocation", help="equal batches against batch allocation")
    p.add_argument("--scenario", default="slow3x", help="built-in scenario or TOML file")
    p.add_argument("--traces", default=None, help="trace directory for --scenario trace")
    p.add_argument("--arms", default="bsp,lb-bsp,adaptive+alloc",
                   help="comma-separated harness arms; the first is the baseline")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--pushes", type=int, default=600, help="pushes per run")
    p.add_argument("--us-per-sample", type=float, default=None,
                   help="override the scenario's injected microseconds per sample")
    ps_scaling.add_arguments(sub.add_parser(
        "ps-scaling", help="steps/s with 1, 2 and 4 PS tasks, stock beside ksync"))
    bench_policies.add_arguments(sub.add_parser(
        "policies", help="every rule, each fixed one tuned, real or simulated",
        description=bench_policies.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    bench_tables.add_arguments(sub.add_parser(
        "tables", help="the fair race's tables, regenerated from a committed compact store",
        description=bench_tables.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    standing.add_arguments(sub.add_parser(
        "standing", help="one rule against the oracle-tuned fixed rules of `policies` runs",
        description=standing.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))


def run(args) -> int:
    return {"overhead": overhead.run, "allocation": allocation, "ps-scaling": ps_scaling.run,
            "policies": bench_policies.run, "standing": standing.run,
            "tables": bench_tables.run}[args.bench](args)
