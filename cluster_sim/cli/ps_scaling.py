"""``python -m cluster_sim bench ps-scaling``: steps/s against the number of PS tasks.

A benchmark, not a test. It starts a local cluster with 1, 2 and 4 PS tasks
in turn (2 workers each) and trains a model whose update is PS-bound (a wide dense layer
sharded over the PS tasks with ``FixedShardsPartitioner(num_ps)``: every step moves and
updates its 2 M parameters on the PS tasks) under the stock `ParameterServerStrategy` and
under `KSyncStrategy` with ASP, BSP and Adaptive. Arms are interleaved repeat by repeat,
the order rotated each time. Prints medians of steps/s and of CPU time per step (every
cluster process and the chief), and each arm's scaling ratio (steps/s at n PS over steps/s
at 1 PS) beside the stock strategy's.

Only ratios measured in one run mean anything: the PS tasks share the machine's cores
with the workers and the chief, so the absolute figures say little about a real cluster.

``--simulate COSTS_JSON`` asks the simulator instead, with the PS and network costs of
that file (`cluster_sim.sim.ps`; ``cluster_sim/scenarios/bench/costs_ps.json``): pushes
per simulated second of ASP and BSP on the benchmark's ``bench/static`` speeds and
workload, against ``--sim-workers`` and ``--ps``, beside what the PS tasks could absorb
(the number of PS tasks over one push's service time, at most): where the PS saturates.

Example:

```
python -m cluster_sim bench ps-scaling --simulate cluster_sim/scenarios/bench/costs_ps.json \
    --sim-workers 8,64,256 --ps 1,2,4
```
"""

import gc
import statistics

from cluster_sim.cli import prepare_tensorflow, release, time_fit

ARMS = ("stock", "asp", "bsp", "adaptive")


def _model(width: int, features: int):
    import tf_keras as keras
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.layers.Input((features,)),
                             keras.layers.Dense(width, activation="relu"),
                             keras.layers.Dense(10)])


def _run(cluster, arm, num_ps, steps, warmup, width, features):
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    import ksync
    from strategies import KSyncStrategy

    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps)
    if arm == "stock":
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            cluster.resolver(), partitioner)
    else:
        strategy = KSyncStrategy(cluster.resolver(), partitioner, policy=ksync.get(arm))
    with strategy.scope():
        model = _model(width, features)
        model.compile(keras.optimizers.SGD(0.01),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, features)).astype("float32")
    y = rng.integers(0, 10, size=256)

    def dataset_fn(_context=None):
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

    rate, cpu_ms = time_fit(cluster, model, keras.utils.experimental.DatasetCreator(dataset_fn),
                            steps, warmup)
    release(strategy)
    del model, strategy
    gc.collect()
    return rate, cpu_ms["total"]


def simulated_rates(costs: dict, workers, counts, steps_per_worker: int = 20):
    """``{(policy, workers, num_ps): pushes per simulated second}`` on ``bench/static``
    with ``costs`` (a costs file's), after the run's start (``num_ps`` 0: the PS free);
    and each PS count's capacity for the benchmark's push (pushes/s, when it only
    accumulates)."""
    import dataclasses

    import ksync
    from cluster_sim.cli.bench_costs import injected_us_per_sample
    from cluster_sim.sim.mirror import sim_config
    from cluster_sim.harness.config import RunConfig, load_data
    from cluster_sim.scenarios import load_scenario
    from cluster_sim.sim import Simulation

    scenario = load_scenario("bench/static")
    us = injected_us_per_sample(costs.get("framework_step_s", 0.0), scenario.batch_size,
                                max(scenario.speeds_at(0.0)))
    scenario = dataclasses.replace(scenario, us_per_sample=us)
    data = load_data(scenario)
    base = sim_config(costs, scenario, RunConfig.from_scenario(scenario), data)
    rates, capacity = {}, {}
    for n in workers:
        for p in [0] + list(counts):
            free = dict(ps_service_s=0.0, ps_push_s_per_byte=0.0, ps_apply_s=0.0,
                        ps_apply_s_per_byte=0.0) if p == 0 else {}
            config = dataclasses.replace(base, num_workers=n, num_ps=max(p, 1),
                                         max_pushes=steps_per_worker * n, max_updates=None,
                                         eval_every=10 ** 9, eval_relative_gap=0.0,
                                         # Throughput only: a rate that never diverges.
                                         learning_rate=1e-3, momentum=0.0, **free)
            for name, policy in (("ASP", ksync.ASP()), ("BSP", ksync.BSP())):
                sim = Simulation(policy, config, data)
                r = sim.run()
                rates[(name, n, p)] = r["pushed"] / (r["wall_s"] - config.start_overhead_s)
                if p:
                    capacity[p] = 1.0 / config.ps_costs.push_service(sim.model.nbytes, p)
    return rates, capacity


