"""The control loop around a policy: when it observes, what it sees, which rule runs.

`RuleController` is what `strategies.KSyncStrategy` and the discrete-event simulator
(`cluster_sim.sim.engine`) both call, so a simulated run makes the decisions the real
strategy would make on the same measurements. Each caller gathers a `Measurement` (the
strategy from the PS counters and its coordinator, the simulator from its own counters)
and calls `refresh`; the controller keeps the observation window, calls the policy,
caps K of a waiting rule at the workers that can push (a rule without waiting needs no
cap: one worker can fill a round alone), records every change with its reason and, with a
batch allocation, calls the `AllocationSchedule` every ``allocate_every`` updates.

The controller holds everything that belongs to one run (the rule history, the first and
latest training losses, the observation window, the policy's own state for the run in
``Context.memory``); the policy holds only its parameters, so one policy instance can
drive several controllers.

Pure Python: no TensorFlow.

Example:

>>> import ksync
>>> controller = RuleController(ksync.KSync(k=3), num_workers=3)
>>> m = Measurement(version=0, live_workers=(0, 1, 2))
>>> controller.refresh(m).rule.k
3
>>> decision = controller.refresh(Measurement(version=4, live_workers=(0, 1)))
>>> decision.rule.k, decision.changed, controller.explain()
(2, True, 'K=2 sync, drop beyond staleness 0 since version 4: K capped at the 2 live worker(s)')
>>> [(version, rule.k, why) for version, rule, why in controller.history]
[(0, 3, 'initial rule'), (4, 2, 'K capped at the 2 live worker(s)')]
"""

import dataclasses
import math

import numpy as np

from ksync import lr_scaling as lr_scaling_module
from ksync.noise import MIN_NOISE_ROUNDS, NOISE_MEMORY, NOISE_WINDOW, fade, noise_scale  # noqa: F401
from ksync.policies import Context, Observation, Policy, stalled_workers
from ksync.rule import Rule


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What a caller measured at one moment; cumulative counters are since the start.

    Args:
      version: the PS version.
      live_workers: indices of the workers that are alive.
      iteration_times: each worker's usual step time (s), None if it has none yet.
      running_times: seconds each worker's current step has run (None: not running).
      staleness_hist: cumulative count of pushes by staleness bin (any length).
      worker_samples: cumulative samples each worker pushed.
      busy_s: cumulative seconds each worker spent on its steps.
      blocked_workers: when no step is queued and every worker still running one waits
        for the current round, those workers (K must drop to them); else None.
      loss: the latest training loss the caller knows (None: none), passed on to the
        policy's `Observation` (`ksync.AdaSync` follows it).
      worker_pushes: cumulative gradients each worker pushed.
      noise_sums: cumulative ``(|G|^2, tr(S))`` estimates of the committed rounds
        (`ksync.noise`; empty when the caller does not measure them).
    """

    version: int
    live_workers: tuple
    iteration_times: tuple = ()
    running_times: tuple = ()
    staleness_hist: tuple = ()
    worker_samples: tuple = ()
    busy_s: tuple = ()
    blocked_workers: tuple | None = None
    loss: float | None = None
    worker_pushes: tuple = ()
    noise_sums: tuple = ()

    def stalled(self) -> bool:
        """Whether some worker's running step takes far longer than its usual one."""
        return bool(stalled_workers(self.iteration_times, self.running_times))


@dataclasses.dataclass(frozen=True)
class Decision:
    """The rule to run (``changed``: it differs from the one that ran) and, with a batch
    allocation, new per-worker batch sizes (None: keep them)."""

    rule: Rule
    changed: bool = False
    sizes: list | None = None


def _window_batches(now, before) -> tuple | None:
    """Each worker's mean samples per push since ``before``; over the whole run where it
    pushed nothing since (a stall, or a refresh right after another), None where it
    never pushed, or when the caller does not count pushes."""
    if not now.worker_pushes or not now.worker_samples:
        return None
    pushes = np.subtract(now.worker_pushes, before.worker_pushes or 0)
    samples = np.subtract(now.worker_samples, before.worker_samples or 0)
    return tuple(float(s / p) if p > 0 else (float(total / n) if n > 0 else None)
                 for s, p, total, n in zip(samples, pushes, now.worker_samples,
                                           now.worker_pushes))


def staleness_quantile(hist, q: float) -> int | None:
    """The ``q`` quantile of staleness from a histogram over bins 0, 1, 2, ... (a last
    bin that means "that many or more" gives at most its index).

    >>> staleness_quantile([5, 3, 2], 0.95)
    2
    """
    hist = np.asarray(hist, np.int64)
    total = int(hist.sum())
    if total == 0:
        return None
    return int(np.searchsorted(np.cumsum(hist), q * total))


