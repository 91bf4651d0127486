"""Send signals to task process groups on a schedule, from a separate process.

A TensorFlow call blocked on a paused worker can hold the chief's GIL, so a thread of
the chief could never send the SIGCONT; a tiny helper process always can. The helper
prints one JSON line per signal sent, which `Signaller.finish` returns.

Example:

```python
sig = Signaller([(0.0, cluster.pid("worker", 2), "SIGSTOP"),
                 (30.0, cluster.pid("worker", 2), "SIGCONT")])
...                       # training goes on; sig.done() once both are sent
sent = sig.finish()       # [(0.0, pgid, "SIGSTOP"), (30.0, pgid, "SIGCONT")]
```
"""

import json
import subprocess
import sys

_SCRIPT = """
import json, os, signal, sys, time
start = time.monotonic()
for at_s, pgid, name in json.loads(sys.argv[1]):
    time.sleep(max(0.0, start + at_s - time.monotonic()))
    try:
        os.killpg(pgid, getattr(signal, name))
    except ProcessLookupError:
        pass
    print(json.dumps([round(time.monotonic() - start, 2), pgid, name]), flush=True)
"""


class Signaller:
    """Send ``(at_s, pgid, signal name)`` signals, ``at_s`` seconds from now."""

    def __init__(self, signals):
        signals = sorted((float(at), int(pgid), str(name)) for at, pgid, name in signals)
        self._proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, json.dumps(signals)],
                                      stdout=subprocess.PIPE, text=True)

    def done(self) -> bool:
        """Whether every signal has been sent."""
        return self._proc.poll() is not None

    def finish(self) -> list:
        """Stop (signals not yet sent are not sent); the signals sent, in order."""
        self._proc.kill()
        out, _ = self._proc.communicate()
        return [tuple(json.loads(line)) for line in out.splitlines()]
