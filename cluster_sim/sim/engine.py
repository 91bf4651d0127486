"""The discrete-event simulation of one policy on one simulated cluster.

Workers start steps, compute for a scenario-given time, push, and the parameter server
applies the policy's rule through the very `ksync.UpdateState` the product uses; a
worker whose gradient joined the current round waits for the next version when the rule
says ``wait``, as `strategies.coordinator` holds it. The rule and the batch sizes are
decided by the product's own `ksync.controller.RuleController`, called when the
product's `ksync.controller.RefreshClock` says, as the strategy's coordinator asks it
(every ``refresh_every`` finished steps, a change of the live workers, a worker killed
by the scenario being not live, and ``IDLE_S`` with no finished step while a worker
waits at the gate: an event re-checks then), with the same measurements (recent and
running step times, staleness, samples and busy time, and the latest validation loss,
which the harness's evaluator reports too), and batch sizes come from the product's
`predictor.AllocationSchedule` (profiling phase, modes, windowed speeds).

Gradients are real (`cluster_sim.workloads.numpy_model`: `cluster_sim.numpy_mlp.MLP`, or
for a workload with embedding tables, ``ctr``, `cluster_sim.numpy_ctr.EmbeddingMLP`, whose
gradients are `cluster_sim.numpy_ctr.SparseGradient`s: the MLP's part and the rows the
batch touched, summed in a `cluster_sim.numpy_ctr.GradientSum` as the PS sums
``IndexedSlices``), computed in event order from the parameters each worker read. A
worker's gradient depends only on the version it read and its batch, so the gradients of
every worker that read the same version are computed together, lazily, just before that
version is replaced (or when one is needed).

Example:

>>> import ksync
>>> sim = Simulation(ksync.BSP(), SimConfig(num_workers=4, max_pushes=40, eval_every=20))
>>> result = sim.run()
>>> result["version"], result["applied"] + result["dropped"] + result["pending"]
(10, 40)
"""

import collections
import dataclasses
import math
import statistics

import numpy as np

import ksync
from ksync.controller import RefreshClock, RuleController
from ksync import lr_scaling
from ksync.learning_rate import LearningRate
from ksync.noise import RoundNoise
from predictor.schedule import AllocationSchedule
from cluster_sim.report.results import RunResult, curve_tta, target_reached
from cluster_sim.scenarios.training import TrainingConfig
from cluster_sim.sim.clock import EventClock
from cluster_sim.sim.ps import PSCosts, PSQueue
from cluster_sim.sim.speeds import Network, make_speed_model
from cluster_sim.workloads import numpy_model
from ksync.policies import RECENT_STEPS

