"""`python -m cluster_sim demo`: a short version of the policy benchmark, with a verdict.

Starts a parameter server and the scenario's workers as local processes (loopback only),
slows them as the scenario says (built-in ``demo``: relative speeds 1, 1, 0.5, 0.25 on
the benchmark's teacher task), and trains each arm for each seed, arms interleaved seed
by seed with the same initial weights and data order
(`cluster_sim.cli.bench_matrix.run_matrix`). Prints the benchmark's table (median time
to target with its range over seeds, a 90 % interval from 5 seeds, the ratio to BSP
paired by seed) and a verdict: which rule won, by how much, and whether the seeds
separate it from BSP and from the next fastest. Writes results.json, curves.csv,
report.md and plots.

By default (the first run, a few minutes) it compares what a user would choose between
on the ``demo`` scenario: BSP and ASP at the learning rates the fair race tuned for it
and Adaptive at the base rate, to the race's target, over `QUICK_SEEDS` seeds
(`cluster_sim.cli.demo_race`: all read from the committed store that generates
``docs/benchmarks/race_demo.md``), and prints the race's own verdict beside the demo's.
``--full`` is the longer comparison: four rules at the scenario's rate, three seeds, to
the scenario's target.

Example:

```
python -m cluster_sim demo                     # BSP, ASP tuned; Adaptive; 2 seeds
python -m cluster_sim demo --full              # BSP, ASP, K-async, Adaptive x 3 seeds
python -m cluster_sim demo --scenario static --arms all --seeds 1   # digits, 4 workers
python -m cluster_sim demo --arms bsp@0.1,asp@0.02/0.5,adaptive   # each its own rate
```
"""

import argparse
import dataclasses
import gc
import pathlib
import sys
import time

from cluster_sim.cli import command_line, prepare_tensorflow, seeds_text
from cluster_sim.harness.arms import ARMS, SPEC_HELP, ArmSpec, parse_arm_specs
from cluster_sim.cli.arm_grid import BenchArm, check_arms
from cluster_sim.cli.demo_race import PAGE, load_demo_race
from cluster_sim.scenarios import builtin_names

#: The longer comparison (``--full``, and any scenario but ``demo``).
FULL_ARMS = "bsp,asp,kasync,adaptive"
FULL_SEEDS = 3
#: Seeds of the first run: the fewest that can say "not separated" (one cannot).
QUICK_SEEDS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="demo",
                        help=f"built-in scenario ({', '.join(builtin_names())}) or a TOML "
                             "file like those in cluster_sim/scenarios/ (default demo)")
    parser.add_argument("--traces", help="trace directory for the trace scenario "
                                         "(default: the vendored sample)")
    parser.add_argument("--arms", default=None,
                        help="comma-separated contenders, or 'all' (default on the demo "
                             "scenario: BSP and ASP at the fair race's tuned learning "
                             f"rates and Adaptive; with --full or another scenario: "
                             f"{FULL_ARMS}); {SPEC_HELP}")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per arm (default {QUICK_SEEDS}, with --full or another "
                             f"scenario {FULL_SEEDS}; one seed cannot separate the rules)")
    parser.add_argument("--full", action="store_true",
                        help=f"the longer comparison (~13 min on 2 cores): {FULL_ARMS} at "
                             f"the scenario's learning rate, {FULL_SEEDS} seeds, to the "
                             "scenario's target")
    parser.add_argument("--max-pushes", type=int, help="override the scenario's push budget")
    parser.add_argument("--blackbox", action="store_true",
                        help="slow workers from outside with a SIGSTOP/SIGCONT duty cycle "
                             "instead of the in-graph delay (the scenario's inject = "
                             "\"sigstop\"); not with pause or kill events")
    parser.add_argument("--out", default="runs/demo", help="output directory")


def _plan(args):
    """The arm specs, seeds, target-loss override (None: the scenario's) and the fair
    race (`cluster_sim.cli.demo_race.DemoRace`: the first run's arms and target; None
    with ``--full`` or another scenario) of this invocation; ValueError for bad
    arguments or a missing or malformed store."""
    quick = args.scenario == "demo" and not args.full
    specs = None
    if args.arms is not None:  # a bad spec is named before the store is read
        specs = ([ArmSpec(name) for name in ARMS] if args.arms.strip() == "all"
                 else parse_arm_specs(args.arms))
    seeds = args.seeds if args.seeds is not None else QUICK_SEEDS if quick else FULL_SEEDS
    if seeds < 1:
        raise ValueError("--seeds must be at least 1")
    race = load_demo_race() if quick else None
    if specs is None:
        specs = list(race.specs) if quick else parse_arm_specs(FULL_ARMS)
    return specs, seeds, (race.target_loss if quick else None), race


