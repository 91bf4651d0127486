"""The parameter-server state that executes a `Rule` inside TensorFlow.

`PSUpdateState` keeps the version, the counters and per-worker telemetry in variables on
one parameter-server task (the *rule task*), and decides each push in a
`tf.CriticalSection` there, so concurrent pushes from several workers are serialised and
every push is applied whole or not at all. Its decisions are those of
`ksync.state.UpdateState` (the tests hold the two to each other).

Variables may be sharded over several PS tasks, as the stock strategy places them. The
round's weighted gradient aggregate of each variable lives beside that variable, each
gradient is copied to its variable's task before the lock is taken, and the work on a
shard's variables runs on that shard's task, under a critical section of its own, in
parallel with the other shards' work. The version moves only after every shard has
applied the update, so one version is one model across all shards.

Counters live packed in a few vector variables: every push runs on the PS's CPU beside
the training step, and each separate variable op costs more than the arithmetic.

The TensorFlow side of `ksync.state.UpdateState`: it lives with the strategy, which alone
imports it, so the `ksync` package itself never imports TensorFlow.
"""

import collections

import numpy as np
import tensorflow as tf

from ksync.rule import Rule
from strategies import compat
from strategies.ps_lr_scaling import SLOTS as LR_SLOTS, PSLRScaling, committing

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


#: longest a worker waits in-graph for the round it joined before its step fails.
MAX_WAIT_S = 1800.0
# Sleeps of the in-graph wait: they grow from the first to the last, so a short wait
# releases within a fraction of a millisecond and a long one costs the PS little CPU.
_FIRST_SLEEP_US, _LAST_SLEEP_US = 200, 5000


def _created_by(fn):
    """Call ``fn()``; returns every op it created in the current graph and what it
    returned. An optimizer's update need not return its ops (tf_keras's `update_step`
    returns None, its weight decay too), and an op nobody waits for could run after
    the lock is released or the version has moved."""
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    returned = [r for r in tf.nest.flatten(fn()) if r is not None]
    return returned + graph.get_operations()[first:]


class Extras(collections.namedtuple("Extras", "before after")):
    """A step's updates that are not gradients, each a list of ``(fn, var)`` where
    ``fn(var)`` makes the update: ``before``, those the optimizer made before its
    gradients (tf_keras's decoupled weight decay), and ``after``, those it made after
    (tf_keras's EMA of the weights). The PS runs them once per model update, in that
    order around the update's gradients: ``before`` on each shard before its gradients,
    ``after`` once every shard has applied them."""


NO_EXTRAS = Extras((), ())


def sleep_us(microseconds):
    """An op that sleeps ``microseconds`` without burning CPU, then returns 0.

    ``take(1)`` matters: the sleep transformation sleeps on every request for an element,
    and ``get_single_element`` asks twice (the second time to check there is no other),
    which would double the delay.
    """
    return tf.data.Dataset.from_tensors(tf.constant(0)).apply(
        compat.sleep_dataset(microseconds)).take(1).get_single_element()


def _scale(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(tf.cast(factor, grad.values.dtype) * grad.values,
                                grad.indices, grad.dense_shape)
    return tf.cast(factor, grad.dtype) * grad


def _sq_norm(grad):
    """Squared L2 norm of a gradient (float64 scalar), in one pass (`l2_loss`), at
    least in float32."""
    values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
    if values.dtype.size < 4:
        values = tf.cast(values, tf.float32)
    return 2.0 * tf.cast(tf.nn.l2_loss(values), tf.float64)


def _all_finite(grad):
    values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
    return tf.reduce_all(tf.math.is_finite(values))


def _counter_delta(commit, accepted, applied, finite):
    """One push's change to the packed counters (`COUNTERS`), int64 flags and counts:
    ``commit`` made an update, ``applied`` gradients left the round, ``accepted``
    joined it."""
    return tf.stack([commit, tf.constant(1, tf.int64), applied, 1 - accepted,
                     1 - tf.cast(finite, tf.int64), accepted - applied])


def _carry(grad, meta, device):
    """``grad`` and the float64 vector ``meta`` sent to ``device`` as one tensor: the
    meta's bits appended to the flat gradient, split apart there, both exact."""
    flat = tf.reshape(grad, [-1])
    packed = tf.concat([flat, tf.reshape(tf.bitcast(meta, grad.dtype), [-1])], 0)
    n, per = grad.shape.num_elements(), 8 // grad.dtype.size
    with tf.device(device):
        packed = tf.identity(packed)
        bits = packed[n:]
        meta = tf.bitcast(bits if per == 1 else tf.reshape(bits, [-1, per]), tf.float64)
        return tf.reshape(packed[:n], grad.shape), meta


def _task(device):
    """(job, task) of a device string: the variables of one task share a lock. A
    device with no job is this process's own ("localhost")."""
    spec = tf.DeviceSpec.from_string(device or "")
    return spec.job or "localhost", spec.task or 0


def _copy_to(grad, device):
    """``grad`` sent to ``device`` (a sparse gradient stays sparse on the wire)."""
    with tf.device(device):
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices),
                                    grad.dense_shape)
        return tf.identity(grad)


