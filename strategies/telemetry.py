"""Turn the PS counters into the `KSyncStrategy.telemetry()` dictionary."""

import numpy as np


def staleness_quantile(hist, q):
    """Quantile of a staleness histogram (last bin means "that many or more")."""
    total = hist.sum()
    if total == 0:
        return None
    return int(np.searchsorted(np.cumsum(hist), q * total))


def build_telemetry(counters: dict, policy, rule) -> dict:
    """A plain dict: global counters, per-worker series, and the policy's rule history.

    Example:

    ```python
    t = strategy.telemetry()
    assert t["applied"] + t["dropped"] + t["pending"] == t["pushed"]
    t["workers"][0]["samples_per_s"], t["k_history"]
    ```
    """
    c = counters
    workers = []
    for w in range(len(c["worker_pushes"])):
        pushes = int(c["worker_pushes"][w])
        busy = float(c["worker_time"][w])
        hist = c["staleness_hist"][w]
        workers.append({
            "pushes": pushes,
            "dropped": int(c["worker_dropped"][w]),
            "iteration_time": busy / pushes if pushes else None,
            "last_iteration_time": float(c["worker_last_time"][w]) if pushes else None,
            "last_batch_size": float(c["worker_last_samples"][w]) if pushes else None,
            "samples": float(c["worker_samples"][w]),
            "samples_per_s": float(c["worker_samples"][w]) / busy if busy > 0 else None,
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
        "workers": workers,
        "policy": repr(policy),
        "rule": rule.describe(),
        "explanation": policy.explain(),
        "k_history": [{"version": v, "k": r.k, "wait": r.wait, "rule": r.describe(),
                       "reason": why} for v, r, why in policy.history],
    }
