"""`python -m cluster_sim demo`: policies side by side on a local heterogeneous cluster.

Starts a parameter server and four workers as local processes (loopback only), slows the
workers to relative speeds 1, 1, 0.5 and 0.25 with an in-graph delay per sample, trains
the same MLP on scikit-learn's digits under each policy, and prints time to target
accuracy, throughput and staleness; results.json goes to the output directory.
"""

import argparse
import json
import os
import pathlib
import sys

import ksync

DEFAULT_POLICIES = "bsp,asp,adaptive"


def parse_speeds(text: str) -> tuple:
    try:
        speeds = tuple(float(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"speeds must be comma-separated numbers, got {text!r}")
    if not speeds or any(not s > 0 for s in speeds):
        raise argparse.ArgumentTypeError(f"speeds must be > 0, got {text!r}")
    return speeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--speeds", type=parse_speeds, default=(1.0, 1.0, 0.5, 0.25),
                        help="relative speed of each worker (default 1,1,0.5,0.25)")
    parser.add_argument("--policies", default=DEFAULT_POLICIES,
                        help=f"comma-separated policy names (default {DEFAULT_POLICIES})")
    parser.add_argument("--target-accuracy", type=float, default=0.93)
    parser.add_argument("--max-pushes", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/demo", help="directory for results.json")


def run(args) -> int:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from tqdm import tqdm

    from cluster_sim.harness import RunConfig, format_table, run_policy
    from cluster_sim.local_cluster import LocalCluster

    try:
        policies = [ksync.get(name.strip()) for name in args.policies.split(",")]
        for p in policies:
            p.rule(len(args.speeds))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    config = RunConfig(speeds=args.speeds, target_accuracy=args.target_accuracy,
                       max_pushes=args.max_pushes, seed=args.seed)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"starting 1 PS + {len(args.speeds)} workers on 127.0.0.1 (speeds "
          f"{', '.join(f'{s:g}' for s in args.speeds)})", flush=True)
    results = []
    with LocalCluster(num_workers=len(args.speeds)) as cluster:
        for policy in policies:
            with tqdm(total=config.max_pushes, desc=f"{policy!r:>12}", unit="push",
                      leave=True) as bar:
                def progress(pushes, accuracy, bar=bar):
                    bar.update(pushes - bar.n)
                    bar.set_postfix(accuracy=f"{accuracy:.3f}")
                results.append(run_policy(cluster, policy, config, progress=progress))
    (out / "results.json").write_text(json.dumps(
        {"config": config.__dict__, "results": results}, indent=2, default=list))
    print()
    print(format_table(results))
    print(f"\ntarget accuracy {config.target_accuracy}; results in {out / 'results.json'}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim demo", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))