def run_simulated(args, counts) -> int:
    import json
    import pathlib

    from cluster_sim.report.tables import text_table
    costs = json.loads(pathlib.Path(args.simulate).read_text())["costs"]
    workers = [int(n) for n in args.sim_workers.split(",")]
    rates, capacity = simulated_rates(costs, workers, counts)
    header = ["policy", "workers", "pushes/s, PS free"] + [f"{p} PS" for p in counts]
    rows = [[policy, n] + [f"{rates[(policy, n, p)]:.0f}" for p in [0] + counts]
            for policy in ("ASP", "BSP") for n in workers]
    rows.append(["PS capacity", "-", "-"] + [f"{capacity[p]:.0f}" for p in counts])
    print(f"simulated, bench/static, costs {args.simulate}: pushes per simulated second")
    print(text_table(header, rows))
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--ps", default="1,2,4", help="PS task counts (default 1,2,4)")
    parser.add_argument("--workers", type=int, default=2, help="worker tasks (default 2)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved repeats per arm (medians over them)")
    parser.add_argument("--steps", type=int, default=150, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps per run")
    parser.add_argument("--width", type=int, default=4096,
                        help="units of the wide layer (parameters: width x (features+11))")
    parser.add_argument("--features", type=int, default=512, help="input features")
    parser.add_argument("--simulate", metavar="COSTS_JSON",
                        help="simulated pushes/s instead, with this file's PS costs")
    parser.add_argument("--sim-workers", default="8,64,256",
                        help="simulated worker counts (default 8,64,256)")


def run(args) -> int:
    counts = [int(n) for n in args.ps.split(",")]
    if not counts or min(counts) < 1 or args.repeats < 1 or args.steps < 1:
        raise SystemExit("ps-scaling: --ps needs positive counts; --repeats and --steps "
                         "must be >= 1")

    if args.simulate:
        return run_simulated(args, counts)
    prepare_tensorflow()
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.netns import isolate_loopback
    from cluster_sim.report.tables import text_table
    isolate_loopback()

    results = {}  # (arm, num_ps) -> [(steps/s, cpu ms/step)]
    for num_ps in counts:
        with LocalCluster(num_workers=args.workers, num_ps=num_ps) as cluster:
            for repeat in range(args.repeats):
                order = ARMS[repeat % len(ARMS):] + ARMS[:repeat % len(ARMS)]
                for arm in order:
                    rate, cpu = _run(cluster, arm, num_ps, args.steps, args.warmup,
                                     args.width, args.features)
                    results.setdefault((arm, num_ps), []).append((rate, cpu))
                    print(f"ps={num_ps} repeat {repeat + 1}/{args.repeats} {arm:9s} "
                          f"{rate:7.1f} steps/s  {cpu:6.1f} CPU ms/step", flush=True)

    def med(arm, n, i):
        return statistics.median(r[i] for r in results[(arm, n)])

    print(f"\nmedians of {args.repeats} interleaved runs; {args.workers} workers; "
          f"{args.width * (args.features + 11):,} parameters sharded over the PS tasks")
    header = ["arm"] + [f"{n} PS steps/s" for n in counts] + \
        [f"{n}/{counts[0]} PS" for n in counts[1:]] + \
        [f"ratio vs stock's ({n} PS)" for n in counts[1:]] + \
        [f"CPU ms/step ({n} PS)" for n in counts]
    rows = []
    for arm in ARMS:
        scale = [med(arm, n, 0) / med(arm, counts[0], 0) for n in counts[1:]]
        stock = [med("stock", n, 0) / med("stock", counts[0], 0) for n in counts[1:]]
        rows.append([arm] + [f"{med(arm, n, 0):.1f}" for n in counts] +
                    [f"{s:.2f}" for s in scale] +
                    [f"{s / t:.2f}" for s, t in zip(scale, stock)] +
                    [f"{med(arm, n, 1):.1f}" for n in counts])
    print(text_table(header, rows))
    return 0
