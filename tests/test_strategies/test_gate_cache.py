"""`strategies.gate_cache.GateCache`: the coordinator's gate known without a read of
the PS, driven step by step in one thread (the coordinator adds the threads and locks;
`tests/test_strategies/test_coordinator_gate.py` runs them)."""

from ksync.rule import Rule
from ksync.state import UpdateState
from strategies.gate_cache import COUNTED_ROUNDS, GateCache

N = 3


def gate_of(state: UpdateState) -> dict:
    """What `PSUpdateState.gate_state` reads, from the reference PS state."""
    return dict(version=state.version, pending=state.pending, k=state.rule.k,
                complete=state.pending >= state.rule.k, nonfinite=state.nonfinite,
                contributed=list(state.contributed))


def read(cache, state, generation=0, now=0.0, refreshes=0):
    cache.record_read(generation, cache.begin_read(), gate_of(state), now, refreshes)


def bsp(n=N):
    return UpdateState(n, Rule(k=n, wait=True, max_staleness=0))


def test_a_worker_that_joined_the_open_round_surely_waits():
    state, cache = bsp(), GateCache(N)
    read(cache, state, now=1.0)
    state.push(0, 0, 32)
    cache.step_ended(0, pushes=1, began=2.0)  # began after the read: joined this round
    assert cache.surely_waits(0, k=N) and not state.may_start(0)
    state.push(1, 0, 32)
    cache.step_ended(1, pushes=1, began=0.5)  # began before the read: not sure
    assert not cache.surely_waits(1, k=N)
    # Three pushes since the read could have filled the round: no guess.
    state.push(2, 0, 32)
    cache.step_ended(2, pushes=1, began=2.0)
    assert not cache.surely_waits(0, k=N) and state.version == 1


def test_bsp_rounds_are_counted_for_at_most_counted_rounds_then_read():
    state, cache = bsp(), GateCache(N)
    read(cache, state, now=0.0)
    counted, now = 0, 0.0
    for _ in range(COUNTED_ROUNDS + 2):
        now += 1.0
        for w in range(N):
            state.push(w, state.version, 32)
            cache.step_ended(w, pushes=1, began=now)
        free = [cache.counted_free(w, wait=True, k=N, live=N, generation=0, refreshes=0,
                                   now=now + 0.5) for w in range(N)]
        assert free == [state.may_start(w) for w in range(N)] or not any(free)
        if not any(free):
            break
        counted += 1
        assert cache.snapshot.gate["version"] == state.version
    assert counted == COUNTED_ROUNDS  # then the gate reads the PS again
    read(cache, state, now=now + 1.0)
    assert cache.snapshot.counted == 0


def test_no_counting_without_the_conditions_that_make_it_exact():
    def counted_after_one_round(**changes):
        state, cache = bsp(), GateCache(N)
        read(cache, state)
        for w in range(N):
            state.push(w, 0, 32)
            cache.step_ended(w, pushes=1, began=1.0)
        args = dict(wait=True, k=N, live=N, generation=0, refreshes=0, now=2.0)
        return cache.counted_free(0, **{**args, **changes})
    assert counted_after_one_round()
    assert not counted_after_one_round(refreshes=1)  # a refresh may have changed the rule
    assert not counted_after_one_round(live=N - 1)   # a worker is down
    assert not counted_after_one_round(k=N - 1)      # not BSP
    assert not counted_after_one_round(wait=False)


def test_a_step_of_unknown_pushes_makes_every_check_read_until_the_next_read():
    state, cache = bsp(), GateCache(N)
    read(cache, state)
    cache.step_ended(0, pushes=None, began=1.0)  # several steps in one function
    assert cache.pushes is None
    assert not cache.surely_waits(0, k=N) and not cache.free_since_read(1)
    assert not cache.counted_free(1, wait=True, k=N, live=N, generation=0, refreshes=0,
                                  now=2.0)
    read(cache, state)
    assert cache.pushes == 0 and cache.free_since_read(1)


def test_a_non_finite_gradient_stops_the_counting():
    state, cache = bsp(), GateCache(N)
    state.push(0, 0, 32, finite=False)
    read(cache, state)
    for w in range(N):
        state.push(w, 0, 32)
        cache.step_ended(w, pushes=1, began=1.0)
    assert not cache.counted_free(0, wait=True, k=N, live=N, generation=0, refreshes=0,
                                  now=2.0)


def test_free_since_read_until_the_worker_pushes_again_and_fresh_by_generation():
    state, cache = bsp(), GateCache(N)
    state.push(0, 0, 32)
    read(cache, state, generation=4)
    assert not cache.free_since_read(0) and cache.free_since_read(1)
    cache.step_ended(1, pushes=1, began=1.0)
    assert not cache.free_since_read(1)
    assert cache.fresh(4) and not cache.fresh(5)