#: seconds without a finished step (or a refresh) after which a run with a worker
#: waiting at the gate and steps queued refreshes its rule: a worker may have died,
#: and K may have to follow the live workers for the round to complete.
IDLE_S = 0.5


class RefreshClock:
    """When a run refreshes its rule: every `RuleController.refresh_every` finished
    steps, when the set of live workers changes, and after ``idle_s`` seconds with no
    finished step while a worker waits at the gate and steps are queued.

    Pure Python and no clock of its own: callers pass the time (the strategy's
    coordinator its monotonic clock, the simulator its simulated one), so both ask the
    same questions at the same moments. Not thread-safe: the coordinator calls it under
    its condition's lock.

    >>> import ksync
    >>> clock = RefreshClock(RuleController(ksync.AdaSync(refresh_every=2), num_workers=2))
    >>> clock.step_finished(now=0.1, live=(0, 1))   # no refresh has seen these workers
    True
    >>> clock.refreshed(live=(0, 1), now=0.1)
    >>> [clock.step_finished(now=t, live=(0, 1)) for t in (0.2, 0.3, 0.4)]
    [True, False, True]
    >>> clock.step_finished(now=0.5, live=(0,))      # worker 1 is gone
    True
    >>> clock.next_idle_check(), clock.idle_due(now=0.9, steps_queued=True)
    (1.0, False)
    >>> clock.idle_due(now=1.0, steps_queued=True), clock.idle_due(now=1.0, steps_queued=False)
    (True, False)
    """

    def __init__(self, controller: "RuleController", idle_s: float = IDLE_S):
        if not (isinstance(idle_s, (int, float)) and idle_s > 0):
            raise ValueError(f"idle_s must be a number of seconds > 0, got {idle_s!r}.")
        self.controller = controller
        self.idle_s = float(idle_s)
        self._since_refresh = 0   # finished steps since the last one that was due
        self._live = None         # the live workers the last refresh saw
        self._last_event = None   # time of the last finished step or refresh

    def step_finished(self, now: float, live) -> bool:
        """Count a step finished at ``now`` with ``live`` workers (None: not known);
        whether a refresh is due."""
        self._last_event = now
        self._since_refresh += 1
        every = self.controller.refresh_every
        due = bool(every) and self._since_refresh >= every
        if due:
            self._since_refresh = 0
        return due or (None if live is None else tuple(live)) != self._live

    def refreshed(self, live=None, now: float | None = None) -> None:
        """A refresh was made (with the ``live`` workers it was asked for, if any)."""
        if live is not None:
            self._live = tuple(live)
        if now is not None:
            self._last_event = now

    def next_idle_check(self) -> float | None:
        """When a caller with a worker waiting at the gate should ask `idle_due` (None:
        nothing has happened yet to count from)."""
        return None if self._last_event is None else self._last_event + self.idle_s

    def idle_due(self, now: float, steps_queued: bool) -> bool:
        """Whether a refresh is due at ``now`` for want of progress: ``idle_s`` since
        the last finished step or refresh, with steps queued (with none, there is
        nothing to let through and nothing to decide)."""
        # Against `next_idle_check` itself: ``now - last >= idle_s`` can be False at
        # ``now = last + idle_s`` in floating point, and a caller that re-checks at
        # `next_idle_check` would then ask again at the same moment for ever.
        return steps_queued and (self._last_event is None
                                 or now >= self.next_idle_check())