def run(args) -> int:
    from cluster_sim.harness.config import RunConfig, load_data, targets
    from cluster_sim.scenarios import load_scenario
    from ksync.learning_rate import LearningRate

    try:
        specs, seeds, target_loss, race = _plan(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario, traces_dir=args.traces)
        scenario.check_resolved()  # before a cluster starts, not at its first run
        if args.blackbox:
            scenario = dataclasses.replace(scenario, inject="sigstop")
        overrides = {"max_pushes": args.max_pushes} if args.max_pushes else {}
        if target_loss is not None:
            overrides["target_loss"] = target_loss
        config = RunConfig.from_scenario(scenario, **overrides)
        base = LearningRate(config.learning_rate, momentum=config.momentum)
        arms = [BenchArm(s.name, s.arm(scenario.num_workers, base, config.batch_size),
                         s.value, s) for s in specs]
        check_arms(arms, scenario.num_workers)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    data = load_data(scenario)
    target = targets(config, data)

    # Only now: a refused argument costs no TensorFlow start-up (seconds on 2 cores).
    prepare_tensorflow()
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.cli.bench_costs import framework_cost_in_runs
    from cluster_sim.cli.bench_matrix import run_matrix
    from cluster_sim.cli.bench_table import table_and_verdict
    from cluster_sim.harness.progress import TargetBar
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.report import write_report

    out = pathlib.Path(args.out)
    goal = (f"validation loss {target['target_loss']}" if target["target_loss"] is not None
            else f"validation accuracy {target['target_accuracy']}")
    print(f"scenario {scenario.summary()}; {data.name} data, target {goal}", flush=True)
    if race is not None and args.arms is None:
        tuned = " and ".join(a.arm.label for a in arms if a.family in ("bsp", "asp"))
        print(f"{tuned}: the settings the fair race tuned for this scenario (simulated, "
              f"seeds {seeds_text(race.tune_seeds)}; {PAGE}); Adaptive at the base rate "
              f"{base.rate:g}", flush=True)
    print(f"{len(arms)} rules x {seeds} seed(s), interleaved seed by seed; starting "
          f"1 PS + {scenario.num_workers} workers on 127.0.0.1", flush=True)
    started = time.monotonic()
    with LocalCluster(num_workers=scenario.num_workers) as cluster:
        results = run_matrix(
            arms, scenario, seeds, config, cluster=cluster, data=data,
            progress=lambda label, seed: TargetBar(f"{label:>18} s{seed}", config,
                                                   target["target_loss"]))
        # Release the strategies' remote functions while the servers still answer.
        gc.collect()
    write_report(out, results, title=f"ksync demo: {scenario.name}", scenario=scenario,
                 meta={"argv": command_line(), "seeds": seeds})
    print()
    print(table_and_verdict(results, arms))
    if race is not None and args.arms is None:
        print(f"\nThe fair race on this scenario (simulated, {len(race.reported_seeds)} "
              f"seeds, {PAGE}): {race.verdict}")
    speeds = scenario.speeds_at(0.0)
    in_runs = framework_cost_in_runs(results, speeds, scenario.batch_size,
                                     scenario.us_per_sample)
    if in_runs and scenario.inject == "delay":
        injected = scenario.batch_size * scenario.us_per_sample * 1e-6 / max(speeds)
        print(f"\nA step of the fastest workers: {1e3 * injected:.0f} ms of injected compute "
              f"(in-graph sleep) and {1e3 * in_runs:.0f} ms of TensorFlow's own cost "
              f"({injected / in_runs:.1f}x); the benchmark (bench policies) sets it to 4x "
              "or more.")
    print(f"\n{len(results)} runs in {(time.monotonic() - started) / 60:.1f} min; target "
          f"{goal}; report in {out / 'report.md'}")
    return 0

