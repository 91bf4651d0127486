"""Run policies on a real local cluster with injected slowdowns and measure them.

One `LocalCluster` serves every run; each policy gets a fresh `KSyncStrategy` and a
fresh model from the same seed, trains in chunks of pushes, and is evaluated on the
held-out set after each chunk, so accuracy against wall time and time to target
accuracy come from the same run.

Example:

```python
with LocalCluster(num_workers=4) as cluster:
    result = run_policy(cluster, ksync.BSP(), RunConfig(speeds=(1, 1, 0.5, 0.25)))
print(result["tta_s"], result["final_accuracy"])
```
"""

import dataclasses
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What every policy of a comparison shares."""

    speeds: tuple = (1.0, 1.0, 0.5, 0.25)
    us_per_sample: float = 300.0      # injected time per sample at speed 1.0
    batch_size: int = 32
    learning_rate: float = 0.05
    momentum: float = 0.9
    hidden: tuple = (64, 64)
    pushes_per_chunk: int = 60
    max_pushes: int = 1200
    target_accuracy: float = 0.93
    time_budget_s: float = 120.0
    seed: int = 0


def run_policy(cluster, policy, config: RunConfig, data=None, progress=None) -> dict:
    """Train the digits MLP under ``policy``; return measurements as a plain dict."""
    import tf_keras as keras

    from cluster_sim.slowdown import slowed_dataset_fn
    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy

    if len(config.speeds) != cluster.num_workers:
        raise ValueError(f"{len(config.speeds)} speeds for {cluster.num_workers} workers; "
                         "give one speed per worker.")
    data = data or digits(seed=config.seed)
    strategy = KSyncStrategy(cluster.resolver(), policy=policy)
    with strategy.scope():
        model = compile_classifier(
            mlp(data.num_features, data.num_classes, hidden=config.hidden, seed=config.seed),
            keras.optimizers.SGD(config.learning_rate, momentum=config.momentum))
    dataset_fn = slowed_dataset_fn(
        data.dataset_fn(None, shuffle_seed=config.seed),
        config.us_per_sample, config.speeds, config.batch_size)
    creator = keras.utils.experimental.DatasetCreator(dataset_fn)
    curve = []  # (wall s, pushes, version, loss, accuracy)
    tta = None
    train_wall = 0.0  # evaluation between chunks is not training time
    pushes = 0
    epoch = 0
    while pushes < config.max_pushes and train_wall < config.time_budget_s:
        started = time.monotonic()
        model.fit(creator, initial_epoch=epoch, epochs=epoch + 1,
                  steps_per_epoch=config.pushes_per_chunk, verbose=0)
        train_wall += time.monotonic() - started
        epoch += 1
        pushes += config.pushes_per_chunk
        loss, accuracy = model.evaluate(data.test_dataset(), steps=1, verbose=0)
        counters = strategy.telemetry()
        curve.append((train_wall, pushes, counters["version"], float(loss), float(accuracy)))
        if tta is None and accuracy >= config.target_accuracy:
            tta = train_wall
        if progress:
            progress(pushes, accuracy)
        if tta is not None:
            break
    t = strategy.telemetry()
    wall = curve[-1][0]
    samples = sum(w["samples"] for w in t["workers"])
    return {
        "policy": repr(policy),
        "tta_s": tta,
        "final_accuracy": curve[-1][4],
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else None,
        "staleness_p50": t["staleness_p50"],
        "staleness_p95": t["staleness_p95"],
        "pushed": t["pushed"], "applied": t["applied"], "dropped": t["dropped"],
        "pending": t["pending"], "version": t["version"],
        "rule": t["rule"], "k_history": t["k_history"],
        "worker_pushes": [w["pushes"] for w in t["workers"]],
        "curve": [dict(zip(("wall_s", "pushes", "version", "loss", "accuracy"), c))
                  for c in curve],
    }


def format_table(results: list[dict]) -> str:
    """A plain-text table of the headline numbers, one row per policy."""
    header = ("policy", "TTA s", "final acc", "samples/s", "updates", "dropped",
              "stale p95", "pushes per worker")
    rows = []
    for r in results:
        rows.append((r["policy"], "-" if r["tta_s"] is None else f"{r['tta_s']:.1f}",
                     f"{r['final_accuracy']:.3f}", f"{r['samples_per_s']:.0f}",
                     str(r["version"]), str(r["dropped"]), str(r["staleness_p95"]),
                     "/".join(map(str, r["worker_pushes"]))))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def median_of(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None
