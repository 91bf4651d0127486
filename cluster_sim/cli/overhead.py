"""``python -m cluster_sim bench overhead``: what a step through ksync costs beside a stock
step, and where the cost goes.

On a homogeneous local cluster (1 PS, 3 workers, no injected delay, the digits MLP at
batch 32), every configuration trains the same `fit` steps, interleaved run by run on one
cluster so that load from anything else on the machine hits all of them alike. For each
it prints medians over the runs of:

- steps/s and CPU time per step of every process (the cluster's and the chief's), with
  their ratios to the stock `ParameterServerStrategy`; CPU time is the figure to judge
  by: this 2-core machine swings 2x in wall time between runs, much less in CPU time;
- the CPU per step split by process: the chief (Keras' dispatch of each step, the
  coordinator's threads, the gate), the workers (input, forward and backward pass, the
  push's client side) and the PS (the optimizer's update, ksync's critical section, the
  reads the gate and allocation make);
- where the cost goes: the CPU per step of each process split by what
  its threads do (`cluster_sim.cpu_profile`): the chief's Keras dispatch, its closure
  threads (each step's remote call and ksync's gate), ksync's monitor, TensorFlow's
  runtime; the workers' and the PS's op threads and gRPC threads;
- the reads the chief makes of the PS beyond the steps: gate reads and rule refreshes
  per step, and what one of each costs (CPU of chief and PS, timed after the run):
  their product is their share of a step.
- with an allocation arm (``asp+alloc``, ``bsp+alloc``) and its rule among the
  configurations: allocation against equal batches per sample (samples/s, CPU per
  sample), paired by repeat: on identical workers that is allocation's pure cost.

Example::

    python -m cluster_sim bench overhead --repeats 5
    python -m cluster_sim bench overhead --configs stock,asp --steps 1000
    python -m cluster_sim bench overhead --configs stock,bsp,bsp+alloc --repeats 7
    python -m cluster_sim bench overhead --repeats 9 --out a.json   # then b.json alike
    python -m cluster_sim bench overhead --pool a.json b.json       # both runs' repeats
"""

import gc
import json
import statistics
import sys

from cluster_sim.cli import prepare_tensorflow, release, time_fit
from cluster_sim.report.stats import paired_ratio_ci
from cluster_sim.report.tables import text_table

#: configuration -> (policy name or None for the stock strategy, batch allocation,
#: learning-rate scaling: "auto" is the policy's own, "power" for Adaptive)
CONFIGS = {
    "stock": (None, False, "auto"),
    "asp": ("asp", False, "auto"),
    "bsp": ("bsp", False, "auto"),
    "adaptive": ("adaptive", False, "auto"),
    "bsp+alloc": ("bsp", True, "auto"),
    "asp+alloc": ("asp", True, "auto"),
    # the cost of scaling the learning rate at the commit, against the same rule without
    "bsp+linear": ("bsp", False, "linear"),
    "adaptive+adascale": ("adaptive", False, "adascale"),
    "adaptive+unscaled": ("adaptive", False, None),
    # The same rule with a Keras 3 model (strategies.keras3_fit) instead of tf_keras.
    "asp-keras3": ("asp", False, "auto"),
    "bsp-keras3": ("bsp", False, "auto"),
    "adaptive-keras3": ("adaptive", False, "auto"),
}
KERAS3 = "-keras3"
ROLES = ("chief", "worker", "ps")
#: examples per worker step; with allocation, the mean of the allocated sizes
BATCH = 32


