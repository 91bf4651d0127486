"""`python -m cluster_sim simulate`: the same policies on hundreds of simulated workers.

A discrete-event simulator (`cluster_sim.sim.engine`): simulated clock, worker step
times from a scenario (the demo's scenarios, tiled over the simulated workers, or
shifted-exponential or Gaussian-mixture stragglers; `cluster_sim.sim.speeds`), network
time from bandwidth and model size, and real gradients of the digits MLP computed in
event order, under the very `ksync` policy and `ksync.UpdateState` objects the strategy
uses. Deterministic for a seed. Writes the same report as the demo
(`cluster_sim.report.write_report`: results.json, curves.csv, report.md, plots).

Example:

```
python -m cluster_sim simulate --workers 64 --scenario trace \\
    --traces ../shared/traces/alibaba_pai --arms bsp@0.4,asp@0.01,adaptive --seeds 3 --out runs/sim
```

or from Python:

>>> import ksync
>>> from cluster_sim.sim import SimConfig, simulate
>>> r = simulate(ksync.KSync(k=2), SimConfig(num_workers=4, max_pushes=60))
>>> r["applied"] + r["dropped"] + r["pending"] == r["pushed"] == 60
True
"""

import argparse
import dataclasses
import pathlib
import sys
import time

import ksync
from cluster_sim.cli import command_line
from cluster_sim.harness.arms import CONTENDERS, SPEC_HELP, Arm, parse_arm_specs
from cluster_sim.report import format_table, verdict, write_report
from cluster_sim.sim import SimConfig, Simulation
from cluster_sim.sim.speeds import SYNTHETIC, make_speed_model

__all__ = ["run_policies", "add_arguments", "config_from_args", "run"]

DEFAULT_POLICIES = "bsp,asp,adaptive"
#: The contenders this command simulates: those without batch allocation (``bench
#: policies --simulate`` runs those too).
CHOICES = tuple(name for name, c in CONTENDERS.items() if not c.allocation)


def run_policies(policy_specs, config: SimConfig, seeds=1, data=None,
                 progress=True) -> list[dict]:
    """Simulate every policy for seeds ``config.seed .. config.seed + seeds - 1``.

    Each item is a `cluster_sim.harness.arms.Arm` (labelled and trained with its step
    size, as the harness does), a `ksync.Policy` or a `ksync.parse` spec (labelled by
    the spec).
    """
    from cluster_sim.workloads import digits
    results = []
    for offset in range(seeds):
        seed = config.seed + offset
        run_config = dataclasses.replace(config, seed=seed)
        run_data = data or digits(seed=seed)
        for spec in policy_specs:
            arm_config = run_config
            if isinstance(spec, Arm):
                arm_config = run_config.with_step_size(spec.step_size(run_config))
                policy = spec.make_policy()
            else:
                policy = ksync.parse(spec) if isinstance(spec, str) else spec
            sim = Simulation(policy, arm_config, run_data)
            bar = _Bar() if progress else None
            started = time.perf_counter()
            result = sim.run(progress=bar.start(sim, spec, seed) if bar else None)
            result["sim_run_s"] = time.perf_counter() - started
            if isinstance(spec, (str, Arm)):
                # As the harness labels its runs.
                result["policy"] = spec.label if isinstance(spec, Arm) else spec
            if bar:
                bar.close(result)
            results.append(result)
    return results


