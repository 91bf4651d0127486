"""A real TensorFlow parameter-server cluster of local processes on 127.0.0.1.

Each PS and worker task is a separate ``python -m strategies.server`` process started with
its own ``TF_CONFIG``, exactly as on several machines; this process plays the chief.
Every process is started in its own process group and stopped on ``close()``, on exit of
a ``with`` block (also on exceptions and Ctrl-C) and, as each server watches its parent,
when this process dies.

Example:

```python
import ksync
with ksync.LocalCluster(num_workers=3) as cluster:     # ksync.LocalCluster is LocalCluster
    strategy = ksync.KSyncStrategy(cluster.resolver(), policy=ksync.BSP())
```
"""

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import time

from strategies.launch_net import probe
from strategies.tf_config import TFConfig


def free_ports(count: int) -> list[int]:
    """Ports that were free on 127.0.0.1 a moment ago (bound together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_stat(pid: int) -> list[str]:
    """The fields of /proc/``pid``/stat after the command name (state first); [] once
    the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return []


def wait_for_port(port: int, timeout_s: float, proc=None) -> None:
    """Until something listens on 127.0.0.1:``port`` (``proc``, the server, must not exit)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process for port {port} exited with code "
                               f"{proc.returncode} before listening")
        if probe(f"127.0.0.1:{port}", timeout_s=0.2) is None:
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout_s:.0f} s")


class LocalCluster:
    """Start ``num_ps`` parameter servers and ``num_workers`` workers as local processes."""

    def __init__(self, num_workers: int = 2, num_ps: int = 1, start_timeout_s: float = 60.0,
                 env: dict | None = None):
        if num_workers < 1 or num_ps < 1:
            raise ValueError(f"a cluster needs at least one worker and one PS, got "
                             f"num_workers={num_workers}, num_ps={num_ps}")
        ports = free_ports(1 + num_ps + num_workers)
        addr = [f"127.0.0.1:{p}" for p in ports]
        self.config = TFConfig(
            cluster={"chief": addr[:1], "ps": addr[1:1 + num_ps], "worker": addr[1 + num_ps:]},
            task_type="chief", task_index=0)
        self.start_timeout_s = start_timeout_s
        self._env = env or {}
        self._procs: dict[tuple[str, int], subprocess.Popen] = {}
        self._closed = False
        atexit.register(self.close)
        try:
            for job in ("ps", "worker"):
                for i in range(len(self.config.cluster[job])):
                    self._spawn(job, i)
            for (job, i), proc in self._procs.items():
                wait_for_port(self._port(job, i), start_timeout_s, proc)
        except BaseException:
            self.close()
            raise

    @property
    def num_workers(self) -> int:
        return self.config.num_workers

    def _port(self, job: str, index: int) -> int:
        return int(self.config.cluster[job][index].rpartition(":")[2])

    def _spawn(self, job: str, index: int) -> None:
        env = dict(os.environ)
        env.update({"TF_CONFIG": self.config.for_task(job, index).to_json(),
                    "KSYNC_PARENT_PID": str(os.getpid()),
                    "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
                    "CUDA_VISIBLE_DEVICES": "-1"})
        env.update(self._env)
        self._procs[(job, index)] = subprocess.Popen(
            [sys.executable, "-m", "strategies.server"], env=env,
            stdin=subprocess.DEVNULL, start_new_session=True)

    def resolver(self):
        """A cluster resolver for the chief (this process)."""
        import tensorflow as tf
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.config.cluster), task_type="chief", task_id=0,
            rpc_layer="grpc")

    def tf_config_json(self, job: str = "chief", index: int = 0) -> str:
        return self.config.for_task(job, index).to_json()

    def pid(self, job: str, index: int) -> int:
        return self._procs[(job, index)].pid

    def cpu_seconds(self, job: str | None = None) -> float:
        """CPU time (user + system) the cluster's server processes (of ``job`` only, e.g.
        "ps", if given) have used so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for (task_job, _), proc in self._procs.items():
            if job is not None and task_job != job:
                continue
            fields = _proc_stat(proc.pid)
            if fields:
                total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        return total

    def stopped(self, job: str, index: int) -> bool:
        """Whether the task's process is stopped by a signal (SIGSTOP) right now: a
        signal sent from another process lands when the kernel says so, not when sent."""
        fields = _proc_stat(self._procs[(job, index)].pid)
        return bool(fields) and fields[0] == "T"

    def running(self, job: str, index: int) -> bool:
        """Whether the task's process is alive (paused counts as alive)."""
        return self._procs[(job, index)].poll() is None

    def kill(self, job: str, index: int) -> None:
        """Kill one task at once (SIGKILL), as a machine failure would."""
        proc = self._procs[(job, index)]
        _signal_group(proc, signal.SIGKILL)
        proc.wait()

    def restart(self, job: str, index: int) -> None:
        """Start a task again on its old address after ``kill``."""
        if self.running(job, index):
            raise RuntimeError(f"{job}:{index} is still running; kill it first")
        self._spawn(job, index)
        wait_for_port(self._port(job, index), self.start_timeout_s, self._procs[(job, index)])

    def pause(self, job: str, index: int) -> None:
        _signal_group(self._procs[(job, index)], signal.SIGSTOP)

    def resume(self, job: str, index: int) -> None:
        _signal_group(self._procs[(job, index)], signal.SIGCONT)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        # The strategies on this cluster stop their threads first. Looked up, not
        # imported: a process that never imported the strategy (and TensorFlow) has none.
        strategy_module = sys.modules.get("strategies.ksync_strategy")
        if strategy_module is not None:
            strategy_module.shutdown_strategies_of(self.config.cluster["ps"])
        for proc in self._procs.values():
            _signal_group(proc, signal.SIGCONT)
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self._procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        atexit.unregister(self.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"LocalCluster({json.dumps(self.config.cluster)})"


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None and sig != signal.SIGKILL:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