def _measure(cluster, config, steps, warmup, data):
    import tensorflow as tf
    import tf_keras as keras

    import ksync
    from cluster_sim.workloads import compile_classifier, mlp
    from predictor import BatchAllocator
    from strategies import KSyncStrategy

    policy, allocate, lr_scaling = CONFIGS[config]
    if policy is None:
        strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.resolver())
    else:
        allocator = (BatchAllocator(global_batch=BATCH * cluster.num_workers, min_batch=8)
                     if allocate else None)
        strategy = KSyncStrategy(cluster.resolver(), policy=ksync.get(policy),
                                 batch_allocation=allocator,
                                 allocation_mode="last" if allocate else None,
                                 lr_scaling=lr_scaling)
    # A Keras 3 model takes the same dataset function (tf_keras wraps it).
    creator = keras.utils.experimental.DatasetCreator(
        data.dataset_fn(None if allocate else BATCH))
    if config.endswith(KERAS3):
        import keras
    with strategy.scope():
        model = compile_classifier(mlp(data.num_features, data.num_classes, keras=keras),
                                   keras.optimizers.SGD(0.05), keras=keras)
    before = _chief_reads(strategy)
    rate, cpu_ms = time_fit(cluster, model, creator, steps, warmup,
                            samples=None if policy is None else lambda: _samples(strategy))
    cpu_ms.setdefault("samples_per_step", BATCH)
    after = _chief_reads(strategy)
    reads = {k: (after[k] - before[k]) / (steps + warmup) for k in after}
    if policy is not None:
        reads["gate_ms"] = _cpu_ms_per_call(cluster, strategy.gate_state)
        reads["refresh_ms"] = _cpu_ms_per_call(cluster, strategy._state.counters)
    release(strategy)
    del model, strategy
    gc.collect()
    return rate, cpu_ms, reads


def _cpu_ms_per_call(cluster, read, calls=100):
    """CPU ms of the chief and the PS tasks per call of ``read`` (a read of the PS the
    chief makes), after one untimed call (it traces)."""
    import time
    read()
    start = time.process_time() + cluster.cpu_seconds("ps")
    for _ in range(calls):
        read()
    return 1e3 * (time.process_time() + cluster.cpu_seconds("ps") - start) / calls


def _samples(strategy):
    return sum(worker["samples"] for worker in strategy.telemetry()["workers"])


def _chief_reads(strategy):
    coordinator = getattr(strategy, "coordinator", None)
    if coordinator is None or not hasattr(coordinator, "chief_reads"):
        return {"gate": 0, "refresh": 0}
    return coordinator.chief_reads()


def run(args) -> int:
    if args.pool:
        try:
            runs, meta = load_runs(args.pool)
        except (OSError, ValueError, KeyError) as err:
            print(f"error: --pool takes files that `bench overhead --out` wrote: {err}",
                  file=sys.stderr)
            return 2
        _report(runs, meta)
        return 0
    names = args.configs.split(",")
    unknown = set(names) - set(CONFIGS)
    if unknown or "stock" not in names or args.repeats < 1:
        print(f"error: --configs takes names from {sorted(CONFIGS)}, stock among them "
              f"(the baseline), got {args.configs!r}; --repeats must be >= 1",
              file=sys.stderr)
        return 2
    prepare_tensorflow()
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.workloads import digits

    data = digits()
    runs = {n: [] for n in names}
    with LocalCluster(num_workers=args.workers) as cluster:
        for repeat in range(args.repeats):
            # The order rotates, so no configuration always runs first after a pause.
            order = names[repeat % len(names):] + names[:repeat % len(names)]
            for name in order:
                rate, cpu_ms, reads = _measure(cluster, name, args.steps, args.warmup, data)
                runs[name].append((rate, cpu_ms, reads))
                print(f"run {repeat + 1}/{args.repeats} {name:>10}: {rate:7.1f} steps/s, "
                      f"{cpu_ms['total']:5.2f} CPU ms/step (chief {cpu_ms['chief']:.2f}, "
                      f"workers {cpu_ms['worker']:.2f}, ps {cpu_ms['ps']:.2f})", flush=True)
    meta = {"workers": args.workers, "steps": args.steps}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "runs": runs}, f)
    _report(runs, meta)
    if args.out:
        print(f"\nruns: {args.out} (pool several such files with --pool)")
    return 0


