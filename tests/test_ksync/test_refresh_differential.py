"""The simulator and the strategy's coordinator make the same rule decisions and gate
answers at the same moments (issue 48, "one loop, one clock").

The simulator (`cluster_sim.sim.engine.Simulation`) runs a ``pause`` and a ``churn``
scenario; its pushes (when, which worker, the version its gradient read) are then
replayed through `Coordinator` below, which follows `strategies.coordinator`'s
`_GatedClosureQueue` protocol on its pure parts, each its own object here: a
`ksync.controller.RefreshClock` asked at every worker's call for a step (its first
one included) and by every waiting worker's re-check after ``idle_s`` without a
notification, a `ksync.RuleController` refreshed when the clock says, and
`ksync.UpdateState.gate_opens` asked on the PS's state by the worker that finished a
step and by every waiting worker at each notification (a finished step or a
refresh). What the simulator does differently (one re-check event for all the waiting
workers, gate answers only at a commit or a rule change) must come to the same
decisions: the refreshes (time, K), the gate's answer to each worker that finished a
step, and each release of a waiting worker.

The rules here (BSP and K-sync) decide on the version and the live workers alone, so
the replay's measurement needs nothing the simulator measured but the kills (which the
coordinator learns from TensorFlow and the replay from the scenario).
"""

import pytest

import ksync
from ksync.controller import RefreshClock
from cluster_sim.sim.engine import SimConfig, Simulation

N = 4
# Steps of about 1 s (speed 1) to 4 s (0.25): the scenarios' pause (worker 2, 10-30 s)
# and kill (worker 3, 20-45 s) each span several rounds and many idle re-checks.
CONFIG = dict(num_workers=N, us_per_sample=30000.0, max_pushes=None, max_time_s=60.0,
              stop_at_target=False, eval_every=10_000, hidden=(8,), step_jitter=0.1)


def simulate(policy, scenario):
    """The simulation's pushes, refreshes, gate answers and releases, recorded by
    wrapping its own methods (each still runs as it is)."""
    sim = Simulation(policy, SimConfig(scenario=scenario, **CONFIG))
    log = {"pushes": [], "refreshes": [], "answers": [], "releases": []}
    apply_push, refresh, release_waiting = sim._apply_push, sim._refresh, sim._release_waiting
    may_start = sim.state.may_start

    def logged_apply_push(w):
        log["pushes"].append((sim.clock.now, w, int(sim.read_version[w]),
                              float(len(sim.rows[w]))))
        log["pushing"] = w
        committed = apply_push(w)
        log["pushing"] = None
        return committed

    def logged_refresh():
        refresh()
        log["refreshes"].append((sim.clock.now, sim.rule.k))

    def logged_may_start(w, commits_in_graph=False):
        answer = may_start(w, commits_in_graph)
        if w == log.get("pushing"):
            log["answers"].append((sim.clock.now, w, answer))
        return answer

    def logged_release_waiting():
        before = set(sim.waiting)
        release_waiting()
        log["releases"] += [(sim.clock.now, w) for w in sorted(before - sim.waiting)]

    sim._apply_push, sim._refresh = logged_apply_push, logged_refresh
    sim._release_waiting = logged_release_waiting
    sim.state.may_start = logged_may_start
    sim.run()
    return sim, log


class Coordinator:
    """`_GatedClosureQueue`'s protocol without threads, on the pure parts it asks."""

    def __init__(self, policy, killed):
        self.controller = ksync.RuleController(policy, N)
        self.clock = RefreshClock(self.controller)
        self.state = ksync.UpdateState(N, self.controller.rule)
        self.killed = killed
        self.waiting = set()
        self.log = {"refreshes": [], "answers": [], "releases": []}

    def live(self, t):
        return tuple(w for w in range(N) if not self.killed(w, t))

    def refresh(self, t):
        """`KSyncStrategy.refresh_rule`: measure, decide, set the PS's rule; then the
        clock is told, and the waiting workers are notified."""
        live = self.live(t)
        decision = self.controller.refresh(ksync.Measurement(
            version=self.state.version, live_workers=live))
        if decision.changed:
            self.state.set_rule(decision.rule)
        self.clock.refreshed(live, now=t)
        self.log["refreshes"].append((t, decision.rule.k))

    def gate(self, w):
        s = self.state
        return ksync.UpdateState.gate_opens(wait=s.rule.wait, k=s.rule.k, version=s.version,
                                            pending=s.pending, joined=s.contributed[w])

    def notify(self, t):
        """Each waiting worker's thread wakes at a new generation and asks the gate."""
        for w in sorted(self.waiting):
            if self.gate(w):
                self.waiting.discard(w)
                self.log["releases"].append((t, w))

    def get(self, t, w):
        """Worker ``w`` asks for its next step (`_wait_at_gate`)."""
        if self.clock.step_finished(now=t, live=self.live(t)):
            self.refresh(t)
        self.notify(t)
        open_ = self.gate(w)
        if not open_:
            self.waiting.add(w)
        return open_

    def until(self, t):
        """Time passes to ``t``: a waiting worker not notified for ``idle_s`` asks the
        clock whether an idle refresh is due (steps are always queued here)."""
        while self.waiting:
            at = self.clock.next_idle_check()
            if at > t:
                return
            if self.clock.idle_due(at, steps_queued=True):
                self.refresh(at)
                self.notify(at)

    def replay(self, pushes, end):
        """The simulated run's ``pushes`` (time, worker, version read, samples), then
        time passes to the run's ``end``."""
        for w in range(N):
            self.get(0.0, w)
        for t, w, version_read, samples in pushes:
            self.until(t)
            self.state.push(worker=w, version_read=version_read, samples=samples)
            self.log["answers"].append((t, w, self.get(t, w)))
        self.until(end)


@pytest.mark.parametrize("scenario", ["pause", "churn"])
@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.KSync(k=3)], ids=["bsp", "ksync3"])
def test_the_simulator_decides_as_the_coordinator(policy, scenario, record_property):
    sim, log = simulate(policy, scenario)
    coordinator = Coordinator(policy, sim.speed_model.killed)
    coordinator.replay(log["pushes"], end=sim.clock.now)
    got = coordinator.log
    assert got["refreshes"] == log["refreshes"]
    assert got["answers"] == log["answers"]
    assert sorted(got["releases"]) == sorted(log["releases"])
    assert coordinator.state.version == sim.state.version
    assert coordinator.controller.history == sim.controller.history
    # Refreshes at no push (and not the first, at a worker's first call for a step).
    idle = [t for t, _k in log["refreshes"][1:] if t not in {p[0] for p in log["pushes"]}]
    record_property("pushes", len(log["pushes"]))
    record_property("refreshes", len(log["refreshes"]))
    record_property("idle_refreshes", len(idle))
    if isinstance(policy, ksync.BSP):
        # Every worker waits for the paused or dead one: the rule is refreshed on the
        # idle re-checks, as the coordinator's waiting threads do (about 2 a second).
        assert len(idle) > 10
    if scenario == "churn":
        ks = [k for _t, k in log["refreshes"]]
        if isinstance(policy, ksync.BSP):
            # K follows the live workers: 3 while worker 3 is dead, 4 again after.
            assert 3 in ks and ks[-1] == 4
            first3 = next(t for t, k in log["refreshes"] if k == 3)
            record_property("bsp_k3_after_kill_s", first3 - 20.0)
            assert 20.0 <= first3 <= 20.0 + 2 * sim.refresh_clock.idle_s
