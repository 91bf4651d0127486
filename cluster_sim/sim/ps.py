"""The simulated parameter servers: what a push and an update cost, and the queue they
wait in.

A push costs each PS task ``push_s + push_s_per_byte * its share of the bytes``, an
update (the optimizer's apply of a committed round) ``apply_s + apply_s_per_byte * its
share of the model's bytes``. The variables are sharded evenly over ``num_ps`` tasks
(as ``FixedShardsPartitioner`` splits them), each task a queue serving its shard's share
of every push and update in arrival order, all in parallel; with even shares the tasks'
queues move in lockstep, so they are simulated as one queue whose service is one
task's share. The per-op part does not shrink with more tasks (each task runs the op on
its shard); the per-byte part does. One PS saturates at ``1 / push_service(bytes)``
pushes/s.

The constants come from real pushes on the local cluster (`cluster_sim.harness.ps_probe`,
fitted by `fit_ps_costs`; ``python -m cluster_sim calibrate --ps-probe``).

Example:

>>> costs = PSCosts(push_s=1e-3, push_s_per_byte=1e-9, apply_s=3e-4)
>>> costs.push_service(4_000_000, num_ps=1), costs.push_service(4_000_000, num_ps=4)
(0.005, 0.002)
>>> queue = PSQueue(costs, num_ps=1)
>>> queue.arrive(0.0, "a", 1_000_000), queue.arrive(0.0, "b", 1_000_000)  # b waits for a
(0.002, None)
>>> queue.done(0.002, update_bytes=0)   # a is applied; b is served next, until 0.004
('b', 0.004)
"""

import collections
import dataclasses

__all__ = ["PSCosts", "PSQueue", "fit_ps_costs", "fit_line"]


@dataclasses.dataclass(frozen=True)
class PSCosts:
    """Seconds a PS task spends per push and per update (see the module docstring)."""

    push_s: float = 0.0
    push_s_per_byte: float = 0.0
    apply_s: float = 0.0
    apply_s_per_byte: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if not getattr(self, f.name) >= 0:
                raise ValueError(f"PS cost {f.name} must be >= 0 seconds, got "
                                 f"{getattr(self, f.name)!r}")

    @property
    def free(self) -> bool:
        """Whether the PS costs nothing (the simulator then skips the queue)."""
        return not any(dataclasses.astuple(self))

    def push_service(self, nbytes: float, num_ps: int = 1) -> float:
        """Seconds one push of ``nbytes`` holds the PS tasks (each serving its share)."""
        return self.push_s + self.push_s_per_byte * nbytes / num_ps

    def apply_service(self, model_bytes: float, num_ps: int = 1) -> float:
        """Seconds one update of a ``model_bytes`` model holds the PS tasks."""
        return self.apply_s + self.apply_s_per_byte * model_bytes / num_ps


class PSQueue:
    """The PS tasks as one first-come, first-served queue (see the module docstring).

    `arrive` a push; when the PS is free it is served at once and `arrive` returns when
    its service ends, else it waits (None). At that time the caller applies the push
    and calls `done` with the bytes of the update it made (0 for none): the update holds
    the PS too, and the next push waiting is served after it. ``busy_s`` sums the time
    the PS spent serving."""

    def __init__(self, costs: PSCosts, num_ps: int = 1):
        if not isinstance(num_ps, int) or num_ps < 1:
            raise ValueError(f"num_ps must be an integer >= 1 (PS tasks), got {num_ps!r}")
        self.costs, self.num_ps = costs, num_ps
        self.waiting = collections.deque()  # (push, bytes) in arrival order
        self.serving = False
        self.free_at = 0.0  # the end of the last update
        self.busy_s = 0.0

    def arrive(self, now: float, push, nbytes: float):
        """A push of ``nbytes`` arrives at ``now``: when its service ends, or None if it
        waits behind others."""
        if self.serving:
            self.waiting.append((push, nbytes))
            return None
        return self._serve(max(now, self.free_at), nbytes)  # after an update under way

    def _serve(self, start: float, nbytes: float) -> float:
        self.serving = True
        service = self.costs.push_service(nbytes, self.num_ps)
        self.busy_s += service
        return start + service

    def update_s(self, update_bytes: float) -> float:
        """Seconds an update of ``update_bytes`` (0: none) holds the PS."""
        return self.costs.apply_service(update_bytes, self.num_ps) if update_bytes else 0.0

    def done(self, now: float, update_bytes: float = 0):
        """The push served until ``now`` was applied, making an update of
        ``update_bytes`` (0: none). Returns ``(next push, when its service ends)``, or
        None with nobody waiting."""
        hold = self.update_s(update_bytes)
        self.busy_s += hold
        self.free_at = now + hold
        self.serving = False
        if not self.waiting:
            return None
        push, nbytes = self.waiting.popleft()
        return push, self._serve(self.free_at, nbytes)


