"""`python -m cluster_sim.simulate`: the same policies on hundreds of simulated workers.

A discrete-event simulator (`cluster_sim.sim_engine`): simulated clock, worker step
times from a scenario (static speeds, Alibaba-PAI-format traces, shifted-exponential or
Gaussian-mixture stragglers), network time from bandwidth and model size, and real
gradients of the digits MLP computed in event order, under the very `ksync` policy and
`ksync.UpdateState` objects the strategy uses. Deterministic for a seed. Writes
results.json (the harness's per-policy results, one entry per seed, plus medians) and
accuracy / staleness plots.

Example:

```
python -m cluster_sim.simulate --workers 64 --scenario trace \\
    --traces ../shared/traces/alibaba_pai --policies bsp,asp,adaptive --seeds 3 --out runs/sim
```

or from Python:

>>> import ksync
>>> from cluster_sim.simulate import SimConfig, simulate
>>> r = simulate(ksync.KSync(k=2), SimConfig(num_workers=4, max_pushes=60))
>>> r["applied"] + r["dropped"] + r["pending"] == r["pushed"] == 60
True
"""

import argparse
import dataclasses
import json
import pathlib
import sys
import time

import ksync
from cluster_sim.sim_engine import SimConfig, Simulation, simulate
from cluster_sim.sim_workers import SCENARIOS

__all__ = ["SimConfig", "Simulation", "simulate", "run_policies", "summarise", "main"]

DEFAULT_POLICIES = "bsp,asp,adaptive"


parse_policy = ksync.parse


def run_policies(policy_specs, config: SimConfig, seeds=1, data=None, progress=True,
                 allocator_factory=None) -> list[dict]:
    """Simulate every policy for seeds ``config.seed .. config.seed + seeds - 1``.

    Each run gets a fresh policy object parsed from its spec (policies keep history).
    """
    from cluster_sim.workloads import digits
    results = []
    for offset in range(seeds):
        seed = config.seed + offset
        run_config = dataclasses.replace(config, seed=seed)
        run_data = data or digits(seed=seed)
        for spec in policy_specs:
            policy = parse_policy(spec) if isinstance(spec, str) else spec
            sim = Simulation(policy, run_config, run_data,
                             allocator=allocator_factory() if allocator_factory else None)
            bar = _Bar() if progress else None
            started = time.perf_counter()
            result = sim.run(progress=bar.start(sim, spec, seed) if bar else None)
            result["sim_run_s"] = time.perf_counter() - started
            if bar:
                bar.close()
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
                                 t=f"{s.clock.now:.2f}s", refresh=False)
        return progress

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def summarise(results: list[dict]) -> list[dict]:
    """Medians over seeds, per policy, of the headline numbers (None where missing)."""
    from cluster_sim.report import median_of
    out = []
    for policy in dict.fromkeys(r["policy"] for r in results):
        runs = [r for r in results if r["policy"] == policy]
        row = {"policy": policy, "seeds": len(runs),
               "reached_target": sum(r["tta_s"] is not None for r in runs)}
        for key in ("tta_s", "final_accuracy", "samples_per_s", "hardware_efficiency",
                    "idle_fraction", "staleness_p50", "staleness_p95", "version", "dropped",
                    "wall_s", "sim_run_s"):
            row[key] = median_of([r.get(key) for r in runs])
        out.append(row)
    return out


def format_summary(rows: list[dict]) -> str:
    header = ("policy", "TTA s", "reached", "final acc", "samples/s", "hw eff", "idle",
              "stale p95", "updates", "dropped", "run s")
    fmt = lambda v, f: "-" if v is None else format(v, f)
    body = [(r["policy"], fmt(r["tta_s"], ".3f"), f"{r['reached_target']}/{r['seeds']}",
             fmt(r["final_accuracy"], ".3f"), fmt(r["samples_per_s"], ".0f"),
             fmt(r["hardware_efficiency"], ".2f"), fmt(r["idle_fraction"], ".2f"),
             fmt(r["staleness_p95"], ".0f"), fmt(r["version"], ".0f"),
             fmt(r["dropped"], ".0f"), fmt(r["sim_run_s"], ".1f")) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_results(results, config: SimConfig, out) -> pathlib.Path:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps({"config": dataclasses.asdict(config), "results": results,
                                "summary": summarise(results)}, indent=1, default=_plain))
    return path


