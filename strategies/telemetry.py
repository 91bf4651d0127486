"""Turn the PS counters into the `KSyncStrategy.telemetry()` dictionary."""

from ksync.controller import staleness_quantile
from ksync.noise import noise_scale


def build_telemetry(counters: dict, controller, busy_s=None, steps=None) -> dict:
    """A plain dict: global counters, per-worker series, and the run's rule history
    (from its `ksync.RuleController`: the rule, why, and with batch allocation the
    schedule's sizes and history).

    Per worker, ``step_time`` and ``samples_per_s`` come from the coordinator's wall
    time per step (input pipeline, compute and push: what a slowdown affects);
    ``compute_time`` is measured inside the step, from its start to the gradients.

    Example:

    ```python
    t = strategy.telemetry()
    assert t["applied"] + t["dropped"] + t["pending"] == t["pushed"]
    t["workers"][0]["samples_per_s"], t["k_history"]
    ```
    """
    c = counters
    schedule = controller.schedule
    workers = []
    num_workers = len(c["worker_pushes"])
    busy_s = busy_s or [0.0] * num_workers
    steps = steps or [0] * num_workers
    for w in range(num_workers):
        pushes = int(c["worker_pushes"][w])
        busy = float(c["worker_time"][w])
        hist = c["staleness_hist"][w]
        workers.append({
            "pushes": pushes,
            "step_time": busy_s[w] / steps[w] if steps[w] else None,
            "busy_s": busy_s[w],
            "batch_size": schedule.sizes[w] if schedule is not None else None,
            "dropped": int(c["worker_dropped"][w]),
            "compute_time": busy / pushes if pushes else None,
            "last_iteration_time": float(c["worker_last_time"][w]) if pushes else None,
            "last_batch_size": float(c["worker_last_samples"][w]) if pushes else None,
            "samples": float(c["worker_samples"][w]),
            "samples_per_s": float(c["worker_samples"][w]) / busy_s[w] if busy_s[w] > 0
            else None,
            "compute_samples_per_s": float(c["worker_samples"][w]) / busy if busy > 0 else None,
            "staleness_histogram": hist.tolist(),
            "staleness_p50": staleness_quantile(hist, 0.5),
            "staleness_p95": staleness_quantile(hist, 0.95),
        })
    all_hist = c["staleness_hist"].sum(axis=0)
    return {
        "version": int(c["version"]),
        "pushed": int(c["pushed"]),
        "applied": int(c["applied"]),
        "dropped": int(c["dropped"]),
        "nonfinite": int(c["nonfinite"]),
        "pending": int(c["pending"]),
        "k": int(c["k"]),
        "wait": bool(c["wait"]),
        "max_staleness": None if int(c["max_staleness"]) < 0 else int(c["max_staleness"]),
        "staleness_histogram": all_hist.tolist(),
        "staleness_p50": staleness_quantile(all_hist, 0.5),
        "staleness_p95": staleness_quantile(all_hist, 0.95),
        # B_simple over every committed round (`ksync.noise`); None: not measurable
        # (rounds of one gradient only) or noise dominating the estimate.
        "noise_scale": noise_scale(*c["noise_sums"]),
        "workers": workers,
        "policy": repr(controller.policy),
        "rule": controller.rule.describe(),
        "explanation": controller.explain(),
        "k_history": [{"version": v, "k": r.k, "wait": r.wait, "rule": r.describe(),
                       "reason": why} for v, r, why in controller.history],
        "allocation": None if schedule is None else {
            "mode": schedule.mode, "sizes": list(schedule.sizes or []),
            "history": list(schedule.history)},
    }
