"""`python -m cluster_sim.sim_calibrate`: the simulator beside the real harness, per policy.

1. Probe: on a real `LocalCluster` (1 PS, 4 workers, homogeneous speeds, the harness's
   injected delay) time ``model.fit`` chunks of two sizes under ASP and under BSP, and
   read the strategy's measured iteration time. From these come the simulator's framework
   costs (`SimConfig` fields): the fixed cost of one ``fit`` chunk
   (``chunk_overhead_s``), the per-step cost before the parameters are read
   (``read_overhead_s``) and after (``step_overhead_s``), and the extra delay of a worker
   released by the k-sync gate (``gate_latency_s``).
2. Real: `cluster_sim.harness.run_arm` for each policy on the static scenario (speeds
   1, 1, 0.5, 0.25; 300 us per sample; batch 32), one seed each (a run is about a minute
   on two cores).
3. Simulated: the same policies and config, in the harness's ``fit`` chunks, with the
   probed costs, medians over ``--sim-seeds`` seeds; then the error table.

The probe uses homogeneous speeds and the comparison heterogeneous ones, so the table
checks the simulator on runs it was not fitted to.

Example:

```
python -m cluster_sim.sim_calibrate --policies bsp,asp,adaptive --out runs/calibration
python -m cluster_sim.sim_calibrate --reuse runs/calibration   # simulate again only
```
"""

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

import ksync
from cluster_sim.simulate import SimConfig, parse_policy, run_policies, summarise

SPEEDS = (1.0, 1.0, 0.5, 0.25)


def probe(cluster, us_per_sample=300.0, batch_size=32, sizes=(20, 100), seed=0) -> dict:
    """Framework costs of the real strategy on ``cluster`` (seconds; see module doc)."""
    import tf_keras as keras

    from cluster_sim.slowdown import SlowdownLayer
    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy

    data = digits(seed=seed)
    n = cluster.num_workers
    input_s = batch_size * us_per_sample * 1e-6
    out = {}
    for name in ("asp", "bsp"):
        strategy = KSyncStrategy(cluster.resolver(), policy=name)
        with strategy.scope():
            slowdown = SlowdownLayer(n)
            model = compile_classifier(mlp(data.num_features, data.num_classes, (64, 64), seed,
                                           slowdown=slowdown),
                                       keras.optimizers.SGD(0.05, momentum=0.9))
        slowdown.set_speeds([1.0] * n, us_per_sample)
        creator = keras.utils.experimental.DatasetCreator(
            data.dataset_fn(batch_size, shuffle_seed=seed))
        model.fit(creator, epochs=1, steps_per_epoch=2 * n, verbose=0)  # traces the step
        times = []
        for steps in sizes:
            started = time.monotonic()
            model.fit(creator, epochs=1, steps_per_epoch=steps, verbose=0)
            times.append(time.monotonic() - started)
        per_push = (times[1] - times[0]) / (sizes[1] - sizes[0])
        t = strategy.telemetry()
        its = [w["compute_time"] for w in t["workers"] if w["compute_time"]]
        out[name] = {"chunk_s": times, "per_push_s": per_push,
                     "chunk_overhead_s": max(0.0, times[0] - sizes[0] * per_push),
                     "iteration_time_s": sum(its) / len(its)}
    asp, bsp = out["asp"], out["bsp"]
    step = n * asp["per_push_s"]             # one worker's step under ASP (all in parallel)
    after_read = min(asp["iteration_time_s"], max(0.0, step - input_s))
    round_s = n * bsp["per_push_s"]          # one BSP round: a step plus the gate
    return {
        "chunk_overhead_s": (asp["chunk_overhead_s"] + bsp["chunk_overhead_s"]) / 2,
        "step_overhead_s": after_read,
        "read_overhead_s": max(0.0, step - input_s - after_read),
        "gate_latency_s": max(0.0, round_s - step),
        "raw": out,
    }


def sim_config(costs: dict, real_config, num_workers=4) -> SimConfig:
    """The harness's run, with the probed framework costs, as a `SimConfig`."""
    return SimConfig(
        num_workers=num_workers, scenario="static", speeds=tuple(real_config.speeds),
        us_per_sample=real_config.us_per_sample, batch_size=real_config.batch_size,
        learning_rate=real_config.learning_rate, momentum=real_config.momentum,
        hidden=tuple(real_config.hidden), target_accuracy=real_config.target_accuracy,
        max_pushes=real_config.max_pushes, eval_every=real_config.pushes_per_chunk,
        chunk_pushes=real_config.pushes_per_chunk,
        chunk_overhead_s=costs["chunk_overhead_s"], step_overhead_s=costs["step_overhead_s"],
        read_overhead_s=costs["read_overhead_s"], gate_latency_s=costs["gate_latency_s"],
        # The harness's workers sleep in their input pipeline, and every worker's
        # pipeline shuffles with the same seed, so they read the same batch order.
        input_before_read=True, same_batch_order=True,
        bandwidth_gbps=None, latency_s=0.0, seed=real_config.seed)


