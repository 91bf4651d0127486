"""Plays a scenario during a real run: speeds and events on the training clock.

`ScenarioPlayer` is the background thread of `cluster_sim.harness.run.run_arm`: it keeps
each worker's in-graph delay (`cluster_sim.slowdown.SlowdownLayer`) or, in black-box mode,
its `DutyCycler` share of wall time at the scenario's speeds, and pauses, kills and
restarts worker processes when the scenario's events are due. Both follow the training
clock (wall time in training steps, not in evaluations): the clock that times the run and
its time to target, and the one the simulator (`cluster_sim.sim.speeds`) plays the same
scenario on, so "worker 1 paused at 20 s" means the same in both however often a run
evaluates.
"""

import threading

from cluster_sim.harness.signals import DutyCycler, Signaller

__all__ = ["ScenarioPlayer"]


class ScenarioPlayer(threading.Thread):
    """Keeps the in-graph delays (or, with ``inject = "sigstop"``, a `DutyCycler`'s
    shares of wall time) at the scenario's speeds and plays its events, both on the
    training clock ``clock()``. Each pause gets its own signaller process, started when the
    pause is due (so it signals the worker process running then, restarted or not), which
    also sends the resume after the pause's duration: a call blocked on the paused worker
    can hold this process's GIL. Kills and restarts are done from here. ``cluster`` is
    used for events and black-box mode only.

    `tick` is one step of the thread's loop (every 0.1 s): what it applies at training
    time t is ``scenario.speeds_at(t)``, exactly what the simulator's `ScenarioSpeeds`
    gives for time t."""

    _NAMES = {"SIGSTOP": "pause", "SIGCONT": "resume"}

    def __init__(self, cluster, scenario, clock, slowdown, us_per_sample):
        super().__init__(daemon=True)
        self.cluster, self.scenario, self.clock = cluster, scenario, clock
        self.slowdown, self.us_per_sample = slowdown, us_per_sample
        self.stop = threading.Event()
        self.applied = []  # (seconds into the run, worker, action)
        self.error = None
        self._signallers = []  # (seconds into the run, worker, Signaller)
        self._cycler = None
        if scenario.inject == "sigstop":
            # Every worker computes at the reference speed; the duty cycle slows it.
            slowdown.set_speeds([1.0] * scenario.num_workers, us_per_sample)
            self._cycler = DutyCycler([cluster.pid("worker", w)
                                       for w in range(scenario.num_workers)])
        self._speeds = scenario.speeds_at(0.0)
        self._set_speeds(self._speeds)
        self._events = list(scenario.events)

    def _set_speeds(self, speeds):
        if self._cycler is not None:
            self._cycler.set_speeds(speeds)
        else:
            self.slowdown.set_speeds(speeds, self.us_per_sample)

    @property
    def speeds(self) -> list[float]:
        """The speeds applied now (what the delays or the duty cycle follow)."""
        return list(self._speeds)

    def tick(self) -> float:
        """Apply the speeds and play the events due at the training clock's time now;
        returns that time."""
        now = self.clock()
        speeds = self.scenario.speeds_at(now)
        if speeds != self._speeds:
            self._speeds = speeds
            self._set_speeds(speeds)
        while self._events and self._events[0].at_s <= now:
            self._play(self._events.pop(0), self._events, now)
        return now

    def run(self):
        try:
            while not self.stop.wait(0.1):
                self.tick()
        except Exception as err:  # pylint: disable=broad-except
            self.error = err  # raised by finish(), in the training thread

    def _play(self, event, later, now):
        w = event.worker
        if event.action == "pause":
            resume = next(e.at_s for e in later if e.worker == w and e.action == "resume")
            pid = self.cluster.pid("worker", w)
            self._signallers.append((now, w, Signaller(
                [(0.0, pid, "SIGSTOP"), (max(0.0, resume - now), pid, "SIGCONT")])))
        elif event.action == "kill":
            self.cluster.kill("worker", w)
            self.applied.append((round(now, 2), w, "kill"))
        elif event.action == "restart":
            self.cluster.restart("worker", w)
            self.applied.append((round(now, 2), w, "restart"))
        # "resume" is sent by its pause's signaller.

    def finish(self):
        self.stop.set()
        self.join()
        if self._cycler is not None:
            self._cycler.close()
        for started, w, signaller in self._signallers:
            for at_s, _pgid, name in signaller.finish():
                self.applied.append((round(started + at_s, 2), w, self._NAMES[name]))
        self.applied.sort()
        for w in range(self.cluster.num_workers):  # leave every worker running
            self.cluster.resume("worker", w)
            if not self.cluster.running("worker", w):
                self.cluster.restart("worker", w)
        if self.error is not None:
            raise RuntimeError(f"scenario {self.scenario.name!r}: playing its events failed: "
                               f"{self.error}") from self.error
