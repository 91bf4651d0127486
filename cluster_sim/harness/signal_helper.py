"""The helper process that stops and continues worker process groups for the harness.

A TensorFlow call blocked on a paused worker can hold the chief's GIL for seconds, so a
thread of the chief could never send the SIGCONT in time; this small process always can.
It imports only the standard library, so it starts at once. Two modes:

``python -m cluster_sim.harness.signal_helper schedule SIGNALS``
    sends ``SIGNALS`` (JSON ``[[at_s, pgid, "SIGSTOP"], ...]``, sorted) ``at_s`` seconds
    after it started, printing one JSON line ``[at_s, pgid, name]`` per signal sent
    (`cluster_sim.harness.signals.Signaller`).
``python -m cluster_sim.harness.signal_helper duty PGIDS PERIOD_S``
    duty-cycles the process groups ``PGIDS`` (a JSON list, one per worker): a worker at
    speed s < 1 is stopped for ``(1 - s) * PERIOD_S`` of every ``PERIOD_S``. New speeds
    come on stdin as one JSON list per line; when stdin closes or the helper is
    terminated it continues every worker before it exits
    (`cluster_sim.harness.signals.DutyCycler`).

Example (a process group that does not exist is skipped):

>>> import json, subprocess, sys
>>> out = subprocess.run([sys.executable, "-m", "cluster_sim.harness.signal_helper",
...                       "schedule", json.dumps([[0.0, 2**22 + 1, "SIGCONT"]])],
...                      capture_output=True, text=True, check=True).stdout
>>> json.loads(out)[1:]
[4194305, 'SIGCONT']
"""

import json
import os
import select
import signal
import sys
import time


def send(pgid: int, name: str) -> None:
    """Signal ``name`` (e.g. "SIGSTOP") to process group ``pgid``; gone groups are skipped."""
    try:
        os.killpg(pgid, getattr(signal, name))
    except ProcessLookupError:
        pass


def schedule(signals) -> None:
    """Send each ``(at_s, pgid, name)`` at ``at_s`` seconds from now, reporting each."""
    start = time.monotonic()
    for at_s, pgid, name in signals:
        time.sleep(max(0.0, start + at_s - time.monotonic()))
        send(pgid, name)
        print(json.dumps([round(time.monotonic() - start, 2), pgid, name]), flush=True)


def duty_cycle(pgids, period: float) -> None:
    """Run each worker its speed's share of every ``period``, speeds read from stdin."""
    speeds = [1.0] * len(pgids)
    stopped = [False] * len(pgids)
    start = time.monotonic()

    def set_stopped(w, stop):
        if stopped[w] != stop:
            send(pgids[w], "SIGSTOP" if stop else "SIGCONT")
            stopped[w] = stop

    def finish(*_):
        for w in range(len(pgids)):
            set_stopped(w, False)
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    pending = b""
    while True:
        now = time.monotonic() - start
        wake = []
        for w, s in enumerate(speeds):
            # Each worker's period starts at its own offset; it runs first, then stops.
            phase = (now + w * period / len(pgids)) % period
            on = s * period
            set_stopped(w, s < 1.0 and phase >= on)
            if s < 1.0:
                wake.append((on - phase) if phase < on else (period - phase))
        ready, _, _ = select.select([sys.stdin], [], [], max(0.001, min(wake, default=period)))
        if ready:
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                finish()
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                speeds = [min(1.0, max(0.0, float(v))) for v in json.loads(line)]


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "schedule":
        schedule(json.loads(args[1]))
    elif len(args) == 3 and args[0] == "duty":
        duty_cycle(json.loads(args[1]), float(args[2]))
    else:
        print("usage: python -m cluster_sim.harness.signal_helper "
              "schedule SIGNALS | duty PGIDS PERIOD_S", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