class RuleController:
    """The refresh protocol of one run: the policy, the rule that runs and the schedule.

    ``history`` lists ``(version, rule, reason)`` for the initial rule and every change
    (the policy's choices and the caps), and `explain` the current one; both belong to
    this controller, not to the policy, which several controllers may share.

    Args:
      policy: a `ksync.Policy` (parameters only; see `ksync.policies`).
      num_workers: workers of the cluster.
      schedule: a `predictor.AllocationSchedule`, or None without batch allocation.
      allocate_every: updates between two calls of the schedule (the first one after
        this many updates at equal sizes, the profiling phase).
      lr_scaling: the learning-rate scaling the caller's PS applies at each commit
        (`ksync.lr_scaling`; None: none), given to the policy in its `Context`.
      base_batch: samples of the batch the learning rate is meant for (one worker's).
    """

    def __init__(self, policy: Policy, num_workers: int, schedule=None,
                 allocate_every: int = 20, lr_scaling: str | None = None,
                 base_batch: float | None = None):
        if schedule is not None and (not isinstance(allocate_every, int)
                                     or allocate_every < 1):
            raise ValueError(f"allocate_every must be an integer >= 1, got "
                             f"{allocate_every!r}.")
        lr_scaling_module.check(lr_scaling)
        self.policy = policy
        self.num_workers = num_workers
        self.lr_scaling = lr_scaling
        self.base_batch = base_batch
        self.policy_rule = policy.rule(num_workers)  # what the policy asks for
        self.rule = self.policy_rule                # what runs
        #: (version, rule, reason) from the initial rule on; a rule differs from the last.
        self.history = [(0, self.rule, "initial rule")]
        # (version, loss) of the first and the latest finite loss at an observation.
        self.first_loss = self.last_loss = None
        self.policy_memory = {}  # the policy's own state for this run (Context.memory)
        self.schedule = schedule
        self.allocate_every = allocate_every
        self.sizes = schedule.initial(num_workers) if schedule is not None else None
        self.capped_for_work = False
        self._observed = None   # Measurement at the last observation
        self._observations = 0
        self._allocated = None  # Measurement at the last allocation
        # (|G|^2, tr(S), rounds) sums of the recent rounds, older ones fading by
        # NOISE_MEMORY every NOISE_WINDOW rounds.
        self._noise = (0.0, 0.0, 0.0)

    @property
    def refresh_every(self) -> int:
        """Finished steps between two `refresh` calls that callers should keep (0: none
        due; callers still refresh when the live workers change or a worker stalls)."""
        periods = [p for p in (self.policy.refresh_every,
                               self.allocate_every if self.schedule else 0) if p]
        return min(periods) if periods else 0

    def refresh(self, now: Measurement) -> Decision:
        """Observe when due, cap K and allocate when due; the rule and sizes to apply."""
        every = self.policy.refresh_every
        if self._observed is None:
            self._observed = now
        elif every and (now.version - self._observed.version >= (
                every if self._observations else self.policy.first_refresh or every)
                or now.stalled()):
            self._observe(now)
            self._observed = now
            self._observations += 1
        live = tuple(now.live_workers)
        rule, cap = self.policy_rule, self._cap(self.policy_rule, live)
        reason = f"K capped at the {cap} live worker(s)"
        blocked = now.blocked_workers
        if rule.wait and blocked is not None and 0 < len(blocked) < cap:
            cap = len(blocked)
            reason = f"K capped at the {cap} worker(s) with steps left"
        self.capped_for_work = rule.k > cap > 0 and cap < len(live)
        if rule.k > cap > 0:
            rule = dataclasses.replace(rule, k=cap)  # a K nobody can reach stalls rounds
        changed = rule != self.rule
        if changed:
            if rule == self.policy_rule:
                reason = "policy rule restored with all its workers live"
            self._record(now.version, rule, reason)
            self.rule = rule
        return Decision(rule, changed, self._maybe_allocate(now))

    @staticmethod
    def _cap(rule, live) -> int:
        """The largest K the ``live`` workers can complete a round of under ``rule`` (0:
        no cap).

        Only a waiting rule needs one: each worker joins a round once and then waits
        for it to commit, so K above the live workers (or above those with steps left)
        never completes. Without waiting a worker pushes again into the same round, so
        the round completes with any number of live workers: Rennala SGD's B gradients
        at the current version come from one worker alone if need be, and capping B at
        the live workers would change the method, not unblock it.

        >>> RuleController._cap(Rule(k=8, wait=True, max_staleness=0), (0, 1))
        2
        >>> RuleController._cap(Rule(k=8, wait=False, max_staleness=0), (0,))
        0
        """
        return len(live) if rule.wait else 0

    def context(self) -> Context:
        """What this run remembers for its policy (see `ksync.policies.Context`)."""
        return Context(num_workers=self.num_workers, rule=self.policy_rule,
                       first_loss=self.first_loss, last_loss=self.last_loss,
                       memory=self.policy_memory, lr_scaling=self.lr_scaling,
                       base_batch=self.base_batch)

    def explain(self) -> str:
        """Why the current rule runs, in one line (and the policy's status, and why the
        batch sizes are equal when they fell back, if any)."""
        version, rule, reason = self.history[-1]
        line = f"{rule.describe()} since version {version}: {reason}"
        notes = [self.policy.status(self.context()),
                 self.schedule.status() if self.schedule is not None else None]
        return "; ".join([line, *(n for n in notes if n)])

    def _observe(self, now):
        """Give the policy the window's observation; adopt what it proposes."""
        observation = self._observation(now)
        loss = observation.loss
        if loss is not None and math.isfinite(loss):
            self.last_loss = (observation.version, float(loss))
            if self.first_loss is None:
                self.first_loss = self.last_loss
        proposal = self.policy.observe(observation, self.context())
        if proposal is None:
            return
        if not (isinstance(proposal, tuple) and len(proposal) == 2
                and isinstance(proposal[0], Rule)):
            raise TypeError(f"{self.policy!r}.observe must return (rule, reason) or None, "
                            f"got {proposal!r}; e.g. return ksync.Rule(k=2, wait=True), "
                            f"\"why\".")
        rule, reason = proposal
        if rule != self.policy_rule:
            self.policy_rule = rule
            self._record(observation.version, rule, str(reason))

    def _record(self, version, rule, reason):
        """Note that ``rule`` runs from ``version`` on, and why."""
        if self.history[-1][1] != rule:
            self.history.append((version, rule, reason))

    def get_state(self) -> dict:
        """The decisions so far as plain JSON-able data (for checkpoints)."""
        state = {"policy_rule": dataclasses.asdict(self.policy_rule),
                 "rule": dataclasses.asdict(self.rule),
                 "history": [[v, dataclasses.asdict(r), why] for v, r, why in self.history],
                 "first_loss": None if self.first_loss is None else list(self.first_loss),
                 "last_loss": None if self.last_loss is None else list(self.last_loss),
                 "policy_memory": dict(self.policy_memory)}
        if self.schedule is not None:
            state["allocation"] = {"sizes": list(self.schedule.sizes),
                                   "history": self.schedule.history}
            if self.schedule.step_cost is not None:
                state["allocation"]["step_cost"] = self.schedule.step_cost.get_state()
        return state

    def set_state(self, state: dict) -> None:
        """Continue from `get_state`'s output (the PS copy of the rule is the caller's)."""
        self.history = [(v, Rule(**r), why) for v, r, why in state["history"]]
        # Checkpoints written before the controller kept the losses have none.
        self.first_loss, self.last_loss = (None if state.get(key) is None else tuple(state[key])
                                           for key in ("first_loss", "last_loss"))
        # Checkpoints written before policies kept run state have none.
        self.policy_memory = dict(state.get("policy_memory") or {})
        self.policy_rule = Rule(**state["policy_rule"])
        self.rule = Rule(**state["rule"])
        if self.schedule is not None:
            allocation = state["allocation"]
            self.schedule.sizes = list(allocation["sizes"])
            self.schedule.history = allocation["history"]
            # Checkpoints written before the cost was estimated learn it again.
            if self.schedule.step_cost is not None and "step_cost" in allocation:
                self.schedule.step_cost.set_state(allocation["step_cost"])
            self.sizes = list(allocation["sizes"])

    def _observation(self, now):
        before = self._observed
        hist = np.asarray(now.staleness_hist, np.int64)
        old = np.asarray(before.staleness_hist, np.int64)
        size = max(len(hist), len(old))  # a simulator's histogram grows as it runs
        window = np.pad(hist, (0, size - len(hist))) - np.pad(old, (0, size - len(old)))
        return Observation(version=int(now.version),
                           iteration_times=tuple(now.iteration_times),
                           live_workers=tuple(now.live_workers),
                           staleness_p95=staleness_quantile(window, 0.95),
                           staleness_mean=(float(window @ np.arange(size)) / window.sum()
                                           if window.sum() > 0 else None),
                           running_times=tuple(now.running_times) or None,
                           loss=now.loss, noise_scale=self._noise_scale(now, before),
                           batch_sizes=_window_batches(now, before))

    def _noise_scale(self, now, before):
        """The noise scale of the recent rounds: this window's sums plus the earlier
        rounds' faded by `NOISE_MEMORY` every `NOISE_WINDOW` rounds (about the last 100
        rounds count, however often the policy observes: 20 two-gradient rounds alone
        are too noisy to act on); None until they cover `MIN_NOISE_ROUNDS`."""
        if len(now.noise_sums) < 2:
            return None
        rounds = max(0, now.version - before.version)
        window = (*np.subtract(now.noise_sums[:2], (before.noise_sums or (0.0, 0.0))[:2]),
                  rounds)
        self._noise = fade(self._noise, window, rounds)
        signal, trace, rounds = self._noise
        return noise_scale(signal, trace) if rounds >= MIN_NOISE_ROUNDS else None

    def _maybe_allocate(self, now):
        if self.schedule is None:
            return None
        if self._allocated is None:
            self._allocated = now
            return None
        if now.version - self._allocated.version < self.allocate_every:
            return None
        before, self._allocated = self._allocated, now
        sizes = self.schedule.observe_window(
            now.version, np.subtract(now.worker_samples, before.worker_samples),
            np.subtract(now.busy_s, before.busy_s),
            np.subtract(now.worker_pushes, before.worker_pushes or 0)
            if now.worker_pushes else None)
        if sizes is not None:
            self.sizes = list(sizes)
        return sizes
