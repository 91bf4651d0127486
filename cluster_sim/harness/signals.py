"""Stopping and continuing worker processes from outside, through a helper process.

`Signaller` sends signals on a schedule (the harness's pause events); `DutyCycler` runs
each worker process only part of the time (black-box slowdowns). Both drive the helper
program `cluster_sim.harness.signal_helper`: a TensorFlow call of the chief can hold its
GIL for seconds, which a thread of the chief could not signal through.

Black-box slowdowns: a worker at speed s < 1 is stopped (SIGSTOP) for
``(1 - s) * period_s`` of every ``period_s`` and continued (SIGCONT) for the rest, so it
gets that share of wall time whatever it is doing: computing, waiting for the PS or in
the middle of an RPC. Neither TensorFlow nor ksync can see why it is slow, as with a
throttled or shared machine (the in-graph delay of `cluster_sim.slowdown` is the
white-box alternative). Workers' phases are staggered so they are not all stopped at
once. When the helper's stdin closes (the harness ended, or died) or it is terminated,
it continues every worker before it exits, so no worker is left stopped.

Example:

```python
cycler = DutyCycler([cluster.pid("worker", w) for w in range(4)], period_s=0.2)
cycler.set_speeds([1.0, 1.0, 0.5, 0.25])   # workers 2 and 3 now run half / a quarter
...
cycler.close()

sig = Signaller([(0.0, cluster.pid("worker", 2), "SIGSTOP"),
                 (30.0, cluster.pid("worker", 2), "SIGCONT")])
...                       # training goes on; sig.done() once both are sent
sent = sig.finish()       # [(0.0, pgid, "SIGSTOP"), (30.0, pgid, "SIGCONT")]
```
"""

import json
import subprocess
import sys

__all__ = ["DutyCycler", "Signaller"]

_HELPER = [sys.executable, "-m", "cluster_sim.harness.signal_helper"]


class DutyCycler:
    """Duty-cycle the process groups ``pgids`` (one per worker) at given speeds.

    Args:
      pgids: the process group of each worker (`LocalCluster.pid`).
      period_s: length of one run-then-stop cycle; shorter is smoother but costs more
        signals. A speed of 0 stops the worker for good (until new speeds or `close`).
    """

    def __init__(self, pgids, period_s: float = 0.2):
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self._proc = subprocess.Popen(
            _HELPER + ["duty", json.dumps([int(p) for p in pgids]), str(float(period_s))],
            stdin=subprocess.PIPE)
        self.speeds = [1.0] * len(pgids)

    def set_speeds(self, speeds) -> None:
        """Each worker's share of wall time from now on (1.0 = never stopped)."""
        speeds = [float(s) for s in speeds]
        if len(speeds) != len(self.speeds) or any(not 0.0 <= s for s in speeds):
            raise ValueError(f"need {len(self.speeds)} speeds >= 0, got {speeds}")
        self._proc.stdin.write((json.dumps(speeds) + "\n").encode())
        self._proc.stdin.flush()
        self.speeds = speeds

    def close(self) -> None:
        """Continue every worker and end the helper."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class Signaller:
    """Send ``(at_s, pgid, signal name)`` signals, ``at_s`` seconds from now."""

    def __init__(self, signals):
        signals = sorted((float(at), int(pgid), str(name)) for at, pgid, name in signals)
        self._proc = subprocess.Popen(_HELPER + ["schedule", json.dumps(signals)],
                                      stdout=subprocess.PIPE, text=True)

    def done(self) -> bool:
        """Whether every signal has been sent."""
        return self._proc.poll() is not None

    def finish(self) -> list:
        """Stop (signals not yet sent are not sent); the signals sent, in order."""
        self._proc.kill()
        out, _ = self._proc.communicate()
        return [tuple(json.loads(line)) for line in out.splitlines()]