def load_runs(paths) -> tuple[dict, dict]:
    """The runs of several `bench overhead --out` files, one after the other per
    configuration (repeat i of each file stays paired with that file's stock run i).

    >>> import json, tempfile
    >>> run = [100.0, {"total": 10.0}, {}]
    >>> paths = []
    >>> for _ in range(2):
    ...     with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    ...         json.dump({"meta": {"workers": 3, "steps": 600},
    ...                    "runs": {"stock": [run], "asp": [run]}}, f)
    ...     paths.append(f.name)
    >>> runs, meta = load_runs(paths)
    >>> len(runs["asp"]), meta
    (2, {'workers': 3, 'steps': 600})
    """
    runs, meta = {}, None
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        if meta is not None and saved["meta"] != meta:
            raise ValueError(f"{path} was measured with {saved['meta']}, the first file "
                             f"with {meta}: pool runs of the same settings")
        meta = saved["meta"]
        if runs and set(saved["runs"]) != set(runs):
            raise ValueError(f"{path} has the configurations {sorted(saved['runs'])}, the "
                             f"first file {sorted(runs)}")
        for name, rs in saved["runs"].items():
            runs.setdefault(name, []).extend(rs)
    if "stock" not in runs:
        raise ValueError("no stock runs to compare with")
    return runs, meta


def _report(runs, meta) -> None:
    """Every table, from the runs of each configuration (paired by index with stock's)."""
    def med(name, pick):
        return statistics.median(pick(r) for r in runs[name])

    stock_rate = med("stock", lambda r: r[0])
    stock_cpus = [r[1]["total"] for r in runs["stock"]]
    rows = []
    for name in runs:
        rate, cpu = med(name, lambda r: r[0]), med(name, lambda r: r[1]["total"])
        # Paired by run: each run's ratio to the stock run beside it.
        ratio, low, high, _ = paired_ratio_ci([r[1]["total"] for r in runs[name]],
                                              stock_cpus)
        roles = [med(name, lambda r, role=role: r[1][role]) for role in ROLES]
        stock_roles = [med("stock", lambda r, role=role: r[1][role]) for role in ROLES]
        rows.append([name, f"{rate:.1f}", f"{rate / stock_rate:.2f}", f"{cpu:.2f}",
                     f"{ratio:.3f} [{low:.2f}, {high:.2f}]"] +
                    [f"{r:.2f} ({r - s:+.2f})" for r, s in zip(roles, stock_roles)] +
                    [f"{med(name, lambda r: r[2]['gate']):.2f}",
                     f"{med(name, lambda r: r[2]['refresh']):.3f}"])
    repeats = len(runs["stock"])
    print(f"\n1 PS, {meta['workers']} workers, digits MLP 64-32-10, batch {BATCH} per worker, "
          f"{meta['steps']} timed steps per run, median of {repeats} interleaved runs:")
    print(text_table(["config", "steps/s", "vs stock", "CPU ms/step", "vs stock [interval]",
                      "chief ms (vs stock)", "workers ms", "ps ms", "gate reads/step",
                      "refreshes/step"], rows))
    print("CPU ms are per step, summed over the job's processes; the chief's include "
          "Keras' dispatch and the coordinator's threads. 'vs stock': each run's CPU ratio "
          "to the stock run of the same repeat, under 5 repeats their median and range, "
          "from 5 their geometric mean and 90% CI (cluster_sim.report.stats.seed_interval).")
    _print_reads(runs)
    _print_parts(runs)
    _print_allocation(runs)
    _print_keras3(runs)


def _print_reads(runs) -> None:
    """The chief's reads of the PS: per step, the CPU of one, and their product."""
    rows = []
    for name, rs in runs.items():
        if "gate_ms" not in rs[0][2]:
            continue
        cells = [name]
        for kind in ("gate", "refresh"):
            per_step = statistics.median(r[2][kind] for r in rs)
            cost = statistics.median(r[2][f"{kind}_ms"] for r in rs)
            cells += [f"{per_step:.3f}", f"{cost:.2f}", f"{per_step * cost:.2f}"]
        rows.append(cells)
    _print_table("The chief's reads of the PS besides the steps (CPU of chief + PS per "
                 "read, timed after each run; medians):",
                 ["config", "gate reads/step", "ms/read", "ms/step", "refreshes/step",
                  "ms/refresh", "ms/step"], rows)


