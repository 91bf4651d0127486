"""CPU time of a local cluster's processes, split by what their threads do.

Linux accounts CPU per thread (``/proc/<pid>/task/<tid>/stat``), and TensorFlow names its
threads: ``tf_Compute``/``tf_inter_op``... threads run ops, gRPC's ``event_engine``/``grpc``
threads move tensors and RPCs. In the chief, Python names its own threads: Keras' `fit`
loop dispatches steps from the main thread, the `ClusterCoordinator` runs each step (the
remote call, and ksync's gate) on one ``WorkerClosureProcessingLoop`` thread per worker.
Differences of these parts between two configurations say where a step's extra cost
goes, with no profiler and nothing added to the step.

Example:

```python
before = cluster_parts(cluster)
model.fit(...)
spent = {part: s - before.get(part, 0.0) for part, s in cluster_parts(cluster).items()}
# {"chief:dispatch": 1.9, "chief:steps": 2.4, "ps:ops": 3.1, "ps:rpc": 1.2, ...}
```
"""

import collections
import os
import threading

#: (part, thread name prefixes) for server processes, first match wins
_SERVER_PARTS = (("ops", ("tf_",)), ("rpc", ("event_engine", "grpc", "default-execut")))
#: (part, Python thread name prefixes) for the chief's own threads
_CHIEF_PARTS = (("dispatch", ("MainThread",)),
                ("steps", ("WorkerClosureProcessingLoop",)),
                ("ksync", ("ksync-",)))
#: every part a process of each role reports, in print order
PARTS = {"chief": ("dispatch", "steps", "ksync", "runtime"),
         "worker": ("ops", "rpc", "other"), "ps": ("ops", "rpc", "other")}


def thread_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU seconds user + system) for each thread of ``pid``
    alive now; {} once the process is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended in between
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rpartition(")")[2].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def _part(name: str, parts, default: str) -> str:
    for part, prefixes in parts:
        if name.startswith(prefixes):
            return part
    return default


def server_parts(pid: int) -> collections.Counter:
    """CPU seconds of a server process by part: "ops", "rpc", "other"."""
    spent = collections.Counter()
    for name, seconds in thread_seconds(pid).values():
        spent[_part(name, _SERVER_PARTS, "other")] += seconds
    return spent


def chief_parts() -> collections.Counter:
    """CPU seconds of this process (the chief) by part: "dispatch" (the main thread:
    Keras' loop), "steps" (the coordinator's closure threads), "ksync" (ksync's own
    threads) and "runtime" (TensorFlow's and gRPC's threads)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    spent = collections.Counter()
    for tid, (_, seconds) in thread_seconds(os.getpid()).items():
        name = names.get(tid)
        spent["runtime" if name is None else _part(name, _CHIEF_PARTS, "runtime")] += seconds
    return spent


def cluster_parts(cluster) -> dict[str, float]:
    """CPU seconds so far of the chief and every server of ``cluster`` (a
    `cluster_sim.local_cluster.LocalCluster`), by "role:part" (roles summed over
    tasks). Threads that ended take their time with them: compare only across spans
    whose threads live throughout (a running cluster and coordinator)."""
    spent = {f"chief:{part}": s for part, s in chief_parts().items()}
    for job in ("worker", "ps"):
        for index in range(len(cluster.config.cluster[job])):
            for part, seconds in server_parts(cluster.pid(job, index)).items():
                spent[f"{job}:{part}"] = spent.get(f"{job}:{part}", 0.0) + seconds
    return spent
