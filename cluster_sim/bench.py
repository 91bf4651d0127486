"""Benchmarks (not tests): ``python -m cluster_sim.bench overhead``.

``overhead``: on a homogeneous local cluster (1 PS, 3 workers, no injected delay), the
steps/s of `KSyncStrategy` with ASP and with Adaptive beside the stock
`ParameterServerStrategy`, interleaved in one run on one cluster so load from anything
else on the machine hits all of them alike; prints medians and ratios to stock, of
steps/s and of CPU time per step (all cluster processes and the chief), which other
load on the machine disturbs less than wall time.
"""

import argparse
import gc
import os
import statistics
import sys
import time


def _steps_per_s(cluster, make_strategy, steps, warmup, data):
    import tf_keras as keras

    from cluster_sim.workloads import compile_classifier, mlp

    strategy = make_strategy(cluster)
    with strategy.scope():
        model = compile_classifier(mlp(data.num_features, data.num_classes),
                                   keras.optimizers.SGD(0.05))
    creator = keras.utils.experimental.DatasetCreator(data.dataset_fn(32))
    model.fit(creator, epochs=1, steps_per_epoch=warmup, verbose=0)  # traces the step
    start, cpu_start = time.perf_counter(), cluster.cpu_seconds() + time.process_time()
    model.fit(creator, epochs=1, steps_per_epoch=steps, verbose=0)
    rate = steps / (time.perf_counter() - start)
    cpu_ms = 1e3 * (cluster.cpu_seconds() + time.process_time() - cpu_start) / steps
    del model, strategy
    gc.collect()
    return rate, cpu_ms


def overhead(args) -> int:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    import tensorflow as tf

    import ksync
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.workloads import digits
    from strategies import KSyncStrategy

    configs = {
        "stock": lambda c: tf.distribute.experimental.ParameterServerStrategy(c.resolver()),
        "asp": lambda c: KSyncStrategy(c.resolver(), policy=ksync.ASP()),
        "adaptive": lambda c: KSyncStrategy(c.resolver(), policy=ksync.Adaptive()),
    }
    names = [n for n in args.configs.split(",")]
    unknown = set(names) - set(configs)
    if unknown:
        print(f"error: unknown configs {sorted(unknown)}; choose from {sorted(configs)}",
              file=sys.stderr)
        return 2
    data = digits()
    rates = {n: [] for n in names}
    cpu = {n: [] for n in names}
    with LocalCluster(num_workers=args.workers) as cluster:
        for run in range(args.repeats):
            for name in names:
                rate, cpu_ms = _steps_per_s(cluster, configs[name], args.steps,
                                            args.warmup, data)
                rates[name].append(rate)
                cpu[name].append(cpu_ms)
                print(f"run {run + 1}/{args.repeats} {name:>9}: {rate:7.1f} steps/s, "
                      f"{cpu_ms:5.2f} CPU ms/step", flush=True)
    print(f"\n1 PS, {args.workers} workers, MLP 64-32-10, batch 32, {args.steps} steps per "
          f"run, median of {args.repeats}:")
    base = statistics.median(rates["stock"]) if "stock" in rates else None
    base_cpu = statistics.median(cpu["stock"]) if "stock" in cpu else None
    for name in names:
        med, med_cpu = statistics.median(rates[name]), statistics.median(cpu[name])
        ratio = (f"  steps/s ratio to stock {med / base:.3f}, CPU per step ratio "
                 f"{med_cpu / base_cpu:.3f}") if base else ""
        print(f"  {name:>9}: {med:7.1f} steps/s, {med_cpu:5.2f} CPU ms/step (cluster + "
              f"chief){ratio}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("overhead", help="KSyncStrategy against the stock strategy")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--configs", default="stock,asp,adaptive")
    args = parser.parse_args(argv)
    return overhead(args)


if __name__ == "__main__":
    sys.exit(main())
