"""What the chief knows of the PS's gate state without reading it.

The coordinator's gate (`strategies.coordinator`) asks the PS whether a worker's round
has committed (`PSUpdateState.gate_state`, one remote call). `GateCache` keeps the last
answer (a `GateSnapshot`) and the pushes of the steps finished since, and answers three
questions from them with no call: the worker surely waits (`surely_waits`), it is free
since the last read (`free_since_read`), or, under BSP, its round has surely committed
(`counted_free`, which moves the snapshot on by one round). Pure Python, no clock and
no lock of its own: the coordinator passes the time and calls it under its snapshot
lock.

Example: three workers under BSP; a read finds the round of version 0 empty, each
worker then pushes from a step begun after the read, and the round has surely
committed.

>>> cache = GateCache(num_workers=3)
>>> gate = dict(version=0, pending=0, k=3, complete=False, nonfinite=0,
...             contributed=[-1, -1, -1])
>>> cache.record_read(generation=0, pushes=cache.begin_read(), gate=gate, read_end=1.0,
...                   refreshes=0)
>>> cache.surely_waits(0, k=3)
False
>>> for worker in range(3):
...     cache.step_ended(worker, pushes=1, began=2.0)
>>> cache.surely_waits(0, k=3)        # three pushes since the read may fill the round
False
>>> cache.counted_free(0, wait=True, k=3, live=3, generation=3, refreshes=0, now=5.0)
True
>>> cache.snapshot.gate["version"], cache.snapshot.counted
(1, 1)
"""

import collections

#: rounds the gate may follow by counting pushes before it reads the PS again. A
#: gradient the PS dropped (non-finite) makes a counted commit wrong; the next read
#: finds that out, so this bounds the rounds such a guess can stay wrong.
COUNTED_ROUNDS = 8


class GateSnapshot(collections.namedtuple(
        "GateSnapshot", "generation pushes gate read_end refreshes counted")):
    """The gate as last known: ``gate`` (`PSUpdateState.gate_state`) as read at step
    ``generation`` with ``pushes`` pushes counted, the read ending at monotonic time
    ``read_end``, after ``refreshes`` rule refreshes, and moved on by ``counted`` rounds
    counted since that read (`GateCache.counted_free`)."""

    def let_through(self, push) -> bool:
        """Whether ``push`` (a worker's last push: pushes counted after it, when its
        step began) came after this snapshot from a step begun after it."""
        return push is not None and push[0] > self.pushes and push[1] >= self.read_end


