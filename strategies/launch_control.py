"""The shutdown channel between the chief's launcher and the ps / worker launchers.

TensorFlow servers have no shutdown RPC: once started they serve forever. So the chief's
launcher serves a tiny read-only HTTP status endpoint on the *control port* (the chief's
TensorFlow port + 1000 by default, or ``KSYNC_CONTROL_PORT`` / ``--control-port``, the
same on every task), and every ps / worker launcher polls it twice a second:

* ``starting`` / ``running``: keep serving;
* ``done``: the chief's script has ended: exit (0 if the script succeeded, 1 if not, so
  that a restart-on-failure policy restarts the whole job together);
* unreachable for longer than a grace period after it was once seen: the chief's launcher
  died without saying so (machine lost, ``kill -9``): exit 3 rather than serve forever.

Servers pull rather than the chief pushing because a pull also notices a chief that
vanished, needs one extra port on one machine only, and a server started late still
learns the state. The chief records which tasks fetched ``done`` and waits for them.

Example (both sides in one process):

>>> server = ControlServer(0, expected=["ps:0"]).start()
>>> watch = ChiefWatch(f"127.0.0.1:{server.port}", "ps:0")
>>> watch.check() is None                  # chief running: keep serving
True
>>> server.finish(exit_code=0)
>>> watch.check()[0]                       # chief done: exit 0
0
>>> server.wait_acknowledged(timeout_s=1)  # nobody missing
[]
>>> server.close()
"""

import errno
import json
import os
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler

from strategies.tf_config import TFConfig, split_address

# The launcher's exit codes (`ksync-launch --help` lists them).
EXIT_SERVER_CHIEF_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

#: Default distance of the control port from the chief's TensorFlow port.
CONTROL_PORT_OFFSET = 1000
#: Environment variable overriding the control port (must agree on every task).
CONTROL_PORT_ENV = "KSYNC_CONTROL_PORT"
_PATH = "/ksync/v1/status"
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def control_address(config: TFConfig, port: int | None = None, env=None) -> str:
    """``host:port`` of the chief launcher's control endpoint for this cluster.

    ``port`` (from ``--control-port``) wins over ``KSYNC_CONTROL_PORT``, which wins over
    the chief's port + 1000. Raises ValueError when the cluster has no chief or when the
    control port collides with a TensorFlow task's address.

    >>> cfg = TFConfig.parse('{"cluster": {"chief": ["h0:2222"], "ps": ["h1:2222"], '
    ...                      '"worker": ["h2:2222"]}, "task": {"type": "ps"}}')
    >>> control_address(cfg, env={})
    'h0:3222'
    """
    env = os.environ if env is None else env
    if "chief" not in config.cluster:
        raise ValueError(
            'TF_CONFIG cluster has no "chief" job. The chief runs the training script and '
            "tells the ps and worker tasks when training is over; add exactly one, e.g. "
            '"chief": ["host0:2222"].')
    host, chief_port = split_address(config.cluster["chief"][0])
    source = "--control-port"
    if port is None and env.get(CONTROL_PORT_ENV):
        source = CONTROL_PORT_ENV
        try:
            port = int(env[CONTROL_PORT_ENV])
        except ValueError:
            raise ValueError(f"{CONTROL_PORT_ENV}={env[CONTROL_PORT_ENV]!r} is not a port "
                             "number; set it to a free port from 1 to 65535.") from None
    if port is None:
        source = "the default control port (chief port + 1000)"
        port = chief_port + CONTROL_PORT_OFFSET
        if port > 65535:
            port = chief_port - CONTROL_PORT_OFFSET
    if not 0 < port < 65536:
        raise ValueError(f"control port {port} (from {source}) is not from 1 to 65535.")
    for job, index, address in config.tasks():
        other_host, other_port = split_address(address)
        same_host = other_host == host or {other_host, host} <= _LOOPBACK
        if same_host and other_port == port:
            raise ValueError(
                f"control port {port} (from {source}) is also the TensorFlow port of "
                f"{job}:{index} ({address}). Pick another with {CONTROL_PORT_ENV}=PORT (or "
                "--control-port PORT), the same on every task.")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Server(socketserver.ThreadingTCPServer):
    # Plain TCPServer, not http.server.HTTPServer: the latter resolves the machine's FQDN
    # at bind time, which can stall for seconds where DNS is unreachable.
    allow_reuse_address = True
    daemon_threads = True