def _plain(value):
    if hasattr(value, "item"):   # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = SimConfig()
    parser.add_argument("--workers", type=int, default=d.num_workers,
                        help="simulated workers (default 4)")
    parser.add_argument("--scenario", default=d.scenario, choices=SCENARIOS)
    parser.add_argument("--speeds", default="1,1,0.5,0.25",
                        help="static scenario: relative speeds, repeated over the workers")
    parser.add_argument("--traces", help="trace scenario: a directory of job_*_norm.csv files")
    parser.add_argument("--trace-time-unit", type=float, default=None,
                        help="simulated seconds per trace time unit (default: one nominal step)")
    parser.add_argument("--straggler-mean", type=float, default=d.straggler_mean,
                        help="shifted_exp: mean extra step time as a fraction of the base")
    parser.add_argument("--slow-fraction", type=float, default=d.slow_fraction,
                        help="mixture: fraction of straggling steps")
    parser.add_argument("--slow-mean", type=float, default=d.slow_mean,
                        help="mixture: mean slowdown factor of a straggling step")
    parser.add_argument("--policies", default=DEFAULT_POLICIES,
                        help="comma-separated policies, options after ':' separated by ';' "
                             f"(e.g. 'ksync:k=8,ssp:max_staleness=4'); default {DEFAULT_POLICIES}")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per policy (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--us-per-sample", type=float, default=d.us_per_sample,
                        help="compute time per sample at speed 1 (default 300)")
    parser.add_argument("--step-overhead", type=float, default=d.step_overhead_s,
                        help="framework seconds per step, not scaled by speed")
    parser.add_argument("--bandwidth-gbps", type=float, default=d.bandwidth_gbps,
                        help="link bandwidth, Gbit/s (0: infinite)")
    parser.add_argument("--latency", type=float, default=d.latency_s, help="seconds per step")
    parser.add_argument("--ps-service", type=float, default=d.ps_service_s,
                        help="seconds the PS spends per push, one push at a time")
    parser.add_argument("--learning-rate", type=float, default=d.learning_rate)
    parser.add_argument("--momentum", type=float, default=d.momentum)
    parser.add_argument("--target-accuracy", type=float, default=d.target_accuracy)
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
        trace_time_unit_s=args.trace_time_unit, straggler_mean=args.straggler_mean,
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
        specs = [s for s in args.policies.split(",") if s.strip()]
        if not specs:
            raise ValueError("--policies names no policy")
        for spec in specs:   # fail before any simulation on a bad name or K
            parse_policy(spec).rule(config.num_workers)
        from cluster_sim.sim_workers import make_scenario
        scenario = make_scenario(config.scenario, config.num_workers, config.us_per_sample,
                                 speeds=config.speeds, traces=config.traces,
                                 time_unit_s=config.trace_time_unit_s)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"simulating {config.num_workers} workers, {scenario.describe()}, policies "
          f"{', '.join(specs)}, {args.seeds} seed(s)", flush=True)
    results = run_policies(specs, config, seeds=args.seeds)
    path = write_results(results, config, args.out)
    from cluster_sim.sim_plots import write_plots
    plots = write_plots(results, args.out, config.target_accuracy)
    print()
    print(format_summary(summarise(results)))
    print(f"\nmedians over {args.seeds} seed(s); TTA in simulated seconds to accuracy "
          f"{config.target_accuracy}; results in {path}; plots "
          f"{', '.join(str(p) for p in plots)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim.simulate",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