def run_real(specs, real_config, out) -> tuple[dict, list]:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.harness import Arm, run_arm
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.scenarios import load_scenario

    results = []
    with LocalCluster(num_workers=len(real_config.speeds)) as cluster:
        print("probing framework costs (homogeneous ASP and BSP)...", flush=True)
        costs = probe(cluster, real_config.us_per_sample, real_config.batch_size)
        print(json.dumps({k: v for k, v in costs.items() if k != "raw"}), flush=True)
        for spec in specs:
            started = time.monotonic()
            results.append(run_arm(cluster, Arm(spec, spec), load_scenario("static"),
                                   config=real_config))
            print(f"real {spec}: TTA {results[-1]['tta_s']}, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    (out / "real.json").write_text(json.dumps(
        {"config": dataclasses.asdict(real_config), "costs": costs, "results": results},
        indent=1, default=list))
    return costs, results


def time_at_version(result: dict, version: int):
    """Simulated seconds at the first evaluation with at least ``version`` updates."""
    for point in result["curve"]:
        if point["version"] >= version:
            return point["wall_s"]
    return None


def error_table(real: list[dict], simulated: list[dict], runs: list[dict]) -> str:
    """One row per policy. ``t@v`` is the simulated time to the number of updates the
    real run had made at its TTA: the timing error without the accuracy path's noise."""
    from cluster_sim.report import median_of
    rows = []
    pct = lambda s, r: "-" if s is None or r in (None, 0) else f"{100 * (s - r) / r:+.0f}%"
    num = lambda v, f: "-" if v is None else format(v, f)
    for r, s in zip(real, simulated):
        at_v = None
        if r["tta_s"] is not None:
            v = next(c["version"] for c in r["curve"] if c["wall_s"] >= r["tta_s"])
            at_v = median_of([time_at_version(x, v) for x in runs
                              if x["policy"] == r["policy"]])
        rows.append((r["policy"], num(r["tta_s"], ".2f"), num(s["tta_s"], ".2f"),
                     pct(s["tta_s"], r["tta_s"]), num(at_v, ".2f"), pct(at_v, r["tta_s"]), num(r["samples_per_s"], ".0f"),
                     num(s["samples_per_s"], ".0f"), pct(s["samples_per_s"], r["samples_per_s"]),
                     f"{r['staleness_p95']}/{num(s['staleness_p95'], '.0f')}",
                     f"{r['final_accuracy']:.3f}/{num(s['final_accuracy'], '.3f')}"))
    header = ("policy", "real TTA s", "sim TTA s", "TTA err", "sim t@v s", "t@v err",
              "real smp/s", "sim smp/s",
              "thr err", "stale p95 r/s", "final acc r/s")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(x) for x in rows])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim.sim_calibrate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="bsp,asp,adaptive")
    parser.add_argument("--sim-seeds", type=int, default=3)
    parser.add_argument("--max-pushes", type=int, default=1200)
    parser.add_argument("--reuse", help="directory with a real.json of an earlier run: "
                                        "skip the real cluster")
    parser.add_argument("--out", default="runs/calibration")
    args = parser.parse_args(argv)
    from cluster_sim.harness import RunConfig
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs = [s.strip() for s in args.policies.split(",") if s.strip()]
    try:
        for spec in specs:
            parse_policy(spec).rule(len(SPEEDS))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.reuse:
        saved = json.loads((pathlib.Path(args.reuse) / "real.json").read_text())
        real_config = RunConfig(**{k: tuple(v) if isinstance(v, list) else v
                                   for k, v in saved["config"].items()})
        costs, real = saved["costs"], saved["results"]
        by_name = {r["policy"]: r for r in real}
        real = [by_name[s] for s in specs]
    else:
        real_config = RunConfig(speeds=SPEEDS, max_pushes=args.max_pushes)
        costs, real = run_real(specs, real_config, out)
    config = sim_config(costs, real_config)
    config = dataclasses.replace(config, stop_at_target=False)  # t@v needs the whole run
    runs = run_policies(specs, config, seeds=args.sim_seeds, progress=False)
    for run in runs:  # TTA and throughput as the harness measures them: up to the target
        if run["tta_s"] is not None:
            upto = [c for c in run["curve"] if c["wall_s"] <= run["tta_s"]]
            run["samples_per_s"] = upto[-1]["pushes"] * config.batch_size / run["tta_s"]
    simulated = summarise(runs)
    table = error_table(real, simulated, runs)
    (out / "calibration.txt").write_text(table + "\n")
    print(f"\nframework costs: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in costs.items()
                                                if k != "raw"))
    print(f"real: 1 run per policy; simulated: median of {args.sim_seeds} seeds; t@v: "
          "simulated time to the real run's update count at its TTA\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
