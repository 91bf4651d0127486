"""The parameter-server state that executes a `Rule` inside TensorFlow.

`PSUpdateState` keeps the version, the counters, the current round's weighted gradient
aggregate and per-worker telemetry in variables on one parameter-server task, and applies
each push in a `tf.CriticalSection` there, so concurrent pushes from several workers are
serialised and every push is applied whole or not at all. Its decisions are those of
`ksync.state.UpdateState` (the tests hold the two to each other).

Only the strategy imports this module; the rest of `ksync` never imports TensorFlow.
"""

import tensorflow as tf

from ksync.rule import Rule

#: staleness histogram bins: 0 .. STALENESS_BINS - 2, and one bin for anything larger.
STALENESS_BINS = 17


def _encode(rule: Rule):
    return {"k": rule.k, "wait": rule.wait,
            "max_staleness": -1 if rule.max_staleness is None else rule.max_staleness,
            "downweight": rule.stale_action == "downweight"}


def _ops(results):
    """The ops among optimizer update results (some optimizers return None)."""
    return [r for r in tf.nest.flatten(results) if r is not None]


class PSUpdateState:
    """Update state on ``device`` (a PS task) for ``num_workers`` workers.

    Example (inside a scheduled function, after gradients are computed):

    ```python
    state = PSUpdateState(num_workers=3, rule=Rule(k=3, wait=True, max_staleness=0),
                          device="/job:ps/replica:0/task:0")
    state.push(updates, v_read, samples, iteration_time, worker)
    ```
    """

    def __init__(self, num_workers: int, rule: Rule, device: str):
        self.num_workers = num_workers
        self.device = device
        self._accumulators = {}
        enc = _encode(rule)
        with tf.init_scope(), tf.device(device):
            def var(value, dtype, name):
                return tf.Variable(value, dtype=dtype, trainable=False, name=f"ksync/{name}")

            self.version = var(0, tf.int64, "version")
            self.pushed = var(0, tf.int64, "pushed")
            self.applied = var(0, tf.int64, "applied")
            self.dropped = var(0, tf.int64, "dropped")
            self.nonfinite = var(0, tf.int64, "nonfinite")
            self.pending = var(0, tf.int64, "pending")
            self.pending_samples = var(0.0, tf.float32, "pending_samples")
            self.k = var(enc["k"], tf.int64, "k")
            self.wait = var(enc["wait"], tf.bool, "wait")
            self.max_staleness = var(enc["max_staleness"], tf.int64, "max_staleness")
            self.downweight = var(enc["downweight"], tf.bool, "downweight")
            w = num_workers
            self.contributed = var(tf.fill([w], tf.constant(-1, tf.int64)), tf.int64, "contributed")
            self.worker_pushes = var(tf.zeros([w], tf.int64), tf.int64, "worker_pushes")
            self.worker_dropped = var(tf.zeros([w], tf.int64), tf.int64, "worker_dropped")
            self.worker_samples = var(tf.zeros([w], tf.float64), tf.float64, "worker_samples")
            self.worker_time = var(tf.zeros([w], tf.float64), tf.float64, "worker_time")
            self.worker_last_time = var(tf.zeros([w], tf.float64), tf.float64, "worker_last_time")
            self.worker_last_samples = var(tf.zeros([w], tf.float32), tf.float32,
                                           "worker_last_samples")
            self.staleness_hist = var(tf.zeros([w, STALENESS_BINS], tf.int64), tf.int64,
                                      "staleness_hist")
            self.critical_section = tf.CriticalSection(name="ksync_push")

    # -- chief side -------------------------------------------------------------------
    def counters(self) -> dict:
        """Every counter and per-worker series as numpy values (one call to the PS)."""
        return {k: v.numpy() for k, v in self._read_all().items()}

    @tf.function
    def _read_all(self):
        names = ["version", "pushed", "applied", "dropped", "nonfinite", "pending", "k",
                 "wait", "max_staleness", "downweight", "contributed", "worker_pushes",
                 "worker_dropped", "worker_samples", "worker_time", "worker_last_time",
                 "worker_last_samples", "staleness_hist"]
        return {n: tf.identity(getattr(self, n)) for n in names}

    @tf.function
    def gate_state(self):
        """(version, contributed per worker, wait) for the coordinator's barrier."""
        return (tf.identity(self.version), tf.identity(self.contributed),
                tf.identity(self.wait))

    def set_rule(self, rule: Rule) -> None:
        enc = _encode(rule)
        self._set_rule(tf.constant(enc["k"], tf.int64), tf.constant(enc["wait"]),
                       tf.constant(enc["max_staleness"], tf.int64),
                       tf.constant(enc["downweight"]))

    @tf.function
    def _set_rule(self, k, wait, max_staleness, downweight):
        def body():
            with tf.control_dependencies([
                    self.k.assign(k), self.wait.assign(wait),
                    self.max_staleness.assign(max_staleness),
                    self.downweight.assign(downweight)]):
                return tf.identity(self.version)
        self.critical_section.execute(body, exclusive_resource_access=False)

    # -- worker side (traced into scheduled functions) ----------------------------------
    def accumulator(self, var):
        """The round aggregate of ``var``'s gradient, created beside ``var`` on first use."""
        key = var.ref() if hasattr(var, "ref") else id(var)
        if key not in self._accumulators:
            with tf.init_scope(), tf.device(var.device):
                self._accumulators[key] = tf.Variable(
                    tf.zeros(var.shape, var.dtype), trainable=False,
                    name=f"ksync/acc/{var.name.split(':')[0]}")
        return self._accumulators[key]

    def push(self, updates, version_read, samples, iteration_time, worker, direct=False):
        """Apply the rule to one pushed gradient; returns the version after the push.

        Args:
          updates: list of ``(apply_fn, var, grad)``; ``apply_fn(var, grad)`` is the
            optimizer's update of ``var``.
          version_read: the version the gradient was computed from (int64 scalar).
          samples: examples behind the gradient (float32 scalar).
          iteration_time: seconds the worker took to compute it (float64 scalar).
          worker: worker index (int64 scalar).
          direct: the rule can only have K = 1: apply without the aggregate (faster).
        """
        grads = [tf.convert_to_tensor(g) for _, _, g in updates]
        finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(g)) for g in grads]))
        accumulators = [] if direct else [self.accumulator(v) for _, v, _ in updates]
        samples = tf.cast(samples, tf.float32)
        worker = tf.cast(worker, tf.int64)
        one_hot_w = tf.one_hot(worker, self.num_workers, dtype=tf.int64)

        def body():
            # Everything the decision computes stays on the PS: a value that bounced to
            # the worker and back inside the critical section would hold the lock for
            # several network round trips.
            with tf.device(self.device):
                return decide_and_apply()

        def decide_and_apply():
            version = self.version.read_value()
            staleness = version - version_read
            max_s = self.max_staleness.read_value()
            beyond = tf.logical_and(max_s >= 0, staleness > max_s)
            stale_weight = tf.where(self.downweight.read_value(),
                                    1.0 / (1.0 + tf.cast(staleness, tf.float32)), 0.0)
            weight = tf.where(beyond, stale_weight, 1.0)
            weight = tf.where(tf.logical_and(finite, samples > 0), weight, 0.0)
            accepted = weight > 0.0

            def accept():
                if direct:
                    ops = [fn(v, tf.cast(weight, g.dtype) * g) for fn, v, g in updates]
                    with tf.control_dependencies(_ops(ops)):
                        return tf.group(self.applied.assign_add(1),
                                        self.version.assign_add(1),
                                        self.contributed.assign(
                                            tf.where(one_hot_w > 0, version,
                                                     self.contributed)))
                adds = [acc.assign_add(tf.cast(weight * samples, g.dtype) * g)
                        for acc, (_, _, g) in zip(accumulators, updates)]
                with tf.control_dependencies(adds):
                    pending = self.pending.assign_add(1)
                    total = self.pending_samples.assign_add(samples)
                    mark = self.contributed.assign(
                        tf.where(one_hot_w > 0, version, self.contributed))

                def commit():
                    applies = []
                    for acc, (fn, v, _) in zip(accumulators, updates):
                        applies.append(fn(v, acc.read_value() / tf.cast(total, acc.dtype)))
                    with tf.control_dependencies(_ops(applies)):
                        resets = [acc.assign(tf.zeros_like(acc)) for acc in accumulators]
                    with tf.control_dependencies(resets):
                        return tf.group(self.applied.assign_add(pending),
                                        self.pending.assign(0),
                                        self.pending_samples.assign(0.0),
                                        self.version.assign_add(1))

                with tf.control_dependencies([mark]):
                    return tf.cond(pending >= self.k.read_value(), commit, tf.no_op)

            def drop():
                return tf.group(self.dropped.assign_add(1),
                                self.nonfinite.assign_add(tf.cast(tf.logical_not(finite),
                                                                  tf.int64)),
                                self.worker_dropped.assign_add(one_hot_w))

            decided = tf.cond(accepted, accept, drop)
            bin_index = tf.minimum(tf.maximum(staleness, 0), STALENESS_BINS - 1)
            with tf.control_dependencies([decided]):
                hot_f = tf.cast(one_hot_w, tf.float64)
                telemetry = tf.group(
                    self.pushed.assign_add(1),
                    self.worker_pushes.assign_add(one_hot_w),
                    self.worker_samples.assign_add(hot_f * tf.cast(samples, tf.float64)),
                    self.worker_time.assign_add(hot_f * iteration_time),
                    self.worker_last_time.assign(
                        tf.where(one_hot_w > 0, iteration_time, self.worker_last_time)),
                    self.worker_last_samples.assign(
                        tf.where(one_hot_w > 0, samples, self.worker_last_samples)),
                    self.staleness_hist.scatter_nd_add([[worker, bin_index]],
                                                       tf.constant([1], tf.int64)))
            with tf.control_dependencies([telemetry]):
                return self.version.read_value()

        return self.critical_section.execute(body, exclusive_resource_access=False)