_ARRIVE, _APPLY, _READ, _IDLE = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class SimConfig(TrainingConfig):
    """One simulated run: the shared training settings (`TrainingConfig`, the harness's
    `cluster_sim.harness.config.RunConfig` has the same) and the simulator's own.

    Timing: a step of ``b`` samples on a worker at speed ``s`` computes for
    ``b * us_per_sample / s`` plus framework costs not scaled by speed: ``read_overhead_s``
    before it reads the parameters (e.g. the chief dispatching the step) and
    ``step_overhead_s`` after, then communicates for the `Network` time (``latency_s``
    plus a pull and a push of the model's bytes at ``bandwidth_gbps``, each worker on a
    link of its own). The PS tasks (`cluster_sim.sim.ps`: the variables sharded evenly
    over ``num_ps`` of them) serve pushes one at a time in arrival order, each push
    ``ps_service_s + ps_push_s_per_byte * bytes / num_ps`` (a sparse gradient's own
    bytes), and each update ``ps_apply_s + ps_apply_s_per_byte * model bytes / num_ps``
    (the PS's aggregate is a dense variable); the worker whose push committed, and the
    workers the update releases, start once it is applied. A worker's iteration time, as
    the controller sees it, includes its wait in the PS's queue. With every PS cost 0 (the
    default) a push is applied as it arrives. A worker held at the k-sync gate starts ``gate_latency_s``
    after the version it waits for exists. ``input_before_read`` puts the scenario's
    per-sample time before the worker reads the parameters (an input-bound step), so
    only the overhead and the network count toward staleness; by default the step reads
    them first, as the real harness's steps and an accelerator's do. ``step_jitter``
    multiplies each step's compute by a lognormal factor of mean 1 and this sigma:
    without it workers of equal speed finish in lockstep, and a K-async gradient is
    less stale than on a real cluster.
    ``chunk_pushes`` > 0 reproduces training in ``model.fit`` chunks: after that many
    steps the workers drain, the model is evaluated, and ``chunk_overhead_s`` passes
    before the next chunk. ``start_overhead_s`` passes before the first step (the
    harness's clock includes ``fit``'s start and the tracing of the step).

    Evaluation: every ``eval_every`` pushes; with ``eval_relative_gap`` > 0 (what the
    harness does, `cluster_sim.report.EVAL_RELATIVE_GAP`) at the start and then
    ``max(eval_every, eval_relative_gap * pushes)`` pushes apart instead. The run's time
    to target is `cluster_sim.report.curve_tta` of the curve: the mean of the last
    evaluations' validation loss down to ``target_loss`` when given, else their accuracy
    up to ``target_accuracy``, interpolated. A run stops at the first of
    ``max_pushes``, ``max_updates``, ``max_time_s``, the target (``stop_at_target``) and
    an evaluation that finds the parameters NaN (diverged: no update brings them back).
    """

    num_workers: int = 4
    scenario: object = "static"  # a scenario name, TOML path or Scenario, or a SYNTHETIC model
    speeds: tuple = (1.0, 1.0, 0.5, 0.25)  # the speeds of "static", repeated over the workers
    traces: str | None = None  # the trace directory of a trace scenario
    straggler_mean: float = 0.5
    slow_fraction: float = 0.1
    slow_mean: float = 4.0
    step_overhead_s: float = 0.0
    read_overhead_s: float = 0.0
    bandwidth_gbps: float | None = 10.0
    latency_s: float = 50e-6
    # The PS's costs (`cluster_sim.sim.ps.PSCosts`): seconds per push (``ps_service_s``,
    # per PS task) and per byte pushed, per update and per byte of the model updated;
    # ``num_ps`` PS tasks share the bytes. Measured by ``calibrate --ps-probe``.
    ps_service_s: float = 0.0
    ps_push_s_per_byte: float = 0.0
    ps_apply_s: float = 0.0
    ps_apply_s_per_byte: float = 0.0
    num_ps: int = 1
    gate_latency_s: float = 0.0
    input_before_read: bool = False
    step_jitter: float = 0.0
    warmup_from: float | None = None  # the rate at push 0, rising to learning_rate
    warmup_pushes: int = 0            # over this many pushes (0: no warm-up)
    max_time_s: float | None = None
    stop_at_target: bool = True
    eval_every: int = 60
    eval_relative_gap: float = 0.0
    start_overhead_s: float = 0.0
    chunk_pushes: int = 0
    chunk_overhead_s: float = 0.0
    same_batch_order: bool = False
    # Each commit applies ``learning_rate`` times the gain of ``lr_scaling``
    # (`ksync.lr_scaling`: "adascale", "power", "linear", "sqrt" or None; "auto" is the
    # policy's own: "power" for Adaptive, None for the fixed rules), ``batch_size``
    # being the base batch, capped at ``max_lr`` when given. "auto" by default, as
    # `strategies.KSyncStrategy`'s PS applies it: the simulator runs what the product runs.
    lr_scaling: str | None = lr_scaling.AUTO
    max_lr: float | None = None

    @property
    def step_size(self) -> LearningRate:
        """The SGD settings as a `ksync.learning_rate.LearningRate`."""
        return LearningRate(self.learning_rate, momentum=self.momentum,
                            start=self.warmup_from, warmup_pushes=self.warmup_pushes)

    @property
    def ps_costs(self) -> PSCosts:
        """The PS's costs as a `cluster_sim.sim.ps.PSCosts`."""
        return PSCosts(self.ps_service_s, self.ps_push_s_per_byte, self.ps_apply_s,
                       self.ps_apply_s_per_byte)

    def with_step_size(self, lr: LearningRate) -> "SimConfig":
        """This config training with ``lr`` (an arm's: `cluster_sim.harness.arms.Arm`).

        >>> SimConfig().with_step_size(LearningRate(0.4, momentum=0.5)).step_size.rate
        0.4
        """
        return dataclasses.replace(self, learning_rate=lr.rate, momentum=lr.momentum,
                                   warmup_from=lr.start, warmup_pushes=lr.warmup_pushes)

    def check(self):
        self.step_size  # a rate <= 0, a momentum outside [0, 1) or a bad warm-up raise
        if not isinstance(self.num_workers, int) or self.num_workers < 1:
            raise ValueError(f"num_workers must be an integer >= 1, got {self.num_workers!r}")
        if self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("batch_size and eval_every must be >= 1")
        if not (self.max_pushes or self.max_updates or self.max_time_s):
            raise ValueError("give at least one of max_pushes, max_updates, max_time_s, or "
                             "the simulation never ends")
        if not isinstance(self.num_ps, int) or self.num_ps < 1:
            raise ValueError(f"num_ps must be an integer >= 1 (PS tasks), got {self.num_ps!r}")
        for name in ("step_overhead_s", "read_overhead_s", "chunk_overhead_s", "gate_latency_s",
                     "start_overhead_s", "eval_relative_gap", "step_jitter", "ps_service_s",
                     "ps_push_s_per_byte", "ps_apply_s", "ps_apply_s_per_byte"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if self.lr_scaling != lr_scaling.AUTO:
            lr_scaling.check(self.lr_scaling)


class _BatchStream:
    """Each worker's endless shuffled pass over the training rows (a new order per epoch,
    batches spanning epoch boundaries, as ``shuffle().repeat().batch()`` does)."""

    def __init__(self, num_rows, num_workers, seed, shared):
        self.num_rows = num_rows
        seqs = np.random.SeedSequence([seed, 0xDA7A]).spawn(1 if shared else num_workers)
        # shared: every worker reads the same order (the harness gives every worker the
        # same shuffle seed), each at its own position.
        self.rngs = [np.random.default_rng(s) for s in seqs]
        self.shared = shared
        self.buffers = [np.empty(0, np.int64) for _ in range(len(seqs))]
        self.positions = [0] * num_workers

    def take(self, worker, n):
        src = 0 if self.shared else worker
        pos = self.positions[worker]
        while len(self.buffers[src]) < pos + n:
            self.buffers[src] = np.concatenate(
                [self.buffers[src], self.rngs[src].permutation(self.num_rows)])
        self.positions[worker] = pos + n
        if not self.shared and pos > 4 * self.num_rows:
            # Forget consumed rows so the buffer stays small on long runs.
            self.buffers[src] = self.buffers[src][pos:]
            self.positions[worker] = n
            return self.buffers[src][:n]
        return self.buffers[src][pos:pos + n]


class Simulation:
    """Run ``policy`` (a `ksync.Policy` or name) on a simulated cluster.

    Args:
      policy: a `ksync.Policy` (parameters only: one instance may serve several runs;
        this run's decisions are in ``self.controller.history``).
      config: `SimConfig`.
      data: a `cluster_sim.workloads.Dataset` (default: digits with the config's seed).
      batch_allocation, forecaster, allocation_mode: as for `strategies.KSyncStrategy`:
        per-worker batch sizes from an `predictor.AllocationSchedule` over the
        `predictor.BatchAllocator`, every ``config.allocate_every`` updates.
      record_batches: keep ``(version_read, worker, rows, weight)`` of every accepted push
        in ``self.batches`` (for tests).
    """

    def __init__(self, policy, config: SimConfig = SimConfig(), data=None,
                 batch_allocation=None, forecaster=None, allocation_mode=None,
                 record_batches=False):
        config.check()
        self.config = c = config
        self.step_size = c.step_size
        self.policy = ksync.get(policy) if isinstance(policy, str) else policy
        if not isinstance(self.policy, ksync.Policy):
            raise TypeError(f"policy must be a ksync.Policy or a name, got {policy!r}")
        n = c.num_workers
        self.speed_model = make_speed_model(
            c.scenario, n, c.us_per_sample, seed=c.seed, speeds=c.speeds, traces=c.traces,
            straggler_mean=c.straggler_mean,
            slow_fraction=c.slow_fraction, slow_mean=c.slow_mean)
        self._jitter = np.random.default_rng([c.seed, 0x717])
        if data is None:
            from cluster_sim.workloads import digits
            data = digits(seed=c.seed)
        self.data = data
        self.model = numpy_model(data, c.hidden, seed=c.seed)
        # Sparse gradients (`cluster_sim.numpy_ctr`): kept per worker in a list, summed
        # in a `GradientSum`; ``model.nbytes`` is then a 32-sample step's push at most.
        self.sparse = getattr(data, "layout", None) is not None
        self.network = Network(self.model.nbytes, c.bandwidth_gbps, c.latency_s)
        schedule = None
        if batch_allocation is not None:
            batch_allocation.check_feasible(n)
            schedule = AllocationSchedule(batch_allocation, forecaster, allocation_mode)
        mode = lr_scaling.resolve(c.lr_scaling, self.policy)
        self.scaling = (lr_scaling.LRScaling(mode, c.batch_size, c.max_lr)
                        if mode is not None else None)
        self.controller = RuleController(self.policy, n, schedule, c.allocate_every,
                                         lr_scaling=mode, base_batch=float(c.batch_size))
        self.rule = self.controller.rule
        self.refresh_clock = RefreshClock(self.controller)  # when a refresh is due
        self._idle_check_due = False  # an _IDLE event is scheduled
        self.state = ksync.UpdateState(n, self.rule, self.scaling)
        self.lr_over_time = []  # (version, gain, learning rate) of every commit
        self.batch_sizes = self.controller.sizes or [c.batch_size] * n
        # {"wall_s", "sizes"} whenever the allocation changes (none without allocation).
        self.sizes_over_time = ([{"wall_s": 0.0, "sizes": list(map(int, self.batch_sizes))}]
                                if schedule is not None else [])
        self.clock = EventClock()
        self.stream = _BatchStream(len(data.x_train), n, c.seed, c.same_batch_order)
        self.record_batches = record_batches
        self.batches = []
        # Per-worker in-flight step.
        self.read_version = [0] * n
        self.rows = [None] * n
        self.step_time = [0.0] * n
        self.grads = ([None] * n if self.sparse
                      else np.zeros((n, self.model.num_params), self.model.dtype))
        self.requests = []  # workers whose gradient (at the current version) is not computed
        self.requested = np.zeros(n, bool)
        self.waiting = set()  # workers held at the k-sync gate
        if self.sparse:
            self.agg = self.model.zero_sum()
        else:
            self.agg = np.zeros(self.model.num_params, np.float64)
            self._g64 = np.empty(self.model.num_params, np.float64)  # scratch of one push
        self.agg_samples = 0.0
        self.round_noise = RoundNoise()  # the current round's gradient norms, as the PS's
        self.noise_sums = np.zeros(2)    # cumulative (|G|^2, tr(S)) of committed rounds
        # The PS tasks' queue (None: the PS costs nothing, a push is applied on arrival);
        # an update moves the whole model (a dense aggregate: `strategies.ps_state`).
        self.ps = None if c.ps_costs.free else PSQueue(c.ps_costs, c.num_ps)
        self.update_bytes = self.model.num_params * np.dtype(self.model.dtype).itemsize
        self._ready_at = 0.0  # when the latest update is applied
        # Telemetry, as the PS state keeps it; Python lists, as a numpy element update
        # costs several times a list's once per simulated push.
        self.worker_pushes = [0] * n
        self.worker_samples = [0.0] * n
        self.worker_time = [0.0] * n  # sum of iteration times (compute + communication)
        self.recent = [collections.deque(maxlen=RECENT_STEPS) for _ in range(n)]
        # Each worker's median over ``recent``, recomputed only for the workers that
        # pushed since the last refresh (a few of hundreds).
        self.recent_median = [None] * n
        self._pushed_since_refresh = set()
        self.staleness = []              # staleness of every push
        # Their histogram (negative counted as 0), kept as they come: rebuilding it from
        # the list at every refresh made long runs of many workers quadratic.
        self.staleness_counts = [0]
        self.curve = []
        self.k_over_time = []            # (wall_s, version, k, wait, batch sizes changed)
        self.tta = None  # when an evaluation first found the target reached
        self.diverged = False  # an evaluation found NaN parameters: the run stops
        self.last_loss = None  # the latest validation loss (the controller's measurement)
        self.commits = 0  # updates applied to the model (must equal the PS version)
        self.step_started = [None] * n  # clock time of each worker's running step
        self._next_eval = c.eval_every  # pushes at which the next evaluation is due
        self._chunk_started = 0
        self._inflight = 0
        self._idle = set()  # workers stopped by the end of a chunk

    # -- workers --------------------------------------------------------------------------
    def _start(self, w, delay=0.0):
        """Worker ``w`` takes a step now (its first ``delay`` seconds idle)."""
        c = self.config
        if c.chunk_pushes and self._chunk_started >= c.chunk_pushes:
            self._idle.add(w)
            return
        self._chunk_started += 1
        self._inflight += 1
        now = self.clock.now + delay
        self.step_started[w] = now
        b = self.batch_sizes[w]
        self.rows[w] = self.stream.take(w, b)
        compute = self.speed_model.compute_time(w, now, b)
        if c.step_jitter:
            sigma = c.step_jitter
            compute *= float(self._jitter.lognormal(-sigma * sigma / 2, sigma))
        self.step_time[w] = (compute + c.read_overhead_s + c.step_overhead_s
                             + self.network.step_s)
        before_read = c.read_overhead_s + (compute if c.input_before_read else 0.0)
        if before_read:
            self.clock.schedule(now + before_read, (_READ, w))
        elif delay:
            self.clock.schedule(now, (_READ, w))
        else:
            self._read(w)
        self.clock.schedule(now + self.step_time[w], (_ARRIVE, w))

    def _read(self, w):
        """``w`` reads the parameters: its gradient will be that of the current version."""
        self.read_version[w] = self.state.version
        self.requests.append(w)
        self.requested[w] = True

    def _flush(self):
        """Compute every requested gradient from the current parameters, in one call."""
        if not self.requests:
            return
        ws = self.requests
        self.requests = []
        width = max(len(self.rows[w]) for w in ws)
        idx = np.zeros((len(ws), width), np.int64)
        weights = np.zeros((len(ws), width))
        for j, w in enumerate(ws):
            r = self.rows[w]
            idx[j, :len(r)] = r
            weights[j, :len(r)] = 1.0 / len(r)
        # A sparse model reads its own parameters, settling only the rows looked up
        # (its ``params`` would settle the whole table).
        g = self.model.gradients(None if self.sparse else self.model.params,
                                 self.data.x_train[idx], self.data.y_train[idx], weights)
        if self.sparse:
            for w, gw in zip(ws, g):
                self.grads[w] = gw
        else:
            self.grads[ws] = g
        self.requested[ws] = False

    def _release_waiting(self):
        if self.waiting:
            ready = sorted(w for w in self.waiting if self.state.may_start(w))
            # Released by an update: once it is applied, then the gate's own delay.
            delay = self.config.gate_latency_s + max(0.0, self._ready_at - self.clock.now)
            for w in ready:
                self.waiting.discard(w)
                self._start(w, delay)

    # -- parameter server -----------------------------------------------------------------
    def _push_bytes(self, w) -> int:
        """Bytes of ``w``'s push: the model's, or a sparse gradient's own rows."""
        if not self.sparse:
            return self.model.nbytes
        if self.requested[w]:
            self._flush()
        return self.grads[w].nbytes

    def _apply_push(self, w) -> bool:
        """The PS applies ``w``'s push; whether it committed an update."""
        c, state = self.config, self.state
        self._inflight -= 1
        if self.requested[w]:
            self._flush()
        samples = float(len(self.rows[w]))
        result = state.push(worker=w, version_read=int(self.read_version[w]), samples=samples)
        self.staleness.append(result.staleness)
        s = max(int(result.staleness), 0)
        if s >= len(self.staleness_counts):
            self.staleness_counts += [0] * (s + 1 - len(self.staleness_counts))
        self.staleness_counts[s] += 1
        step_time = self.step_time[w]
        self.worker_pushes[w] += 1
        self.worker_samples[w] += samples
        self.worker_time[w] += step_time
        # As the coordinator times a step: to the end of its push, the PS's queue included.
        self.recent[w].append(step_time if self.ps is None
                              else self.clock.now - self.step_started[w])
        self._pushed_since_refresh.add(w)
        self.step_started[w] = None
        if result.accepted:
            # As the PS aggregate: sum of weight * samples * gradient over sum of samples.
            if self.sparse:
                g = self.grads[w]
                self.round_noise.add(g.norm2(), samples)
                self.agg.add(g, result.weight * samples)
            else:
                g = self._g64
                g[:] = self.grads[w]
                self.round_noise.add(float(g @ g), samples)
                g *= result.weight * samples
                self.agg += g
            self.agg_samples += samples
            if self.record_batches:
                self.batches.append((int(self.read_version[w]), w, self.rows[w].copy(),
                                     result.weight))
        if result.committed:
            self._flush()  # requests of the old version see the old parameters
            if self.sparse:
                mean = self.agg.total(self.agg_samples, self.model.dtype)
                estimate = self.round_noise.estimate(mean.norm2())
                self.agg.clear()
            else:
                mean = self.agg / self.agg_samples
                estimate = self.round_noise.estimate(float(mean @ mean))
                mean = mean.astype(self.model.dtype)
                self.agg[:] = 0.0
            self.noise_sums += estimate
            self.round_noise = RoundNoise()
            # The arm's rate at this push (its warm-up), times the gain before this round.
            lr = state.learning_rate(self.step_size.at(state.pushed), result)
            state.observe_noise(*estimate)
            self.lr_over_time.append((state.version, result.gain, lr))
            self.model.apply(mean, lr, c.momentum)
            self.agg_samples = 0.0
            self.commits += 1
            if self.ps is not None:
                self._ready_at = self.clock.now + self.ps.update_s(self.update_bytes)
        pushes = state.pushed
        # The coordinator counts finished steps and refreshes before the gate check.
        self._step_finished()
        if not c.chunk_pushes and pushes >= self._next_eval:
            self._evaluate()
        if state.may_start(w):
            # A push that committed returns once its update is applied.
            self._start(w, max(0.0, self._ready_at - self.clock.now))
        else:
            self._wait(w)
        if result.committed:
            self._release_waiting()
        if c.chunk_pushes and self._chunk_started >= c.chunk_pushes and not self._inflight:
            self._end_chunk()
        return result.committed

    def _end_chunk(self):
        # The harness times each fit() whole (its start-up included) before evaluating.
        self.clock.advance(self.config.chunk_overhead_s)
        self._evaluate()
        self._chunk_started = 0
        for w in sorted(self._idle):
            if self.state.may_start(w):
                self._start(w)
            else:
                self._wait(w)
        self._idle.clear()

    # -- when the rule is refreshed (`ksync.controller.RefreshClock`, as the coordinator) --
    def _live(self) -> tuple:
        """The workers not killed now (a paused one is live, as TensorFlow sees it)."""
        n, now = self.config.num_workers, self.clock.now
        if not self.speed_model.has_kills:  # asked at every push: no loop without kills
            return tuple(range(n))
        return tuple(w for w in range(n) if not self.speed_model.killed(w, now))

    def _step_finished(self):
        """A worker comes back for its next step: a refresh if the clock says one is due."""
        if self.refresh_clock.step_finished(now=self.clock.now, live=self._live()):
            self._refresh()

    def _steps_queued(self) -> bool:
        """Whether a worker let through the gate would find a step (not at a chunk's end)."""
        c = self.config
        return not (c.chunk_pushes and self._chunk_started >= c.chunk_pushes)

    def _wait(self, w):
        """``w`` waits at the gate; the coordinator's waiting thread re-checks every
        ``idle_s`` (one re-check event serves every waiting worker: the first refresh
        it makes resets the clock for the others)."""
        self.waiting.add(w)
        self._schedule_idle_check()

    def _schedule_idle_check(self):
        at = self.refresh_clock.next_idle_check()
        if self._idle_check_due or not self.waiting or at is None:
            return
        self._idle_check_due = True
        self.clock.schedule(max(at, self.clock.now), (_IDLE, -1))

    def _idle_check(self):
        """The re-check of a waiting worker: a refresh when the clock says nothing
        finished for ``idle_s`` with steps queued (a worker may be paused or dead, and
        the rule may have to follow), then the next re-check while workers still wait
        and something else is still to happen (a simulation stuck for good ends)."""
        self._idle_check_due = False
        if self.waiting and self.refresh_clock.idle_due(self.clock.now,
                                                        self._steps_queued()):
            self._refresh()
        if self.waiting and self._steps_queued() and math.isfinite(
                self.clock.next_at() if self.clock else math.inf):
            self._schedule_idle_check()

    def _refresh(self):
        """The controller's decision on the simulated counters, measured as the strategy
        measures them (a worker the scenario killed is not live)."""
        now = self.clock.now
        live = self._live()
        decision = self.controller.refresh(ksync.Measurement(
            version=self.state.version, live_workers=live,
            # As the coordinator: each worker's median over its last steps.
            iteration_times=self._recent_medians(),
            running_times=tuple(None if t is None else now - t for t in self.step_started),
            staleness_hist=tuple(self.staleness_counts),
            worker_samples=tuple(self.worker_samples), busy_s=tuple(self.worker_time),
            # The latest validation loss, as the harness's evaluator reports it.
            loss=self.last_loss, worker_pushes=tuple(self.worker_pushes),
            noise_sums=tuple(self.noise_sums)))
        self.refresh_clock.refreshed(live, now=now)
        if decision.changed:
            self.state.set_rule(decision.rule)
            self.rule = decision.rule
            self.k_over_time.append((now, self.state.version, decision.rule.k,
                                     decision.rule.wait))
            self._release_waiting()  # a rule without wait opens the gate at once
        if decision.sizes is not None:
            self.batch_sizes = list(decision.sizes)
            self.sizes_over_time.append({"wall_s": float(now),
                                         "sizes": list(map(int, decision.sizes))})

    def _recent_medians(self) -> tuple:
        for w in self._pushed_since_refresh:
            self.recent_median[w] = float(statistics.median(self.recent[w]))
        self._pushed_since_refresh.clear()
        return tuple(self.recent_median)

    def _evaluate(self):
        c = self.config
        loss, acc = self.model.evaluate(self.data.x_test, self.data.y_test)
        pushes = self.state.pushed
        point = {"wall_s": float(self.clock.now), "pushes": pushes,
                 "version": self.state.version, "loss": loss, "accuracy": acc}
        if self.scaling is not None:  # the last commit's gain and rate, progress so far
            point.update(lr_gain=self.state.last_gain,
                         learning_rate=self.state.learning_rate(self.step_size.at(pushes)),
                         progress=self.scaling.progress)
        self.curve.append(point)
        self.last_loss = loss
        # NaN parameters stay NaN under any update: the run can never reach its target,
        # and simulating it on to its push limit was most of a wide grid's time.
        self.diverged = self.diverged or (math.isnan(loss)
                                          and bool(np.isnan(self.model.params).any()))
        gap = (max(c.eval_every, int(c.eval_relative_gap * pushes)) if c.eval_relative_gap
               else c.eval_every)
        self._next_eval = pushes - pushes % gap + gap if not c.eval_relative_gap \
            else pushes + gap
        reached = target_reached(self.curve, c.target_loss,
                                 None if c.target_loss is not None else c.target_accuracy)
        if self.tta is None and reached:
            # Only a stop signal: the reported time is curve_tta's interpolated crossing.
            self.tta = float(self.clock.now)

    def rule_history(self):
        """``(version, rule, reason)`` of every rule of the run, as the controller keeps
        them."""
        return self.controller.history

    def _done(self):
        c, s = self.config, self.state
        return ((c.max_pushes and s.pushed >= c.max_pushes)
                or (c.max_updates and s.version >= c.max_updates)
                or (c.max_time_s and self.clock.now >= c.max_time_s)
                or (c.stop_at_target and self.tta is not None)
                or self.diverged)

    # -- the run --------------------------------------------------------------------------
    def run(self, progress=None) -> dict:
        """Simulate until a stop condition; returns the measurements (see `summary`).

        ``progress(sim)`` is called after every evaluation, e.g. to move a progress bar.
        """
        c = self.config
        if c.eval_relative_gap:
            self._evaluate()  # the initial weights, as the harness's evaluator at t = 0
        for w in range(c.num_workers):
            # The coordinator counts each worker's first call for a step as it counts
            # the later ones (the first, with no live set seen yet, refreshes).
            self._step_finished()
            self._start(w, c.start_overhead_s)
        seen = 0
        while self.clock and not self._done():
            t, (kind, w) = self.clock.pop()
            if kind == _READ:
                self._read(w)
                continue
            if kind == _IDLE:
                self._idle_check()
                continue
            if kind == _ARRIVE and self.ps is not None:
                end = self.ps.arrive(t, w, self._push_bytes(w))
                if end is not None:
                    self.clock.schedule(end, (_APPLY, w))
                continue
            committed = self._apply_push(w)
            if self.ps is not None:
                served = self.ps.done(t, self.update_bytes if committed else 0)
                if served is not None:  # the next push waiting in the queue
                    self.clock.schedule(served[1], (_APPLY, served[0]))
            if progress is not None and len(self.curve) != seen:
                seen = len(self.curve)
                progress(self)
        if not self.curve or self.curve[-1]["pushes"] != self.state.pushed:
            self._evaluate()
        self.state.check_invariants()
        return self.summary()

    def summary(self) -> dict:
        """The run as a `cluster_sim.report.RunResult` dict, as the harness's
        (`cluster_sim.harness.run.run_arm`), with ``simulated: True`` and the speed
        model as ``scenario``."""
        s, wall = self.state, float(self.clock.now)
        worker_samples = np.asarray(self.worker_samples)
        samples = float(worker_samples.sum())
        hist = np.asarray(self.staleness_counts, np.int64)
        busy = np.asarray(self.worker_time)
        # Each worker's stand-alone rate under the same slowdowns: its samples over the
        # time it spent computing and communicating them.
        standalone = float(np.sum(worker_samples[busy > 0] / busy[busy > 0]))
        rate = samples / wall if wall > 0 else None
        c = self.config
        goal = {"target_loss": c.target_loss, "target_accuracy": c.target_accuracy}
        tta = curve_tta(self.curve, **goal)
        return RunResult(
            policy=repr(self.policy), seed=c.seed, tta_s=tta["tta_s"],
            tta_accuracy_s=tta["tta_accuracy_s"], max_eval_gap=tta["max_eval_gap"],
            tta_first_s=tta["tta_first_s"],
            final_loss=self.curve[-1]["loss"], **goal,
            final_accuracy=self.curve[-1]["accuracy"], wall_s=wall, samples_per_s=rate,
            hardware_efficiency=rate / standalone if rate and standalone else None,
            idle_fraction=float(1.0 - busy.sum() / (wall * len(busy))) if wall > 0 else None,
            staleness_p50=_quantile(hist, 0.5), staleness_p95=_quantile(hist, 0.95),
            staleness_histogram=hist.tolist(),
            pushed=s.pushed, applied=s.applied, dropped=s.dropped, pending=s.pending,
            version=s.version, rule=self.rule.describe(),
            k_history=[{"version": v, "k": r.k, "wait": r.wait, "rule": r.describe(),
                        "reason": why} for v, r, why in self.rule_history()],
            worker_pushes=list(self.worker_pushes),
            worker_step_times=[float(t / p) if p else None
                               for t, p in zip(self.worker_time, self.worker_pushes)],
            batch_sizes=self.sizes_over_time, curve=self.curve,
            scenario=self.speed_model.describe(), simulated=True).as_dict()

    def lr_summary(self) -> dict:
        """The learning-rate scaling of the run: mode, progress in base steps, and the
        quartiles of the commits' gains and rates (the curve's points carry the last
        commit's ``lr_gain`` and ``learning_rate`` and the ``progress`` so far)."""
        out = {"mode": None if self.scaling is None else self.scaling.mode,
               "base_lr": self.config.learning_rate, "commits": len(self.lr_over_time),
               "progress": (float(len(self.lr_over_time)) if self.scaling is None
                            else self.scaling.progress)}
        if self.lr_over_time:
            _, gains, rates = np.asarray(self.lr_over_time).T
            out.update(gain_quartiles=np.quantile(gains, [0.25, 0.5, 0.75]).tolist(),
                       lr_quartiles=np.quantile(rates, [0.25, 0.5, 0.75]).tolist(),
                       final_gain=float(gains[-1]), final_lr=float(rates[-1]))
        return out


def _quantile(hist, q):
    """As `strategies.telemetry.staleness_quantile`, on an uncapped histogram."""
    total = hist.sum()
    return int(np.searchsorted(np.cumsum(hist), q * total)) if total else None


def simulate(policy, config: SimConfig = SimConfig(), data=None, progress=None, **kwargs):
    """Shorthand: ``Simulation(policy, config, data, **kwargs).run(progress)``."""
    return Simulation(policy, config, data, **kwargs).run(progress)
