"""Black-box slowdowns: run each worker process only part of the time, from outside.

A worker at speed s < 1 is stopped (SIGSTOP) for ``(1 - s) * period_s`` of every
``period_s`` and continued (SIGCONT) for the rest, so it gets that share of wall time
whatever it is doing: computing, waiting for the PS or in the middle of an RPC. Neither
TensorFlow nor ksync can see why it is slow, as with a throttled or shared machine (the
in-graph delay of `cluster_sim.slowdown` is the white-box alternative). Workers' phases
are staggered so they are not all stopped at once.

A helper process sends the signals (a TensorFlow call of the chief can hold its GIL for
seconds); new speeds are written to its stdin. When its stdin closes (the harness ended,
or died) or it is terminated, it continues every worker before it exits, so no worker is
left stopped.

Example:

```python
cycler = DutyCycler([cluster.pid("worker", w) for w in range(4)], period_s=0.2)
cycler.set_speeds([1.0, 1.0, 0.5, 0.25])   # workers 2 and 3 now run half / a quarter
...
cycler.close()
```
"""

import json
import subprocess
import sys

_SCRIPT = r"""
import json, os, select, signal, sys, time
pgids, period = json.loads(sys.argv[1]), float(sys.argv[2])
speeds = [1.0] * len(pgids)
stopped = [False] * len(pgids)
start = time.monotonic()

def send(w, stop):
    if stopped[w] != stop:
        try:
            os.killpg(pgids[w], signal.SIGSTOP if stop else signal.SIGCONT)
        except ProcessLookupError:
            pass
        stopped[w] = stop

def finish(*_):
    for w in range(len(pgids)):
        send(w, False)
    sys.exit(0)

signal.signal(signal.SIGTERM, finish)
lines = b""
while True:
    now = time.monotonic() - start
    wake = []
    for w, s in enumerate(speeds):
        # Each worker's period starts at its own offset; it runs first, then stops.
        phase = (now + w * period / len(pgids)) % period
        on = s * period
        send(w, s < 1.0 and phase >= on)
        if s < 1.0:
            wake.append((on - phase) if phase < on else (period - phase))
    ready, _, _ = select.select([sys.stdin], [], [], max(0.001, min(wake, default=period)))
    if ready:
        chunk = os.read(sys.stdin.fileno(), 65536)
        if not chunk:
            finish()
        lines += chunk
        *complete, lines = lines.split(b"\n")
        for line in complete:
            speeds = [min(1.0, max(0.0, float(v))) for v in json.loads(line)]
"""


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
            [sys.executable, "-c", _SCRIPT, json.dumps([int(p) for p in pgids]),
             str(float(period_s))], stdin=subprocess.PIPE)
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