def _print_parts(runs) -> None:
    """CPU per step by process and thread (`cluster_sim.cpu_profile`), beside stock."""
    from cluster_sim.cpu_profile import PARTS

    def part(name, key):
        return statistics.median(r[1]["parts"].get(key, 0.0) for r in runs[name])

    keys = [f"{role}:{p}" for role, ps in PARTS.items() for p in ps]
    rows = [[key] + [f"{part(name, key):.2f}" + ("" if name == "stock" else
                                                 f" ({part(name, key) - part('stock', key):+.2f})")
                     for name in runs] for key in keys]
    _print_table("Where a step's CPU goes, ms per step by process and thread (medians; in "
                 "brackets the difference to stock). chief:dispatch is Keras' loop, "
                 "chief:steps the coordinator's closure threads (remote calls, ksync's gate "
                 "and refreshes), chief:ksync ksync's monitor thread; ops/rpc are "
                 "TensorFlow's op and gRPC threads:", ["process:thread"] + list(runs), rows)


def _print_allocation(runs) -> None:
    """Each allocation arm against the same rule with equal batches, per sample: the
    allocated sizes differ between workers, so a step is not a fixed amount of work."""
    rows = _paired_rows(runs, "+alloc", rate=lambda r: r[0] * r[1]["samples_per_step"],
                        cpu=lambda r: 1e3 * r[1]["total"] / r[1]["samples_per_step"],
                        rate_format="{:.0f}", cpu_format="{:.0f}")
    _print_table("Batch allocation against equal batches, same rule, homogeneous workers "
                 "(paired by repeat; a range under 5 repeats, a 90% CI from 5):",
                 ["arms", "samples/s alloc", "equal", "ratio [interval]",
                  "CPU us/sample alloc", "equal", "ratio [interval]"], rows)


def _print_keras3(runs) -> None:
    """Each Keras 3 arm against the same rule with the tf_keras model, paired by
    repeat: what training a Keras 3 model (`strategies.keras3_fit`) costs."""
    rows = _paired_rows(runs, KERAS3, rate=lambda r: r[0], cpu=lambda r: r[1]["total"],
                        rate_format="{:.1f}", cpu_format="{:.2f}")
    _print_table("Keras 3 against tf_keras, same rule and model (paired by repeat; a range "
                 "under 5 repeats, a 90% CI from 5):",
                 ["arms", "steps/s keras3", "tf_keras", "ratio [interval]",
                  "CPU ms/step keras3", "tf_keras", "ratio [interval]"], rows)


def _paired_rows(runs, suffix, rate, cpu, rate_format, cpu_format):
    """A row for each configuration ``X{suffix}`` whose ``X`` ran too: both arms'
    medians and their paired ratio, of ``rate(run)`` and of ``cpu(run)``."""
    rows = []
    for name in runs:
        base = name.removesuffix(suffix)
        if base == name or base not in runs:
            continue
        row = [f"{name} / {base}"]
        for pick, fmt in ((rate, rate_format), (cpu, cpu_format)):
            values = {arm: [pick(r) for r in runs[arm]] for arm in (name, base)}
            ratio, low, high, _ = paired_ratio_ci(values[name], values[base])
            row += [fmt.format(statistics.median(values[name])),
                    fmt.format(statistics.median(values[base])),
                    f"{ratio:.3f} [{low:.2f}, {high:.2f}]"]
        rows.append(row)
    return rows


def _print_table(title, headers, rows) -> None:
    """A titled table, or nothing when it has no rows."""
    if rows:
        print("\n" + title)
        print(text_table(headers, rows))


def add_arguments(parser) -> None:
    parser.add_argument("--workers", type=int, default=3, help="worker tasks (default 3)")
    parser.add_argument("--steps", type=int, default=600, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=30,
                        help="untimed steps per run before the timed ones (they trace)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved runs per configuration (medians over them)")
    parser.add_argument("--out", metavar="FILE.json",
                        help="also keep every run in this file (for --pool)")
    parser.add_argument("--pool", nargs="+", metavar="FILE.json",
                        help="measure nothing: the tables over the runs of these --out "
                             "files together, each run paired with its own file's stock")
    parser.add_argument("--configs", default="stock,asp,bsp,adaptive",
                        help=f"comma-separated, from {', '.join(CONFIGS)}; stock is the "
                        "baseline")