class GateCache:
    """The last read of the PS's gate state and the pushes counted since (see the
    module docstring)."""

    def __init__(self, num_workers: int):
        self.num_workers = num_workers
        self.snapshot = None  # a GateSnapshot, None before the first read
        # Pushes of finished steps, counted where the step's function is known to push
        # exactly once (`KSyncStrategy.pushes_per_call`); None once a step whose
        # pushes are not known has finished since.
        self.pushes = 0
        # Each worker's last push: (self.pushes after it, when the step of it began).
        self.last_push = [None] * num_workers

    def step_ended(self, worker: int, pushes, began: float) -> None:
        """``worker`` finished a step begun at ``began`` that pushed ``pushes``
        gradients (None: not known)."""
        if pushes == 1 and self.pushes is not None:
            self.pushes += 1
            self.last_push[worker] = (self.pushes, began)
        elif pushes != 0:
            self.pushes = None  # unknown from now on: every check reads
            self.last_push[worker] = None

    def fresh(self, seen: int) -> bool:
        """Whether the snapshot was read no earlier than step generation ``seen``."""
        return self.snapshot is not None and self.snapshot.generation >= seen

    def begin_read(self) -> int:
        """Before a read of the PS: the pushes counted that the read will stand for
        (a read sees every push of the steps finished so far, so an unknown count
        starts again from it)."""
        if self.pushes is None:
            self.pushes, self.last_push = 0, [None] * self.num_workers
        return self.pushes

    def record_read(self, generation: int, pushes: int, gate: dict, read_end: float,
                    refreshes: int) -> None:
        """The PS's ``gate`` state, read from generation ``generation`` (``pushes``:
        `begin_read`'s count) and ending at ``read_end``."""
        self.snapshot = GateSnapshot(generation, pushes, gate, read_end, refreshes, 0)

    def free_since_read(self, worker: int) -> bool:
        """Whether ``worker`` may start, known without reading the PS: the last read
        found it outside the open round and it has pushed nothing since; or, before
        any read, none of its steps has pushed (only a worker's own push puts it into
        a round).

        The second case is a worker's first steps, which pass the gate with no read
        (nothing was scheduled when it asked). In TensorFlow's ``testAsyncWaitIsNoOp``
        their steps push nothing and a worker fails meanwhile: without it, the live
        worker waited for a read that the rebuild forbade, and the rebuild waited for
        a worker restarted only after those steps. Its one blind spot is a checkpoint
        restored with this worker's gradient in the open round (`KSyncCheckpoint`
        saves the round): the worker may then push a second gradient into it, as after
        a gradient dropped as non-finite (`counted_free`), until the next read.

        >>> cache = GateCache(num_workers=2)
        >>> cache.step_ended(0, pushes=0, began=1.0)
        >>> cache.free_since_read(0), cache.free_since_read(1)
        (True, True)
        >>> cache.step_ended(1, pushes=1, began=1.0)  # worker 1 may be in the round
        >>> cache.free_since_read(0), cache.free_since_read(1)
        (True, False)
        """
        snapshot, mine = self.snapshot, self.last_push[worker]
        if self.pushes is None:
            return False
        if snapshot is None:
            return mine is None
        gate = snapshot.gate
        return int(gate["contributed"][worker]) != int(gate["version"]) and \
            (mine is None or mine[0] <= snapshot.pushes)

    def surely_waits(self, worker: int, k: int) -> bool:
        """Whether ``worker`` must wait, known without reading the PS: its last step
        began after the last read and pushed one gradient, and the pushes since that
        read cannot have filled the round open then (pending + pushes since < ``k``),
        so its gradient was computed at that round's version and joined it (with
        `counted_free`, a read in several rounds under BSP instead of one a step). A
        step that began before the read may have computed a gradient the round's
        commit made stale, which the PS dropped: its worker is free to start, and
        guessing "wait" would idle it until some other step ends, out of phase with the
        rounds (seen on 8 workers under K-sync: a fast worker whose gradients kept
        arriving just after the round closed, its place taken by a slower one). A
        gradient the PS dropped as non-finite makes the guess wrong until the next push
        or refresh reads."""
        snapshot = self.snapshot
        if snapshot is None or self.pushes is None:
            return False
        if snapshot.gate["complete"] or not snapshot.let_through(self.last_push[worker]):
            return False
        return snapshot.gate["pending"] + (self.pushes - snapshot.pushes) < k

    def counted_free(self, worker: int, *, wait: bool, k: int, live: int | None,
                     generation: int, refreshes: int, now: float) -> bool:
        """Whether ``worker`` may start, known by counting pushes instead of reading
        the PS: the round its last gradient joined has surely committed. ``wait`` and
        ``k``: the rule the chief runs; ``live``: the live workers (None: not known);
        ``generation`` and ``refreshes``: the coordinator's counts now; ``now``: its
        clock.

        Under a rule that waits with K equal to the number of workers (BSP), a round
        commits exactly when each worker has pushed into it once. Every step begun after
        the last snapshot was let through by it, so it computed its gradient at the
        snapshot's version, which cannot move on before all of them have pushed: once
        each worker not in the round at the snapshot has pushed from such a step, the
        round has committed, and the snapshot moves on to the next round ("counted")
        with no read. A worker whose last push came before a counted snapshot joined a
        round that has committed. Under BSP this leaves one read of the PS in
        ``COUNTED_ROUNDS + 1`` rounds, and one after each refresh (it may change the
        rule). A gradient the PS dropped as non-finite makes the count wrong: its round
        has not committed, and a worker let through pushes a second gradient into it
        (fresh, computed at the round's version; the round commits with it), the others'
        next gradients arrive stale and are dropped. The next read puts the gate right
        and shows the PS has dropped a non-finite gradient: from then on the gate reads
        every round (a worker that made one may make more)."""
        n = self.num_workers
        snapshot, mine = self.snapshot, self.last_push[worker]
        if snapshot is None or self.pushes is None:
            return False
        if snapshot.counted and mine is not None and mine[0] <= snapshot.pushes:
            return True
        if not wait or k != n or snapshot.gate["complete"] or snapshot.gate["nonfinite"] \
                or snapshot.counted >= COUNTED_ROUNDS or live != n:
            return False
        if refreshes != snapshot.refreshes:
            return False
        version = int(snapshot.gate["version"])
        if not all(int(joined) == version or snapshot.let_through(self.last_push[w])
                   for w, joined in enumerate(snapshot.gate["contributed"])):
            return False
        gate = dict(snapshot.gate, version=version + 1, pending=0, complete=False,
                    contributed=[version] * n)
        self.snapshot = snapshot._replace(generation=generation, pushes=self.pushes,
                                          gate=gate, read_end=now,
                                          counted=snapshot.counted + 1)
        return True
