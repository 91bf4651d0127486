"""`python -m cluster_sim.sim_scale`: how the simulator's own run time grows with workers.

For each worker count and policy, simulate the trace scenario for ``--updates`` PS
updates (not stopping at the target, so every run does the same number of updates) and
print simulated TTA, pushes, and the simulator's wall time per run and per push.

Example:

```
python -m cluster_sim.sim_scale --workers 16,64,256 --policies bsp,asp,adaptive \\
    --updates 5000 --traces ../shared/traces/alibaba_pai
```
"""

import argparse
import sys
import time

from cluster_sim.simulate import SimConfig, Simulation, parse_policy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim.sim_scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="16,64,256,1024")
    parser.add_argument("--policies", default="bsp,asp,adaptive")
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--scenario", default="trace")
    parser.add_argument("--traces", default="../shared/traces/alibaba_pai")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from cluster_sim.workloads import digits
    try:
        counts = [int(w) for w in args.workers.split(",")]
        specs = [s for s in args.policies.split(",") if s]
        for spec in specs:
            parse_policy(spec)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    data = digits(seed=args.seed)
    header = ("workers", "policy", "updates", "pushes", "sim s", "TTA s", "final acc",
              "run s", "us/push")
    print("  ".join(header), flush=True)
    for n in counts:
        for spec in specs:
            config = SimConfig(num_workers=n, scenario=args.scenario, traces=args.traces,
                               max_pushes=None, max_updates=args.updates,
                               stop_at_target=False, eval_every=max(60, n), seed=args.seed)
            sim = Simulation(parse_policy(spec), config, data)
            started = time.perf_counter()
            r = sim.run()
            run_s = time.perf_counter() - started
            tta = "-" if r["tta_s"] is None else f"{r['tta_s']:.3f}"
            print(f"{n}  {spec}  {r['version']}  {r['pushed']}  {r['wall_s']:.2f}  {tta}  "
                  f"{r['final_accuracy']:.3f}  {run_s:.1f}  {1e6 * run_s / r['pushed']:.0f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