class ControlServer:
    """The chief side: serves the job's state; records which tasks have seen ``done``."""

    def __init__(self, port: int, expected: list[str]):
        self.requested_port = port
        self.expected = list(expected)
        self._lock = threading.Lock()
        self._state = {"ksync": 1, "state": "starting", "exit_code": None, "reason": None}
        self._seen: set[str] = set()
        self._acknowledged: set[str] = set()
        self._changed = threading.Condition(self._lock)
        self._server = None

    def start(self) -> "ControlServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path != _PATH:
                    self.send_error(404)
                    return
                task = urllib.parse.parse_qs(url.query).get("task", [""])[0]
                body = json.dumps(owner._answer(task)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass  # polls twice a second per task would flood the chief's output

        errors = []
        # Dual-stack IPv6 first (accepts IPv4 too), plain IPv4 where IPv6 is missing.
        for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            server_class = type("_Bound", (_Server,), {"address_family": family})
            try:
                self._server = server_class((host, self.requested_port), Handler)
                break
            except OSError as err:
                errors.append(err)
                if err.errno == errno.EADDRINUSE:  # the other family will not help
                    break
        if self._server is None:
            raise ValueError(
                f"the chief launcher cannot listen on control port {self.requested_port}: "
                f"{errors[-1].strerror}. Stop whatever uses it (`ss -ltnp 'sport = "
                f":{self.requested_port}'`) or choose another with {CONTROL_PORT_ENV}=PORT, "
                "the same on every task.")
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                         name="ksync-control", daemon=True).start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def _answer(self, task: str) -> dict:
        with self._lock:
            self._seen.add(task)
            if self._state["state"] == "done":
                self._acknowledged.add(task)
            self._changed.notify_all()
            return dict(self._state)

    def set_running(self) -> None:
        with self._lock:
            self._state["state"] = "running"

    def finish(self, exit_code: int, reason: str = "the training script ended") -> None:
        """Tell every task that training is over (with the script's exit code)."""
        with self._lock:
            self._state.update(state="done", exit_code=int(exit_code), reason=reason)
            self._changed.notify_all()

    def seen(self) -> set[str]:
        with self._lock:
            return set(self._seen)

    def wait_acknowledged(self, timeout_s: float) -> list[str]:
        """Wait until every expected task fetched ``done``; return those that did not."""
        return self._wait(self._acknowledged, self.expected, timeout_s)

    def wait_seen(self, tasks: list[str], timeout_s: float) -> list[str]:
        """Wait until each of ``tasks`` has polled at least once; return those that did not."""
        return self._wait(self._seen, tasks, timeout_s)

    def _wait(self, done: set, tasks: list[str], timeout_s: float) -> list[str]:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                missing = [t for t in tasks if t not in done]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self._changed.wait(left)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class ChiefWatch:
    """The ps / worker side: polls the chief's launcher and says when to stop serving.

    ``check()`` returns None to keep serving, or ``(exit_code, message)`` to stop.
    ``timeout_s`` bounds the wait for a chief never seen (None: wait as long as it takes,
    since a chief may legitimately start much later); ``grace_s`` bounds how long a chief
    once seen may stay unreachable.
    """

    def __init__(self, address: str, task: str, timeout_s: float | None = None,
                 grace_s: float = 30.0, request_timeout_s: float = 1.0):
        host, port = split_address(address)
        host = f"[{host}]" if ":" in host else host
        self.url = f"http://{host}:{port}{_PATH}?task={urllib.parse.quote(task)}"
        self.address = address
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.request_timeout_s = request_timeout_s
        self.started = time.monotonic()
        self.last_seen = None
        self.last_error = None

    def _fetch(self) -> dict | None:
        # No proxy: a cluster-internal address must never be sent through HTTP_PROXY.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.url, timeout=self.request_timeout_s) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError) as err:
            self.last_error = getattr(err, "reason", None) or err
            return None
        if not isinstance(answer, dict) or answer.get("ksync") != 1:
            self.last_error = "it answered, but not as a ksync launcher"
            return None
        return answer

    def check(self) -> tuple[int, str] | None:
        answer = self._fetch()
        now = time.monotonic()
        if answer is not None:
            self.last_seen, self.last_error = now, None
            if answer.get("state") == "done":
                code = answer.get("exit_code")
                why = answer.get("reason") or "training is over"
                if code == 0:
                    return 0, f"the chief says {why}"
                return EXIT_SERVER_CHIEF_FAILED, f"the chief says {why} (exit code {code})"
            return None
        if self.last_seen is not None:
            if now - self.last_seen > self.grace_s:
                return EXIT_UNREACHABLE, (
                    f"the chief's launcher at {self.address} has been unreachable for "
                    f"{now - self.last_seen:.0f} s ({self.last_error}) without saying "
                    "training is over; assuming it died")
        elif self.timeout_s is not None and now - self.started > self.timeout_s:
            return EXIT_UNREACHABLE, (
                f"the chief's launcher at {self.address} was not reachable within "
                f"{self.timeout_s:g} s ({self.last_error}). Start the chief with "
                "ksync-launch, check its address in TF_CONFIG, and that "
                f"{CONTROL_PORT_ENV} (if set) is the same on every task")
        return None
