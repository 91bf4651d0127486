"""Parse and validate the standard ``TF_CONFIG`` variable with errors that say the fix.

Example:

>>> cfg = TFConfig.parse('{"cluster": {"chief": ["127.0.0.1:2221"], '
...     '"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}, '
...     '"task": {"type": "chief", "index": 0}}')
>>> cfg.task_type, cfg.num_workers
('chief', 1)
"""

import dataclasses
import json
import os

#: Jobs that run a TensorFlow server and wait for the chief.
SERVER_JOBS = ("ps", "worker")
#: Jobs a parameter-server cluster may name.
KNOWN_JOBS = ("chief", "ps", "worker", "evaluator")

_EXAMPLE = ('{"cluster": {"chief": ["host0:2222"], "ps": ["host1:2222"], '
            '"worker": ["host2:2222", "host3:2222"]}, "task": {"type": "worker", "index": 0}}')


@dataclasses.dataclass(frozen=True)
class TFConfig:
    """A validated ``TF_CONFIG``: the cluster (job -> addresses) and this process's task."""

    cluster: dict
    task_type: str
    task_index: int

    @classmethod
    def from_env(cls, env=None) -> "TFConfig":
        env = os.environ if env is None else env
        raw = env.get("TF_CONFIG")
        if not raw:
            raise ValueError("TF_CONFIG is not set. Set it to the cluster and this task, e.g. "
                             f"TF_CONFIG='{_EXAMPLE}'")
        return cls.parse(raw)

    @classmethod
    def parse(cls, raw: str) -> "TFConfig":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"TF_CONFIG is not valid JSON ({err.msg} at character "
                             f"{err.pos}). Expected something like {_EXAMPLE}") from None
        if not isinstance(data, dict):
            raise ValueError(f"TF_CONFIG must be a JSON object, got {type(data).__name__}. "
                             f"Expected something like {_EXAMPLE}")
        cluster = data.get("cluster")
        if not isinstance(cluster, dict) or not cluster:
            raise ValueError('TF_CONFIG has no "cluster" object mapping job names to lists of '
                             f'"host:port" addresses. Expected something like {_EXAMPLE}')
        for job, addresses in cluster.items():
            if job not in KNOWN_JOBS:
                raise ValueError(f'TF_CONFIG cluster names job {job!r}, which a '
                                 f'parameter-server cluster does not use; use only {KNOWN_JOBS}.')
            if (not isinstance(addresses, list) or not addresses
                    or not all(isinstance(a, str) for a in addresses)):
                raise ValueError(f'TF_CONFIG cluster job {job!r} must be a non-empty list of '
                                 f'"host:port" strings, got {addresses!r}.')
            for address in addresses:
                _check_address(job, address)
        _check_distinct(cluster)
        for job in SERVER_JOBS:
            if job not in cluster:
                raise ValueError(f'TF_CONFIG cluster has no {job!r} job; a parameter-server '
                                 f'cluster needs at least one {job} task.')
        if len(cluster.get("chief", [])) > 1:
            raise ValueError("TF_CONFIG cluster lists more than one chief; list exactly one.")
        task = data.get("task")
        if not isinstance(task, dict) or "type" not in task:
            raise ValueError('TF_CONFIG has no "task" object such as {"type": "worker", '
                             '"index": 0} naming this process\'s role.')
        task_type = task["type"]
        if task_type not in cluster:
            raise ValueError(f"TF_CONFIG task type {task_type!r} is not a job of the cluster "
                             f"({sorted(cluster)}).")
        task_index = task.get("index", 0)
        if not isinstance(task_index, int) or isinstance(task_index, bool):
            raise ValueError(f"TF_CONFIG task index must be an integer, got {task_index!r}.")
        if not 0 <= task_index < len(cluster[task_type]):
            raise ValueError(f"TF_CONFIG task index {task_index} is out of range: job "
                             f"{task_type!r} has {len(cluster[task_type])} task(s), indices "
                             f"0..{len(cluster[task_type]) - 1}.")
        return cls(cluster={k: list(v) for k, v in cluster.items()},
                   task_type=task_type, task_index=task_index)

    @property
    def address(self) -> str:
        return self.cluster[self.task_type][self.task_index]

    @property
    def num_workers(self) -> int:
        return len(self.cluster["worker"])

    @property
    def num_ps(self) -> int:
        return len(self.cluster["ps"])

    def to_json(self) -> str:
        return json.dumps({"cluster": self.cluster,
                           "task": {"type": self.task_type, "index": self.task_index}})

    def for_task(self, task_type: str, task_index: int) -> "TFConfig":
        return dataclasses.replace(self, task_type=task_type, task_index=task_index)

    def tasks(self) -> list[tuple[str, int, str]]:
        """Every task of the cluster as (job, index, address), chief first, then ps, worker.

        >>> TFConfig({"ps": ["a:1"], "worker": ["b:2", "c:3"]}, "ps", 0).tasks()
        [('ps', 0, 'a:1'), ('worker', 0, 'b:2'), ('worker', 1, 'c:3')]
        """
        return [(job, i, address) for job in KNOWN_JOBS
                for i, address in enumerate(self.cluster.get(job, ()))]


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (also ``"[v6]:port"``) as ``(host, port)``.

    >>> split_address("[::1]:2222")
    ('::1', 2222)
    """
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _check_distinct(cluster: dict) -> None:
    # Two tasks on one address cannot both listen; TensorFlow would fail obscurely on the
    # second one, or worse, the chief would talk to the wrong task.
    seen = {}
    for job, addresses in cluster.items():
        for i, address in enumerate(addresses):
            if address in seen:
                raise ValueError(f"TF_CONFIG gives {seen[address]} and {job}:{i} the same "
                                 f"address {address!r}; give every task its own host:port.")
            seen[address] = f"{job}:{i}"


def _check_address(job: str, address: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'TF_CONFIG address {address!r} of job {job!r} is not "host:port" '
                         "with a port from 1 to 65535.")