class _Pushed(collections.namedtuple(
        "_Pushed", "version_read finite samples iteration_time worker sq_norm")):
    """One push's scalars on the rule task (`PSUpdateState._send`): the version its
    gradient was computed from, whether every gradient is finite, its samples (float32),
    the worker's iteration time, the worker as a [1, 1] index, the squared norm."""


class _Decision(collections.namedtuple(
        "_Decision", "version staleness weight accepted accepted_i in_round commit total "
                     "lr_values scaling")):
    """One push's decision in the rule task's critical section (`PSUpdateState._decide`):
    the version it arrived at and its staleness, its weight (0: dropped), whether it is
    accepted (and as an int64 0 or 1), the round's gradients with it, whether it commits the round, the round's
    samples with it, and (with learning-rate scaling, else None) the scaling state read
    and its `strategies.ps_lr_scaling` decision."""

    @property
    def gain(self):
        """The learning-rate gain of this push's commit (None: the run does not scale)."""
        return None if self.scaling is None else self.scaling.gain


class PSUpdateState:
    """Update state on ``device`` (a PS task) for ``num_workers`` workers.

    Example (inside a scheduled function, after gradients are computed):

    ```python
    state = PSUpdateState(num_workers=3, rule=Rule(k=3, wait=True, max_staleness=0),
                          device="/job:ps/replica:0/task:0")
    state.push(updates, v_read, samples, iteration_time, worker)
    ```
    """

    def __init__(self, num_workers: int, rule: Rule, device: str, lr_scaling=None,
                 base_batch=None):
        """``lr_scaling``: "adascale", "linear", "sqrt" or None (`ksync.lr_scaling`):
        each commit's gain, computed here (`strategies.ps_lr_scaling`) and given to the
        commit's updates (`strategies.ps_lr_scaling.commit_gain`); ``base_batch``: the samples
        the learning rate is meant for (None: the first accepted push's)."""
        self.num_workers = num_workers
        self.device = device
        self._accumulators = {}
        self._shard_sections = {}
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
            # The gradient noise scale's statistics (`ksync.noise`): the open round's
            # gradients (count, sum of squared norms, sum of 1 / samples), and the
            # committed rounds' summed (|G|^2, tr(S)) estimates.
            self.noise_round = var(tf.zeros([3], tf.float64), "noise_round")
            self.noise_sums = var(tf.zeros([2], tf.float64), "noise_sums")
            self.critical_section = tf.CriticalSection(name="ksync_push")
        #: the learning-rate scaling's state (None: the run does not scale).
        self.lr_scaling = (None if lr_scaling is None else
                           PSLRScaling(lr_scaling, base_batch, device, rule.lr_factor))
        # A direct push under such a rule decides from the push alone (accept what is
        # finite), so nothing needs serialising (`push`); a scaled one needs the base
        # batch and the staleness of its gain.
        self._lock_free = (rule.max_staleness is None and not rule.staleness_scaling
                           and self.lr_scaling is None)

    def read_version(self):
        """The current version as a tensor, read and kept on the rule task."""
        with tf.device(self.device):
            return self.counter_vec[_V]

    # -- chief side -------------------------------------------------------------------
    def counters(self) -> dict:
        """Every counter and per-worker series as numpy values (one call to the PS, one
        tensor fetched)."""
        w = self.num_workers
        sizes = np.cumsum([len(COUNTERS), 5, w, w * STALENESS_BINS])
        with tf.device(self.device):
            packed = self._read_all().numpy()
        ints, floats = packed[:sizes[-1]].astype(np.int64), packed[sizes[-1]:]
        counters, rule, contributed, hist = np.split(ints, sizes[:-1])
        hist = hist.reshape(w, STALENESS_BINS)
        lr = None
        if self.lr_scaling is not None:
            # the scaling's state vector, then the rule's gain factor
            floats, lr = floats[:-len(LR_SLOTS) - 1], floats[-len(LR_SLOTS) - 1:]
        floats, noise = floats[:-2], floats[-2:]
        sums, last = np.split(floats.reshape(w, -1), [len(WORKER_SUMS)], axis=1)
        out = dict(zip(COUNTERS, (int(x) for x in counters)))
        out.update(k=int(rule[_K]), wait=bool(rule[_WAIT]), max_staleness=int(rule[_MAX_S]),
                   downweight=bool(rule[_DOWNWEIGHT]),
                   staleness_scaling=bool(rule[_SCALING]), contributed=contributed,
                   staleness_hist=hist, noise_sums=noise,
                   lr_scaling=None if lr is None else dict(zip(LR_SLOTS + ("factor",),
                                                               map(float, lr))))
        out.update({name: sums[:, i] for i, name in enumerate(WORKER_SUMS)})
        out.update({name: last[:, i] for i, name in enumerate(WORKER_LAST)})
        for name in ("worker_pushes", "worker_dropped"):
            out[name] = out[name].astype("int64")
        return out

    @tf.function
    def _read_all(self):
        # Called on the rule task and packed: a function run on one device, and one
        # fetch per returned tensor, cost the chief and the PS far less than a function
        # spanning devices with a fetch per variable (measured by `bench overhead`).
        ints = tf.concat([self.counter_vec.read_value(), self.rule_vec.read_value(),
                          self.contributed.read_value(),
                          tf.reshape(self.staleness_hist.read_value(), [-1])], axis=0)
        floats = tf.concat([tf.reshape(tf.concat([self.worker_sums.read_value(),
                                                  self.worker_last.read_value()], axis=1),
                                       [-1]), self.noise_sums.read_value()]
                           + ([] if self.lr_scaling is None
                              else [self.lr_scaling.variable.read_value(),
                                    tf.reshape(self.lr_scaling.factor.read_value(), [1])]),
                           axis=0)
        # One tensor: each fetch is one more message. The counts are exact in float64
        # below 2^53.
        return tf.concat([tf.cast(ints, tf.float64), floats], axis=0)

    def gate_state(self) -> dict:
        """What the coordinator's barrier needs: ``version``, ``contributed`` (the
        version each worker last contributed to), ``pending`` (gradients in the open
        round), ``k``, ``complete`` (the round holds K gradients but has not committed,
        which happens only after K was lowered: a worker died) and ``nonfinite``
        (non-finite gradients dropped so far). One call to the PS (run there) and one
        tensor fetched."""
        with tf.device(self.device):
            packed = self._gate_packed().numpy()
        version, pending, k, nonfinite = (int(x) for x in packed[:4])
        return dict(version=version, pending=pending, k=k, complete=pending >= k,
                    nonfinite=nonfinite, contributed=packed[4:])

    @tf.function
    def _gate_packed(self):
        counters = self.counter_vec.read_value()
        return tf.concat([tf.stack([counters[_V], counters[_PENDING], self.rule_vec[_K],
                                    counters[_NONFINITE]]),
                          self.contributed.read_value()], axis=0)

    def set_rule(self, rule: Rule) -> None:
        # One assign of the packed rule, outside the critical section: a push reads the
        # rule once, so it sees the old or the new one whole, and a change of rule never
        # queues behind pushes (it is what unblocks them when a worker stalls).
        self.rule_vec.assign(tf.constant(_encode(rule), tf.int64))
        if self.lr_scaling is not None:  # the gain factor, which only a scaled run applies
            self.lr_scaling.set_factor(rule.lr_factor)

    # -- worker side (traced into scheduled functions) ----------------------------------
    def accumulator(self, var):
        """The round aggregate of ``var``'s gradient, created beside ``var`` on first use."""
        key = var.ref() if hasattr(var, "ref") else id(var)
        if key not in self._accumulators:
            # Past the strategy's creator: one plain variable on the variable's task,
            # never partitioned again (the variable already is one shard).
            def plain(next_creator, **kwargs):
                del next_creator
                return compat.ResourceVariable(**kwargs)

            with tf.init_scope(), tf.device(var.device), tf.variable_creator_scope(plain):
                self._accumulators[key] = tf.Variable(
                    tf.zeros(var.shape, var.dtype), trainable=False,
                    name=f"ksync/acc/{var.name.split(':')[0]}")
        return self._accumulators[key]

    def _shard_section(self, device):
        """The critical section guarding the aggregates of the variables on ``device``."""
        if device not in self._shard_sections:
            with tf.init_scope(), tf.device(device):
                self._shard_sections[device] = tf.CriticalSection(name="ksync_shard")
        return self._shard_sections[device]

    def _on_shards(self, variables, work, locked=True, values=False):
        """Run ``work(indices)`` on each PS task holding some of ``variables``, with the
        indices of those, in parallel; returns the ops (``values``: ``work`` returns scalars, and each
        task's sum of them is returned instead). ``locked``: the rule task's own shard
        runs under the rule's lock, which its caller holds; every other shard under its
        own lock, so nothing crosses tasks inside a lock but the decision's few
        scalars."""
        by_task, devices = collections.defaultdict(list), {}
        for i, var in enumerate(variables):
            task = _task(var.device)
            by_task[task].append(i)
            devices.setdefault(task, var.device)
        done = []
        for task, indices in by_task.items():
            device = devices[task]
            def shard(indices=indices, device=device):
                with tf.device(device):
                    return tf.add_n(work(indices)) if values else tf.group(work(indices))
            # The variable's resolved device, not self.device: "/device:CPU:0" in a
            # process connected to a cluster is "/job:chief/...", and a second lock
            # taken on the task of the first, inside it, would deadlock.
            if not locked or task == _task(self.counter_vec.device):
                done.append(shard())
            else:
                with tf.device(device):
                    done.append(self._shard_section(device).execute(
                        shard, exclusive_resource_access=False))
        return done

    def _apply_round(self, updates, accumulators, total, extras, gain=None):
        """Ops making the round's update: every variable's aggregate divided by
        ``total`` samples, between the step's ``extras`` (`_around_extras`), traced
        with the commit's learning-rate ``gain`` (`strategies.ps_lr_scaling.commit_gain`)."""
        def work(indices):
            applied = _created_by(lambda: [
                updates[i][0](updates[i][1], accumulators[i].read_value() /
                              tf.cast(total, accumulators[i].dtype)) for i in indices])
            with tf.control_dependencies(applied):
                return [accumulators[i].assign(tf.zeros_like(accumulators[i]))
                        for i in indices]
        with committing(gain):
            return self._around_extras(updates, work, extras)

    def _around_extras(self, updates, apply, extras, locked=True, condition=None):
        """``apply(indices)`` on the shards of ``updates`` (`_on_shards`), after the
        ``extras.before`` of every shard and before its ``extras.after``: decoupled
        weight decay takes the weights the gradients were computed on, the EMA the
        weights of the new version. ``condition``: the extras run only if it holds
        (``apply`` checks it itself). No extras: ``apply``'s ops alone."""
        def run(pairs):
            def work(indices):
                ops = lambda: tf.group(_created_by(lambda: [
                    pairs[i][0](pairs[i][1]) for i in indices]))
                return ops() if condition is None else tf.cond(condition, ops, tf.no_op)
            return self._on_shards([v for _, v in pairs], work, locked) if pairs else []

        with tf.control_dependencies(run(extras.before)):
            applied = self._on_shards([v for _, v, _ in updates], apply, locked)
        with tf.control_dependencies(applied):
            return applied + run(extras.after)

    def push(self, updates, version_read, samples, iteration_time, worker, direct=False,
             extras=NO_EXTRAS):
        """Apply the rule to one pushed gradient; returns the version after the push.

        Args:
          updates: list of ``(apply_fn, var, grad)``; ``apply_fn(var, grad)`` is the
            optimizer's update of ``var``; ``grad`` may be a ``tf.IndexedSlices``.
          version_read: the version the gradient was computed from (int64 scalar).
          samples: examples behind the gradient (float32 scalar).
          iteration_time: seconds the worker took to compute it (float64 scalar).
          worker: worker index (int64 scalar).
          direct: the rule can only have K = 1: apply without the aggregate and outside
            the lock (faster; the stock strategy's concurrent updates). If the rule this
            state was made with also has no staleness bound or scaling (ASP), the push
            takes no lock at all.
          extras: the step's `Extras`, run with every update this push makes.

        The steps: `_send` (the gradients and the push's scalars to the PS tasks, before
        any lock), then in the rule task's critical section `_decide` (accept, weight,
        commit), `_accumulate` (each shard's aggregate, and the round's update on a
        commit) and `_record` (counters, telemetry, noise and learning-rate statistics);
        a direct push applies its gradient after the lock (`_apply_unlocked`).
        """
        accumulators = [] if direct else [self.accumulator(v) for _, v, _ in updates]
        updates, pushed = self._send(updates, version_read, samples, iteration_time, worker,
                                     direct)
        if direct and self._lock_free:
            return self._push_unlocked(updates, pushed, extras)

        def body():
            decision = self._decide(pushed)
            added, shard_ops = ([], []) if direct else self._accumulate(
                updates, accumulators, decision, pushed.samples, extras)
            with tf.device(self.device), tf.control_dependencies(shard_ops):
                with tf.control_dependencies(self._record(decision, pushed, added, direct)):
                    if direct:  # applied after the lock is released, below
                        return (self.counter_vec[_V], decision.commit, decision.weight) + (
                            () if decision.gain is None else (decision.gain,))
                    return self.counter_vec[_V]

        # On the rule task too: the section's result copies and the lock's release, so
        # releasing it never waits on a round trip to the worker.
        with tf.device(self.device):
            decided = self.critical_section.execute(body, exclusive_resource_access=False)
        if not direct:
            return decided
        # K = 1 for good (ASP, SSP with K = 1): only the decision is serialised; the
        # update itself runs on the variables' tasks outside any lock, concurrently with
        # other workers' updates, as the stock strategy applies them. The version may
        # so count an update a moment before every shard shows it: staleness is charged
        # from the version, never under-counted.
        version, commit, weight = decided[:3]
        with tf.control_dependencies(self._apply_unlocked(
                updates, commit, weight, extras, *decided[3:])), tf.device(self.device):
            return tf.identity(version)

    def _send(self, updates, version_read, samples, iteration_time, worker, direct):
        """Step 1 of `push`, on the worker: each gradient copied to its variable's task
        and the push's scalars to the rule task, before any lock is taken, so a worker
        frozen or killed mid-push can never hold it (and every other worker) while its
        tensors are on the way. Returns the updates with the copies and the `_Pushed`
        scalars as the rule task holds them."""
        grads = [g if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
                 for _, _, g in updates]
        finite = tf.reduce_all(tf.stack([_all_finite(g) for g in grads]))
        # The gradient's squared norm (for the noise scale) is summed on the worker,
        # where the gradient is, and crosses as one more scalar. A direct push keeps no
        # noise statistics (no round has several gradients), so it skips the pass.
        sq_norm = tf.constant(0.0, tf.float64) if direct else \
            tf.add_n([_sq_norm(g) for g in grads])
        # The push's scalars travel as one tensor, and with a gradient bound for the
        # rule task where there is one: each tensor crossing to the PS is one more
        # message per step.
        meta = tf.stack([tf.cast(finite, tf.float64), tf.cast(samples, tf.float64),
                         tf.cast(iteration_time, tf.float64), tf.cast(worker, tf.float64),
                         sq_norm])
        carrier = self._meta_carrier(updates, grads)
        grads = [g if i == carrier else _copy_to(g, v.device)
                 for i, ((_, v, _), g) in enumerate(zip(updates, grads))]
        if carrier is not None:
            grads[carrier], meta = _carry(grads[carrier], meta, self.device)
        with tf.device(self.device):
            version_read = tf.identity(version_read)
            if carrier is None:
                meta = tf.identity(meta)
            pushed = _Pushed(version_read, meta[0] > 0, tf.cast(meta[1], tf.float32),
                             meta[2], tf.reshape(tf.cast(meta[3], tf.int64), [1, 1]),
                             meta[4])
        return [(fn, v, g) for (fn, v, _), g in zip(updates, grads)], pushed

    def _decide(self, pushed) -> "_Decision":
        """Step 2 of `push`, inside the rule task's critical section: the push's weight
        under the rule (its staleness against the bound, scaling, down-weighting; 0 for
        a non-finite or empty gradient), whether it joins the round and commits it, the
        round's samples, and the commit's learning-rate gain. `ksync.state.UpdateState`
        decides the same (the tests hold the two to each other)."""
        # The decision stays on the rule task: a value that bounced to the worker and
        # back inside the critical section would hold the lock for several network
        # round trips.
        with tf.device(self.device):
            counters = self.counter_vec.read_value()
            rule = self.rule_vec.read_value()
            version, pending = counters[_V], counters[_PENDING]
            staleness = version - pushed.version_read
            beyond = tf.logical_and(rule[_MAX_S] >= 0, staleness > rule[_MAX_S])
            scaled = 1.0 / (1.0 + tf.cast(staleness, tf.float32))
            stale_weight = tf.where(rule[_DOWNWEIGHT] > 0, scaled, 0.0)
            weight = tf.where(beyond, stale_weight,
                              tf.where(rule[_SCALING] > 0, scaled, 1.0))
            weight = tf.where(tf.logical_and(pushed.finite, pushed.samples > 0), weight, 0.0)
            accepted = weight > 0.0
            accepted_i = tf.cast(accepted, tf.int64)
            in_round = pending + accepted_i
            commit = tf.logical_and(accepted, in_round >= rule[_K])
            total = self.pending_samples.read_value() + \
                tf.cast(accepted, tf.float32) * pushed.samples
            lr_values = scaling = None
            if self.lr_scaling is not None:  # the gain this push's commit would apply
                lr_values = self.lr_scaling.variable.read_value()
                scaling = self.lr_scaling.decide(lr_values, accepted, pushed.samples,
                                                 staleness)
        return _Decision(version, staleness, weight, accepted, accepted_i, in_round, commit,
                         total, lr_values, scaling)

    def _accumulate(self, updates, accumulators, decision, samples, extras):
        """Step 3 of `push` (a push with rounds): the weighted gradient added to each
        shard's round aggregate, on the shard's task under its lock, and when the push
        commits, the round's update (`_apply_round`). Returns each shard's squared norm
        of its aggregate at a commit (0 otherwise; for the noise scale) and the commit's
        ops."""
        weight = decision.weight

        def add(indices):
            # Each shard adds the gradient and, when the round commits, the squared
            # norm of its part of the round's aggregate (one pass over the shard a
            # round, for the noise scale).
            added = []
            for i in indices:
                acc, g = accumulators[i], updates[i][2]
                # A rejected gradient weighs 0 and may hold NaN: multiply_no_nan makes
                # it exactly 0.
                if isinstance(g, tf.IndexedSlices):
                    added.append(acc.scatter_add(tf.IndexedSlices(
                        tf.math.multiply_no_nan(g.values, tf.cast(
                            weight * samples, g.dtype)), g.indices)))
                else:
                    added.append(acc.assign_add(tf.math.multiply_no_nan(
                        g, tf.cast(weight * samples, g.dtype))))
            with tf.control_dependencies(added):
                return [tf.cond(decision.commit, lambda: tf.add_n([
                    _sq_norm(accumulators[i].read_value()) for i in indices]),
                    lambda: tf.constant(0.0, tf.float64))]

        added = self._on_shards([v for _, v, _ in updates], add, values=True)
        with tf.control_dependencies(added):
            return added, [tf.cond(decision.commit, lambda: tf.group(self._apply_round(
                updates, accumulators, decision.total, extras, decision.gain)), tf.no_op)]

    def _record(self, decision, pushed, added, direct):
        """Step 4 of `push`, on the rule task once the shards' work is done: the ops
        counting the push (`COUNTERS`), its worker's telemetry, and for a push with
        rounds the round's samples and noise statistics (``added``: the shards' squared
        norms from `_accumulate`); the learning-rate scaling's state last."""
        d = decision
        commit_i = tf.cast(d.commit, tf.int64)
        applied_now = commit_i * d.in_round
        delta = _counter_delta(commit_i, d.accepted_i, applied_now, pushed.finite)
        ops = [self.counter_vec.assign_add(delta)] + self._worker_telemetry(
            pushed.worker, d.accepted, d.version, d.staleness, pushed.samples,
            pushed.iteration_time)
        estimate = valid = None
        if not direct:
            ops.append(self.pending_samples.assign(tf.where(d.commit, 0.0, d.total)))
            noise, estimate, valid = self._noise_bookkeeping(
                d.accepted, d.commit, pushed.sq_norm, pushed.samples, d.total,
                tf.add_n(added))
            ops += noise
        if self.lr_scaling is not None:
            ops.append(self.lr_scaling.record(d.lr_values, d.scaling, d.commit, estimate,
                                              valid))
        return ops

    def _apply_unlocked(self, updates, condition, weight=None, extras=NO_EXTRAS,
                        gain=None):
        """Ops applying each gradient (times ``weight``) to its variable on its own task
        if ``condition``, outside any lock, as the stock strategy applies updates; the
        ``extras`` around them, once (the push is an update of its own); traced with
        the learning-rate ``gain`` (`strategies.ps_lr_scaling.commit_gain`)."""
        def apply(indices):
            return tf.cond(condition, lambda: tf.group(_created_by(lambda: [
                updates[i][0](updates[i][1], updates[i][2] if weight is None
                              else _scale(updates[i][2], weight))
                for i in indices])), tf.no_op)
        with committing(gain):
            return self._around_extras(updates, apply, extras, locked=False,
                                       condition=condition)

    def _meta_carrier(self, updates, grads):
        """Index of the smallest dense floating-point gradient of a variable on the rule
        task, to carry the push's scalars (None: none there)."""
        rule_task = _task(self.counter_vec.device)
        best = None
        for i, ((_, var, _), g) in enumerate(zip(updates, grads)):
            if isinstance(g, tf.IndexedSlices) or not g.dtype.is_floating or \
                    not g.shape.is_fully_defined() or _task(var.device) != rule_task:
                continue
            if best is None or g.shape.num_elements() < grads[best].shape.num_elements():
                best = i
        return best

    def _push_unlocked(self, updates, pushed, extras):
        """A direct push (its scalars ``pushed``, from `_send`) under a rule with no staleness bound or scaling: accepted when
        finite, applied at once on the variables' tasks as the stock strategy's update,
        then counted; no lock, since the decision reads no shared state. Each counter
        update is one atomic op, so the counters add up (``applied + dropped ==
        pushed``) whatever the interleaving; the version returned is read after this
        push's count, so concurrent pushes can only make the staleness recorded larger,
        never smaller."""
        finite, samples = pushed.finite, pushed.samples
        with tf.device(self.device):
            accepted = tf.logical_and(finite, samples > 0)
        with tf.device(self.device), \
                tf.control_dependencies(self._apply_unlocked(updates, accepted,
                                                             extras=extras)):
            accepted_i = tf.cast(accepted, tf.int64)
            # K = 1: an accepted gradient is an update of its own.
            version = self.counter_vec.assign_add(
                _counter_delta(accepted_i, accepted_i, accepted_i, finite),
                read_value=True)[_V]
            # The version this gradient was applied on, as the lock would have seen it.
            before = version - accepted_i
            telemetry = self._worker_telemetry(pushed.worker, accepted, before,
                                               before - pushed.version_read, samples,
                                               pushed.iteration_time)
            with tf.control_dependencies(telemetry):
                return tf.identity(version)

    def _worker_telemetry(self, worker, accepted, version, staleness, samples,
                          iteration_time):
        """Ops recording one push of ``worker`` (a [1, 1] index) in the per-worker
        telemetry: the version it joined, its sums and last values, its staleness."""
        bin_index = tf.minimum(tf.maximum(staleness, 0), STALENESS_BINS - 1)
        dropped_f = 1.0 - tf.cast(accepted, tf.float64)
        return [
            self.contributed.scatter_nd_max(
                worker, tf.reshape(tf.where(accepted, version, -1), [1])),
            self.worker_sums.scatter_nd_add(worker, tf.reshape(tf.stack(
                [1.0, dropped_f, tf.cast(samples, tf.float64), iteration_time]),
                [1, len(WORKER_SUMS)])),
            self.worker_last.scatter_nd_update(worker, tf.reshape(tf.stack(
                [iteration_time, tf.cast(samples, tf.float64)]), [1, len(WORKER_LAST)])),
            self.staleness_hist.scatter_nd_add(
                tf.concat([worker, tf.reshape(bin_index, [1, 1])], axis=1),
                tf.constant([1], tf.int64)),
        ]

    def _noise_bookkeeping(self, accepted, commit, sq_norm, samples, total, agg_sq):
        """Ops adding an accepted gradient to the open round's noise statistics and, at
        a commit, the round's (|G|^2, tr(S)) estimate to the sums (`ksync.noise.estimate`,
        on the round's aggregate of squared norm ``agg_sq`` over ``total`` samples);
        returns them, the estimate and whether it counts."""
        one = tf.where(accepted, tf.stack([tf.constant(1.0, tf.float64), sq_norm,
                                           1.0 / tf.cast(samples, tf.float64)]),
                       tf.zeros([3], tf.float64))
        count, sq_sum, inv_sum = tf.unstack(self.noise_round.read_value() + one)
        # Guarded divisors: an empty round or one without a commit divides by 1, and
        # `valid` below discards its estimate.
        big, n = tf.maximum(tf.cast(total, tf.float64), 1.0), tf.maximum(count, 1.0)
        mean_sq = agg_sq / big ** 2
        gap = inv_sum / n - 1.0 / big
        trace = (sq_sum / n - mean_sq) / tf.where(gap > 0, gap, 1.0)
        estimate = tf.stack([mean_sq - trace / big, trace])
        valid = tf.logical_and(tf.logical_and(commit, count >= 2.0), gap > 0)
        valid = tf.logical_and(valid, tf.reduce_all(tf.math.is_finite(estimate)))
        return [self.noise_sums.assign_add(tf.where(valid, estimate, tf.zeros([2], tf.float64))),
                self.noise_round.assign(tf.where(commit, tf.zeros([3], tf.float64),
                                                 tf.stack([count, sq_sum, inv_sum])))], \
            estimate, valid

    def commit_complete_round(self, updates, extras=NO_EXTRAS):
        """Commit the current round if it already holds K gradients (K was lowered
        after they arrived: a worker died, or the others have no steps left); returns
        whether it did. ``updates`` and ``extras`` as for `push` (the gradients are not
        used)."""
        accumulators = [self.accumulator(v) for _, v, _ in updates]

        def body():
            with tf.device(self.device):
                counters = self.counter_vec.read_value()
                pending = counters[_PENDING]
                commit = tf.logical_and(pending > 0, pending >= self.rule_vec[_K])
                total = self.pending_samples.read_value()
                scaling = self.lr_scaling
                if scaling is not None:
                    lr_values = scaling.variable.read_value()
                    decision = scaling.pending(lr_values)

            def apply():
                gain = None if scaling is None else decision.gain
                with tf.control_dependencies(self._apply_round(updates, accumulators, total,
                                                               extras, gain)):
                    with tf.device(self.device):
                        # A round completed by a lowered K gives no noise estimate.
                        return tf.group(
                            self.counter_vec.assign_add(tf.stack([
                                tf.constant(1, tf.int64), tf.constant(0, tf.int64), pending,
                                tf.constant(0, tf.int64), tf.constant(0, tf.int64),
                                -pending])),
                            self.pending_samples.assign(0.0),
                            self.noise_round.assign(tf.zeros([3], tf.float64)),
                            *([] if scaling is None else [scaling.record(
                                lr_values, decision, tf.constant(True))]))

            with tf.control_dependencies([tf.cond(commit, apply, tf.no_op)]):
                return tf.identity(commit)

        with tf.device(self.device):
            return self.critical_section.execute(body, exclusive_resource_access=False)

    def wait_turn(self, worker, updates, max_wait_s: float = MAX_WAIT_S,
                  extras=NO_EXTRAS):
        """The version at which ``worker`` may start its next step, after waiting for it.

        Under a rule with ``wait``, a worker whose gradient joined the current round
        waits until the round commits; a round that already holds K gradients (K was
        lowered) is committed here. The loop runs on the rule task and sleeps between
        checks, so waiting costs no network round trip per check and no CPU on the
        worker. It is what keeps a synchronous rule exact when several steps run inside
        one scheduled function (``steps_per_execution``, custom loops). A wait longer
        than ``max_wait_s`` fails the step with an error naming the round.
        """
        worker = tf.cast(worker, tf.int64)
        polls = int(max(1.0, max_wait_s * 1e6 / _LAST_SLEEP_US))
        with tf.device(self.device):
            def gated():
                counters = self.counter_vec.read_value()
                rule = self.rule_vec.read_value()
                version = counters[_V]
                waits = tf.logical_and(rule[_WAIT] > 0, self.contributed[worker] == version)
                complete = tf.logical_and(counters[_PENDING] > 0,
                                          counters[_PENDING] >= rule[_K])
                return waits, complete, version

            def cond(i, is_gated, version):
                del version
                return tf.logical_and(is_gated, i < polls)

            def body(i, is_gated, version):
                del is_gated, version
                _, complete, _ = gated()
                committed = tf.cond(
                    complete, lambda: self.commit_complete_round(updates, extras),
                    lambda: tf.constant(False))
                pause = tf.cast(tf.minimum(_FIRST_SLEEP_US * tf.pow(2, tf.minimum(i, 8)),
                                           _LAST_SLEEP_US), tf.int64)
                slept = tf.cond(committed, lambda: tf.constant(0),
                                lambda: sleep_us(pause))
                with tf.control_dependencies([slept]):
                    still, _, now = gated()
                return i + 1, still, now

            first, _, version = gated()
            i, still, version = tf.while_loop(cond, body, (tf.constant(0), first, version))
            check = tf.debugging.Assert(tf.logical_not(still), [
                "ksync: a worker waited more than", max_wait_s,
                "s for the round of version", version, "to commit; the other workers "
                "are gone or stopped. Check the cluster, or use an asynchronous policy."])
            with tf.control_dependencies([check]):
                return tf.identity(version)
