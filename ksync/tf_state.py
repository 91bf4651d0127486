"""The parameter-server state that executes a `Rule` inside TensorFlow.

`PSUpdateState` keeps the version, the counters, the current round's weighted gradient
aggregate and per-worker telemetry in variables on one parameter-server task, and applies
each push in a `tf.CriticalSection` there, so concurrent pushes from several workers are
serialised and every push is applied whole or not at all. Its decisions are those of
`ksync.state.UpdateState` (the tests hold the two to each other).

Counters live packed in a few vector variables: every push runs on the PS's CPU beside
the training step, and each separate variable op costs more than the arithmetic.

Only the strategy imports this module; the rest of `ksync` never imports TensorFlow.
"""

import tensorflow as tf

from ksync.rule import Rule

#: staleness histogram bins: 0 .. STALENESS_BINS - 2, and one bin for anything larger.
STALENESS_BINS = 17

# Slots of the packed global counters.
COUNTERS = ("version", "pushed", "applied", "dropped", "nonfinite", "pending")
_V, _PUSHED, _APPLIED, _DROPPED, _NONFINITE, _PENDING = range(len(COUNTERS))
# Slots of the packed rule: k, wait, max_staleness (-1 = unbounded), downweight,
# staleness scaling.
_K, _WAIT, _MAX_S, _DOWNWEIGHT, _SCALING = range(5)
# Per-worker sums: pushes, dropped, samples, busy seconds; last: time, batch size.
WORKER_SUMS = ("worker_pushes", "worker_dropped", "worker_samples", "worker_time")
WORKER_LAST = ("worker_last_time", "worker_last_samples")


