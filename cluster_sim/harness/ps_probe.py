"""Real pushes through the product's PS state on a local cluster, timed: what
`cluster_sim.sim.ps.fit_ps_costs` turns into the simulator's PS and network costs.

Each measurement makes ``pushes`` steps of a training step's traffic: the worker pulls
a variable of ``size`` float32 numbers from PS task 0 and pushes a gradient of its size through
`strategies.ps_state.PSUpdateState.push` (the real accumulate-under-a-lock, and on a commit
the real optimizer update, aggregate read and reset), from
``workers`` workers at once, each pushing back to back inside one scheduled function (a
``tf.while_loop``: the chief's dispatch of a closure is not part of a push). The
gradient is made on the worker and changes every push, so each push moves its bytes.
It records the wall time and the CPU seconds the PS process and the worker processes
used: the PS's CPU per push is its service time (the pull's and the push's: the PS
serves one push at a time under the lock), a lone worker's wall time per push minus it
is the network (a pull and a push) and the round trips.

Two rules: ``accumulate`` (K never reached: every push adds to the aggregate, none
applies) and ``apply`` (K = 1 under the lock: every push also makes an update).

Example (on a `cluster_sim.local_cluster.LocalCluster`, as `calibrate --ps-probe` runs it):

```python
m = measure_pushes(cluster, size=262_144, pushes=60, workers=1, mode="accumulate")
m["ps_cpu_s"] / m["pushes"]      # the PS's service time of one 1 MB push
```
"""

import time

MODES = ("accumulate", "apply")
NEVER = 2 ** 40  # a K no round reaches: pushes accumulate and never commit


def measure_pushes(cluster, size: int, pushes: int, workers: int = 1,
                   mode: str = "accumulate") -> dict:
    """Push ``pushes`` gradients of ``size`` float32 numbers (split over ``workers``
    workers of ``cluster``, pushing at once) with ``mode`` (`MODES`); returns
    ``{"size", "bytes", "pushes", "workers", "mode", "wall_s", "ps_cpu_s",
    "worker_cpu_s"}``, the times over the timed pushes only (a first push per worker
    traces and warms the function)."""
    import tensorflow as tf

    from ksync.rule import Rule
    from strategies.ps_state import PSUpdateState

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if size < 1 or pushes < workers or not 1 <= workers <= cluster.num_workers:
        raise ValueError(f"need size >= 1, 1 <= workers <= {cluster.num_workers} and at "
                         f"least one push per worker; got size={size}, pushes={pushes}, "
                         f"workers={workers}")
    strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.resolver())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        var = tf.Variable(tf.zeros([size]), name="probe")
    rule = Rule(k=1 if mode == "apply" else NEVER, wait=False)
    state = PSUpdateState(cluster.num_workers, rule, var.device)

    def apply_fn(v, g):
        return v.assign_sub(1e-3 * g)

    @tf.function
    def loop(count):
        worker = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(),
                         tf.int64)

        def body(i):
            # A training step's traffic: the worker pulls the parameters (summed on the
            # worker, so every byte crosses) and pushes a gradient that is new every
            # push (a loop-invariant one might cross once).
            pulled = tf.reduce_sum(var)
            g = tf.fill([size], tf.cast(i, tf.float32) * 1e-6 + 1e-12 * pulled)
            version = state.read_version()
            done = state.push([(apply_fn, var, g)], version, tf.constant(32.0),
                              tf.constant(0.01, tf.float64), worker)
            with tf.control_dependencies([done]):
                return (i + 1,)

        return tf.while_loop(lambda i: i < count, body, (tf.constant(0),))[0]

    def run(per_worker):
        for _ in range(workers):
            coordinator.schedule(loop, args=(tf.constant(per_worker),))
        coordinator.join()

    run(1)  # trace, connect, create the aggregate
    per_worker = pushes // workers
    ps0, w0 = cluster.cpu_seconds("ps"), cluster.cpu_seconds("worker")
    start = time.perf_counter()
    run(per_worker)
    wall = time.perf_counter() - start
    return {"size": int(size), "bytes": 4 * int(size), "pushes": per_worker * workers,
            "workers": workers, "mode": mode, "wall_s": wall,
            "ps_cpu_s": cluster.cpu_seconds("ps") - ps0,
            "worker_cpu_s": cluster.cpu_seconds("worker") - w0}
