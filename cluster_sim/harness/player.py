"""Plays a scenario during a real run: speeds on the training clock, events on the wall clock.

`ScenarioPlayer` is the background thread of `cluster_sim.harness.run.run_arm`: it keeps
each worker's in-graph delay (`cluster_sim.slowdown.SlowdownLayer`) or, in black-box mode,
its `DutyCycler` share of wall time at the scenario's speeds, and pauses, kills and
restarts worker processes when the scenario's events are due.
"""

import threading
import time

from cluster_sim.harness.signals import DutyCycler, Signaller

__all__ = ["ScenarioPlayer"]


class ScenarioPlayer(threading.Thread):
    """Keeps the in-graph delays (or, with ``inject = "sigstop"``, a `DutyCycler`'s
    shares of wall time) at the scenario's speeds (on the training clock) and
    plays its events on the wall clock from the start of the run. Each pause gets its own
    signaller process, started when the pause is due (so it signals the worker process
    running then, restarted or not), which also sends the resume: a call blocked on the
    paused worker can hold this process's GIL. Kills and restarts are done from here."""

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
        self._t0 = time.monotonic()

    def _set_speeds(self, speeds):
        if self._cycler is not None:
            self._cycler.set_speeds(speeds)
        else:
            self.slowdown.set_speeds(speeds, self.us_per_sample)

    def run(self):
        speeds = self._speeds
        events = list(self.scenario.events)
        try:
            while not self.stop.wait(0.1):
                now_speeds = self.scenario.speeds_at(self.clock())
                if now_speeds != speeds:
                    speeds = now_speeds
                    self._set_speeds(speeds)
                now = time.monotonic() - self._t0
                while events and events[0].at_s <= now:
                    self._play(events.pop(0), events, now)
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