def _encode(rule: Rule):
    return [rule.k, int(rule.wait),
            -1 if rule.max_staleness is None else rule.max_staleness,
            int(rule.stale_action == "downweight"), int(rule.staleness_scaling)]


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
        w = num_workers
        with tf.init_scope(), tf.device(device):
            def var(value, name):
                return tf.Variable(value, trainable=False, name=f"ksync/{name}")

            self.counter_vec = var(tf.zeros([len(COUNTERS)], tf.int64), "counters")
            self.rule_vec = var(tf.constant(_encode(rule), tf.int64), "rule")
            self.pending_samples = var(tf.constant(0.0, tf.float32), "pending_samples")
            self.contributed = var(tf.fill([w], tf.constant(-1, tf.int64)), "contributed")
            self.worker_sums = var(tf.zeros([w, len(WORKER_SUMS)], tf.float64), "worker_sums")
            self.worker_last = var(tf.zeros([w, len(WORKER_LAST)], tf.float64), "worker_last")
            self.staleness_hist = var(tf.zeros([w, STALENESS_BINS], tf.int64), "staleness")
            self.critical_section = tf.CriticalSection(name="ksync_push")

    @property
    def version(self):
        """The current version as a tensor (reads the PS)."""
        return self.counter_vec[_V]

    # -- chief side -------------------------------------------------------------------
    def counters(self) -> dict:
        """Every counter and per-worker series as numpy values (one call to the PS)."""
        counters, rule, contributed, sums, last, hist = (t.numpy() for t in self._read_all())
        out = dict(zip(COUNTERS, (int(x) for x in counters)))
        out.update(k=int(rule[_K]), wait=bool(rule[_WAIT]), max_staleness=int(rule[_MAX_S]),
                   downweight=bool(rule[_DOWNWEIGHT]),
                   staleness_scaling=bool(rule[_SCALING]), contributed=contributed,
                   staleness_hist=hist)
        out.update({name: sums[:, i] for i, name in enumerate(WORKER_SUMS)})
        out.update({name: last[:, i] for i, name in enumerate(WORKER_LAST)})
        for name in ("worker_pushes", "worker_dropped"):
            out[name] = out[name].astype("int64")
        return out

    @tf.function
    def _read_all(self):
        return tuple(tf.identity(v) for v in (
            self.counter_vec, self.rule_vec, self.contributed, self.worker_sums,
            self.worker_last, self.staleness_hist))

    @tf.function
    def gate_state(self):
        """(version, contributed per worker, round complete) for the coordinator's
        barrier; the round is complete when it holds K gradients but has not committed,
        which happens only after K was lowered (a worker died)."""
        counters = self.counter_vec.read_value()
        return (counters[_V], tf.identity(self.contributed),
                counters[_PENDING] >= self.rule_vec[_K])

    def set_rule(self, rule: Rule) -> None:
        # One assign of the packed rule, outside the critical section: a push reads the
        # rule once, so it sees the old or the new one whole, and a change of rule never
        # queues behind pushes (it is what unblocks them when a worker stalls).
        self.rule_vec.assign(tf.constant(_encode(rule), tf.int64))

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
        # Everything the critical section reads is copied to the PS first: its lock is
        # taken only once the inputs are there, so a worker frozen or killed mid-push
        # can never hold the lock (and every other worker) while its tensors are on
        # the way.
        with tf.device(self.device):
            grads = [tf.identity(g) for g in grads]
            finite, version_read = tf.identity(finite), tf.identity(version_read)
            samples = tf.cast(samples, tf.float32)
            worker = tf.reshape(tf.cast(worker, tf.int64), [1, 1])
            iteration_time = tf.cast(iteration_time, tf.float64)
        updates = [(fn, v, g) for (fn, v, _), g in zip(updates, grads)]

        def body():
            # Everything the decision computes stays on the PS: a value that bounced to
            # the worker and back inside the critical section would hold the lock for
            # several network round trips.
            with tf.device(self.device):
                return decide_and_apply()

        def decide_and_apply():
            counters = self.counter_vec.read_value()
            rule = self.rule_vec.read_value()
            version, pending = counters[_V], counters[_PENDING]
            staleness = version - version_read
            beyond = tf.logical_and(rule[_MAX_S] >= 0, staleness > rule[_MAX_S])
            scaled = 1.0 / (1.0 + tf.cast(staleness, tf.float32))
            stale_weight = tf.where(rule[_DOWNWEIGHT] > 0, scaled, 0.0)
            weight = tf.where(beyond, stale_weight,
                              tf.where(rule[_SCALING] > 0, scaled, 1.0))
            weight = tf.where(tf.logical_and(finite, samples > 0), weight, 0.0)
            accepted = weight > 0.0
            accepted_i = tf.cast(accepted, tf.int64)
            in_round = pending + accepted_i
            commit = tf.logical_and(accepted, in_round >= rule[_K])
            commit_i = tf.cast(commit, tf.int64)

            if direct:
                def apply():
                    return tf.group(_ops([fn(v, tf.cast(weight, g.dtype) * g)
                                          for fn, v, g in updates]))
            else:
                # tf.where, not a multiply: a rejected gradient may hold NaN.
                adds = [acc.assign_add(tf.where(accepted, tf.cast(weight * samples, g.dtype) * g,
                                                tf.zeros_like(g)))
                        for acc, (_, _, g) in zip(accumulators, updates)]
                total = self.pending_samples.read_value() + \
                    tf.cast(accepted, tf.float32) * samples

                def apply():
                    with tf.control_dependencies(adds):
                        applies = [fn(v, acc.read_value() / tf.cast(total, acc.dtype))
                                   for acc, (fn, v, _) in zip(accumulators, updates)]
                    with tf.control_dependencies(_ops(applies)):
                        return tf.group([acc.assign(tf.zeros_like(acc)) for acc in accumulators])

            with tf.control_dependencies([] if direct else adds):
                applied = tf.cond(commit, apply, tf.no_op)
            applied_now = commit_i * in_round
            delta = tf.stack([commit_i, tf.constant(1, tf.int64), applied_now,
                              1 - accepted_i, 1 - tf.cast(finite, tf.int64),
                              accepted_i - applied_now])
            bin_index = tf.minimum(tf.maximum(staleness, 0), STALENESS_BINS - 1)
            dropped_f = tf.cast(1 - accepted_i, tf.float64)
            with tf.control_dependencies([applied]):
                bookkeeping = [
                    self.counter_vec.assign_add(delta),
                    self.contributed.scatter_nd_max(
                        worker, tf.reshape(tf.where(accepted, version, -1), [1])),
                    self.worker_sums.scatter_nd_add(worker, tf.reshape(tf.stack(
                        [1.0, dropped_f, tf.cast(samples, tf.float64), iteration_time]),
                        [1, len(WORKER_SUMS)])),
                    self.worker_last.scatter_nd_update(worker, tf.reshape(tf.stack(
                        [iteration_time, tf.cast(samples, tf.float64)]),
                        [1, len(WORKER_LAST)])),
                    self.staleness_hist.scatter_nd_add(
                        tf.concat([worker, tf.reshape(bin_index, [1, 1])], axis=1),
                        tf.constant([1], tf.int64)),
                ]
                if not direct:
                    bookkeeping.append(self.pending_samples.assign(
                        tf.where(commit, 0.0, total)))
            with tf.control_dependencies(bookkeeping):
                return self.counter_vec[_V]

        # On the PS too: the section's result copies and the lock's release, so
        # releasing it never waits on a round trip to the worker.
        with tf.device(self.device):
            return self.critical_section.execute(body, exclusive_resource_access=False)