class _Bar:
    """A tqdm bar per run, moved on every evaluation (pushes or updates, whichever ends it)."""

    def __init__(self):
        self.bar = None

    def start(self, sim, spec, seed):
        from tqdm import tqdm
        c = sim.config
        by_updates = bool(c.max_updates)
        total = c.max_updates if by_updates else c.max_pushes
        self.bar = tqdm(total=total, unit="update" if by_updates else "push", leave=True,
                        desc=f"{spec!s:>10} seed {seed}", file=sys.stderr)

        def progress(s):
            done = s.state.version if by_updates else s.state.pushed
            self.bar.update(min(done, total or done) - self.bar.n)
            self.bar.set_postfix(acc=f"{s.curve[-1]['accuracy']:.3f}",
                                 target=f"{c.target_accuracy:g}", t=f"{s.clock.now:.2f}s",
                                 refresh=False)
        self.target = c.target_accuracy
        return progress

    def close(self, result):
        """End the bar full when the run stopped at the target (the budget was only an
        upper bound), saying so; a miss keeps the bar where the budget ended it."""
        if self.bar is None:
            return
        if result["tta_s"] is not None:
            self.bar.total = self.bar.n
            self.bar.set_postfix_str(f"reached target {self.target:g} at "
                                     f"{result['tta_s']:.2f} simulated s", refresh=False)
        self.bar.close()
        self.bar = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = SimConfig()
    parser.add_argument("--workers", type=int, default=d.num_workers,
                        help="simulated workers (default 4)")
    parser.add_argument("--scenario", default=d.scenario,
                        help="a scenario as in the demo (built-in name or TOML file; its "
                             "workers are repeated over the simulated ones) or "
                             f"{' / '.join(SYNTHETIC)} (default {d.scenario})")
    parser.add_argument("--speeds", default="1,1,0.5,0.25",
                        help="static scenario: relative speeds, repeated over the workers")
    parser.add_argument("--traces", help="trace scenario: a directory of job_*_norm.csv files "
                                         "(default: the vendored sample)")
    parser.add_argument("--straggler-mean", type=float, default=d.straggler_mean,
                        help="shifted_exp: mean extra step time as a fraction of the base")
    parser.add_argument("--slow-fraction", type=float, default=d.slow_fraction,
                        help="mixture: fraction of straggling steps")
    parser.add_argument("--slow-mean", type=float, default=d.slow_mean,
                        help="mixture: mean slowdown factor of a straggling step")
    parser.add_argument("--arms", "--policies", dest="arms", default=DEFAULT_POLICIES,
                        help=f"comma-separated arms ({', '.join(CHOICES)}) or 'all'; "
                             f"{SPEC_HELP}; default {DEFAULT_POLICIES}")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per policy (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--batch-size", type=int, default=d.batch_size,
                        help=f"samples per worker step (default {d.batch_size})")
    parser.add_argument("--us-per-sample", type=float, default=d.us_per_sample,
                        help="compute time per sample at speed 1 (default 300)")
    parser.add_argument("--step-overhead", type=float, default=d.step_overhead_s,
                        help="framework seconds per step, not scaled by speed")
    parser.add_argument("--bandwidth-gbps", type=float, default=d.bandwidth_gbps,
                        help="link bandwidth, Gbit/s (0: infinite)")
    parser.add_argument("--latency", type=float, default=d.latency_s, help="seconds per step")
    parser.add_argument("--ps-service", type=float, default=d.ps_service_s,
                        help="seconds the PS spends per push, one push at a time")
    parser.add_argument("--learning-rate", type=float, default=d.learning_rate,
                        help=f"SGD learning rate of the arms without their own @LR (default "
                             f"{d.learning_rate:g})")
    parser.add_argument("--momentum", type=float, default=d.momentum,
                        help=f"SGD momentum of the arms without their own /MOMENTUM (default "
                             f"{d.momentum:g})")
    parser.add_argument("--target-accuracy", type=float, default=d.target_accuracy,
                        help="test accuracy that ends a run and defines its time to "
                             f"target (default {d.target_accuracy:g})")
    parser.add_argument("--max-pushes", type=int, default=None,
                        help="stop after this many pushes (default 1200 unless "
                             "--max-updates or --max-time is given)")
    parser.add_argument("--max-updates", type=int, default=None, help="stop at this version")
    parser.add_argument("--max-time", type=float, default=None, help="simulated seconds")
    parser.add_argument("--no-stop-at-target", action="store_true",
                        help="keep training after the target accuracy is reached")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="pushes between evaluations (default max(60, workers))")
    parser.add_argument("--out", default="runs/simulate", help="directory for results and plots")


def config_from_args(args) -> SimConfig:
    try:
        speeds = tuple(float(s) for s in args.speeds.split(","))
    except ValueError:
        raise ValueError(f"--speeds must be comma-separated numbers, got {args.speeds!r}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    limits = (args.max_pushes, args.max_updates, args.max_time)
    max_pushes = args.max_pushes if any(v is not None for v in limits) else 1200
    return SimConfig(
        num_workers=args.workers, scenario=args.scenario, speeds=speeds, traces=args.traces,
        straggler_mean=args.straggler_mean,
        slow_fraction=args.slow_fraction, slow_mean=args.slow_mean,
        us_per_sample=args.us_per_sample, step_overhead_s=args.step_overhead,
        bandwidth_gbps=args.bandwidth_gbps or None, latency_s=args.latency,
        ps_service_s=args.ps_service, batch_size=args.batch_size,
        learning_rate=args.learning_rate, momentum=args.momentum,
        target_accuracy=args.target_accuracy, max_pushes=max_pushes,
        max_updates=args.max_updates, max_time_s=args.max_time,
        stop_at_target=not args.no_stop_at_target,
        eval_every=args.eval_every or max(60, args.workers), seed=args.seed)


def run(args) -> int:
    try:
        config = config_from_args(args)
        config.check()
        base = config.step_size
        specs = [s.arm(config.num_workers, base, config.batch_size)
                 for s in parse_arm_specs(args.arms, CHOICES)]
        for spec in specs:   # fail before any simulation on a bad name or K
            spec.make_policy().rule(config.num_workers)
        speeds = make_speed_model(config.scenario, config.num_workers, config.us_per_sample,
                                  speeds=config.speeds, traces=config.traces).describe()
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"simulating {config.num_workers} workers, {speeds}, arms "
          f"{', '.join(a.label for a in specs)}, {args.seeds} seed(s)", flush=True)
    results = run_policies(specs, config, seeds=args.seeds)
    out = pathlib.Path(args.out)
    summaries = write_report(
        out, results, title=f"simulated: {speeds}",
        meta={"argv": command_line(), "seeds": args.seeds, "config": dataclasses.asdict(config)})
    print()
    print(format_table(summaries))
    print(f"\n{verdict(summaries)}")
    print(f"\nmedians over {args.seeds} seed(s); TTA in simulated seconds to accuracy "
          f"{config.target_accuracy}; report in {out / 'report.md'}")
    return 0