def fit_line(xs, ys) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``ys`` on ``xs``, both clamped at >= 0 (a
    cost is never negative; a negative slope from noise means "no per-byte cost").

    >>> fit_line([0, 1, 2], [1.0, 3.0, 5.0])
    (1.0, 2.0)
    >>> fit_line([1, 2], [2.0, 1.0])   # noise: flat
    (1.5, 0.0)
    """
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError(f"a line needs at least two distinct x values, got {list(xs)}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    if slope < 0:
        return max(0.0, my), 0.0
    return max(0.0, my - slope * mx), slope


def fit_ps_costs(measurements) -> dict:
    """The simulator's PS and network constants from `cluster_sim.harness.ps_probe.measure_pushes`
    results (several sizes; modes ``accumulate`` and ``apply``; a lone worker's runs
    for the network):

    * push service: the PS's CPU seconds per push of the ``accumulate`` runs, a line
      in the bytes pushed (``push_s``, ``push_s_per_byte``);
    * update: the ``apply`` runs' CPU per push minus the ``accumulate`` runs' at the same
      size, a line in the bytes (``apply_s``, ``apply_s_per_byte``);
    * network: a lone worker's wall time per ``accumulate`` step (a pull and a push)
      minus the PS's CPU per push, a line in the bytes (``network_latency_s``, and
      ``network_gbps`` from the slope, half of it per direction, as
      `cluster_sim.sim.speeds.Network` charges a pull and a push): what a worker spends
      on a step's traffic outside the PS's queue.

    >>> ms = [{"mode": m, "workers": 1, "bytes": b, "pushes": 100,
    ...        "ps_cpu_s": 100 * (1e-3 + b * 1e-9 + (m == "apply") * 2e-4),
    ...        "wall_s": 100 * (5e-3 + b * 2e-9)} for m in ("accumulate", "apply")
    ...       for b in (4_000, 4_000_000)]
    >>> {k: round(v, 6) for k, v in fit_ps_costs(ms).items()}
    {'ps_push_s': 0.001, 'ps_push_s_per_byte': 0.0, 'ps_apply_s': 0.0002, 'ps_apply_s_per_byte': 0.0, 'network_latency_s': 0.004, 'network_gbps': 16.0}
    """
    def per_push(mode, key, workers=None):
        out = collections.defaultdict(list)
        for m in measurements:
            if m["mode"] == mode and (workers is None or m["workers"] == workers):
                out[m["bytes"]].append(m[key] / m["pushes"])
        return {b: sum(v) / len(v) for b, v in sorted(out.items())}

    push = per_push("accumulate", "ps_cpu_s")
    apply = per_push("apply", "ps_cpu_s")
    lone = per_push("accumulate", "wall_s", workers=1)
    if len(push) < 2 or len(apply) < 2 or len(lone) < 2:
        raise ValueError("fit_ps_costs needs accumulate and apply measurements of at least "
                         "two sizes, and a lone worker's accumulate runs of two sizes")
    push_s, push_b = fit_line(list(push), list(push.values()))
    both = [b for b in apply if b in push]
    apply_s, apply_b = fit_line(both, [apply[b] - push[b] for b in both])
    sizes = [b for b in lone if b in push]
    lat, net_b = fit_line(sizes, [lone[b] - push[b] for b in sizes])
    return {"ps_push_s": push_s, "ps_push_s_per_byte": push_b, "ps_apply_s": apply_s,
            "ps_apply_s_per_byte": apply_b, "network_latency_s": lat,
            # Gbit/s each way (the slope is a pull's and a push's); None: no per-byte cost.
            "network_gbps": 2 * 8.0 / (net_b * 1e9) if net_b > 0 else None}
