"""`python -m cluster_sim demo`: policies side by side on a local heterogeneous cluster.

Starts a parameter server and the scenario's workers as local processes (loopback only),
slows them as the scenario says (built-in ``static``: relative speeds 1, 1, 0.5, 0.25),
trains the same MLP on scikit-learn's digits under each arm, and writes results.json,
curves.csv, report.md and plots to the output directory; prints the table.
"""

import argparse
import dataclasses
import gc
import pathlib
import sys

from cluster_sim.cli import prepare_tensorflow
from cluster_sim.scenarios import builtin_names

DEFAULT_ARMS = "bsp,asp,adaptive,adaptive+alloc"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="static",
                        help=f"built-in scenario ({', '.join(builtin_names())}) or a TOML "
                             "file like those in cluster_sim/scenarios/ (default static)")
    parser.add_argument("--traces", help="trace directory for the trace scenario "
                                         "(default: the vendored sample)")
    parser.add_argument("--arms", default=DEFAULT_ARMS,
                        help=f"comma-separated contenders, or 'all' (default {DEFAULT_ARMS})")
    parser.add_argument("--seeds", type=int, default=1,
                        help="seeds per arm (default 1, a first look; one seed cannot "
                             "separate the rules: use 3 or more to choose)")
    parser.add_argument("--max-pushes", type=int, help="override the scenario's push budget")
    parser.add_argument("--blackbox", action="store_true",
                        help="slow workers from outside with a SIGSTOP/SIGCONT duty cycle "
                             "instead of the in-graph delay (the scenario's inject = "
                             "\"sigstop\"); not with pause or kill events")
    parser.add_argument("--out", default="runs/demo", help="output directory")


def run(args) -> int:
    prepare_tensorflow()
    from cluster_sim.harness.run import ARMS, RunConfig, parse_arms, run_arm
    from cluster_sim.scenarios import load_scenario

    try:
        names = parse_arms(args.arms)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print("error: --seeds must be at least 1", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario, traces_dir=args.traces)
        if args.blackbox:
            scenario = dataclasses.replace(scenario, inject="sigstop")
        for name in names:
            ARMS[name].make_policy().rule(scenario.num_workers)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    overrides = {"max_pushes": args.max_pushes} if args.max_pushes else {}
    config = RunConfig.from_scenario(scenario, **overrides)

    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.harness.progress import TargetBar
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.report import format_table, verdict, write_report

    out = pathlib.Path(args.out)
    print(f"scenario {scenario.summary()}", flush=True)
    print(f"starting 1 PS + {scenario.num_workers} workers on 127.0.0.1", flush=True)
    results = []
    with LocalCluster(num_workers=scenario.num_workers) as cluster:
        for seed in range(args.seeds):
            for name in names:
                arm = ARMS[name]
                with TargetBar(f"{arm.label:>18} s{seed}", config) as bar:
                    results.append(run_arm(cluster, arm, scenario, seed=seed, config=config,
                                           progress=bar))
                    bar.finish(results[-1])
        # Release the strategies' remote functions while the servers still answer.
        gc.collect()
    summaries = write_report(out, results, title=f"ksync demo: {scenario.name}",
                             scenario=scenario, meta={"argv": sys.argv, "seeds": args.seeds})
    print()
    print(format_table(summaries))
    print(f"\n{verdict(summaries)}")
    print(f"\ntarget accuracy {config.target_accuracy}; report in {out / 'report.md'}")
    return 0

