"""`python -m cluster_sim scale`: how the simulator's own run time grows with workers.

For each worker count and arm (``--arms``, as ``simulate`` reads them:
``NAME[=VALUE][@LR[/MOMENTUM]]``), simulate a scenario (default the trace scenario,
tiled over the workers) for ``--updates`` PS updates (not stopping at the target, so
every run does the same number of updates) and print simulated TTA, pushes, and the
simulator's wall time per run and per push.

Example:

```
python -m cluster_sim scale --workers 16,64,256 --arms bsp,asp,adaptive \\
    --updates 5000 --traces ../shared/traces/alibaba_pai
```
"""

import argparse
import sys
import time

from cluster_sim.cli.simulate import CHOICES
from cluster_sim.harness.arms import SPEC_HELP, parse_arm_specs
from cluster_sim.report import format_cell, text_table
from cluster_sim.sim import SimConfig, Simulation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default="16,64,256,1024",
                        help="comma-separated simulated worker counts (default "
                             "16,64,256,1024)")
    parser.add_argument("--arms", "--policies", dest="arms", default="bsp,asp,adaptive",
                        help=f"comma-separated arms ({', '.join(CHOICES)}); {SPEC_HELP}; "
                             "default bsp,asp,adaptive (--policies: the old name)")
    parser.add_argument("--updates", type=int, default=5000,
                        help="updates each simulated run makes (default 5000)")
    parser.add_argument("--scenario", default="trace",
                        help="scenario, as in simulate (default trace)")
    parser.add_argument("--traces", default=None,
                        help="trace directory for the trace scenario (default: the vendored "
                             "sample)")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")


def run(args) -> int:
    from cluster_sim.workloads import digits
    try:
        counts = [int(w) for w in args.workers.split(",")]
        specs = parse_arm_specs(args.arms, CHOICES)
        runs = []
        for n in counts:
            for spec in specs:
                config = SimConfig(num_workers=n, scenario=args.scenario, traces=args.traces,
                                   max_pushes=None, max_updates=args.updates,
                                   stop_at_target=False, eval_every=max(60, n), seed=args.seed)
                arm = spec.arm(n, config.step_size, config.batch_size)
                arm.make_policy().rule(n)  # fail before any simulation on a bad K
                runs.append((n, arm, config.with_step_size(arm.step_size(config))))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    data = digits(seed=args.seed)
    header = ("workers", "arm", "updates", "pushes", "sim s", "TTA s", "final acc",
              "run s", "us/push")
    rows = []
    for n, arm, config in runs:
        sim = Simulation(arm.make_policy(), config, data)
        started = time.perf_counter()
        r = sim.run()
        run_s = time.perf_counter() - started
        rows.append((n, arm.label, r["version"], r["pushed"], f"{r['wall_s']:.2f}",
                     format_cell(r["tta_s"], ".3f"), f"{r['final_accuracy']:.3f}",
                     f"{run_s:.1f}", f"{1e6 * run_s / r['pushed']:.0f}"))
        print("  ".join(map(str, rows[-1])), file=sys.stderr, flush=True)  # progress
    print(text_table(header, rows))
    return 0
