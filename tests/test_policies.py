"""Policies and the reference update state, driven by synthetic arrival sequences."""

import random

import pytest

import ksync
from ksync import Observation, Rule, UpdateState


def run_sequence(state, pushes):
    return [state.push(w, v, samples) for w, v, samples in pushes]


def test_bsp_commits_once_per_round_and_drops_nothing():
    state = UpdateState(4, ksync.BSP().rule(4))
    for round_ in range(5):
        for w in range(4):
            assert state.may_start(w)
            state.push(w, state.version, 32)
            assert not state.may_start(w) or state.version == round_ + 1
    assert state.version == 5 and state.dropped == 0 and state.applied == 20
    state.check_invariants()


def test_ksync_drops_late_gradients_of_the_old_round():
    state = UpdateState(4, ksync.KSync(k=2).rule(4))
    results = run_sequence(state, [(0, 0, 8), (1, 0, 8), (2, 0, 8), (3, 0, 8)])
    assert [r.committed for r in results] == [False, True, False, False]
    assert [r.accepted for r in results] == [True, True, False, False]
    assert state.dropped == 2 and state.version == 1
    assert state.may_start(2) and state.may_start(0)
    state.check_invariants()


def test_backup_workers_take_first_n_minus_b():
    assert ksync.BackupWorkers(backups=1).rule(4) == Rule(k=3, wait=True, max_staleness=0)


def test_asp_applies_everything_and_never_waits():
    state = UpdateState(3, ksync.ASP().rule(3))
    rng = random.Random(0)
    for _ in range(100):
        w = rng.randrange(3)
        state.push(w, max(0, state.version - rng.randrange(5)), 16)
        assert all(state.may_start(i) for i in range(3))
    assert state.applied == 100 and state.version == 100 and state.dropped == 0


@pytest.mark.parametrize("action", ["drop", "downweight"])
def test_ssp_never_applies_beyond_bound_at_full_weight(action):
    state = UpdateState(3, ksync.SSP(max_staleness=2, stale_action=action).rule(3))
    rng = random.Random(1)
    for _ in range(200):
        result = state.push(rng.randrange(3), max(0, state.version - rng.randrange(6)), 8)
        if result.staleness > 2:
            assert result.weight == (0.0 if action == "drop" else 1 / (1 + result.staleness))
        else:
            assert result.weight == 1.0
    state.check_invariants()
    assert (state.dropped > 0) == (action == "drop")


def test_kasync_aggregates_k_without_waiting():
    state = UpdateState(4, ksync.KAsync(k=3).rule(4))
    results = run_sequence(state, [(0, 0, 8)] * 7)
    assert sum(r.committed for r in results) == 2 and state.pending == 1
    assert state.may_start(0)
    state.check_invariants()


def test_nonfinite_gradients_are_dropped_and_counted():
    state = UpdateState(2, ksync.BSP().rule(2))
    state.push(0, 0, 8, finite=False)
    assert state.dropped == 1 and state.nonfinite == 1 and state.may_start(0)


@pytest.mark.parametrize("make, message", [
    (lambda: ksync.KSync(k=0), "K must be an integer >= 1"),
    (lambda: ksync.KAsync(k=-2), "K must be an integer >= 1"),
    (lambda: ksync.KSync(k=5).rule(3), "only 3 worker"),
    (lambda: ksync.SSP(max_staleness=-1), "staleness bound must be an integer >= 0"),
    (lambda: ksync.get("hogwild"), "unknown policy 'hogwild'"),
    (lambda: ksync.BackupWorkers(backups=3).rule(3), "leaves no gradient"),
    (lambda: ksync.Adaptive(tolerance=0.5), "tolerance must be"),
    (lambda: ksync.parse("adaptive:staleness_scaling=False"), "true or false"),
])
def test_bad_configuration_fails_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def observe(policy, times, version=20):
    return policy.observe(Observation(version=version, iteration_times=tuple(times),
                                      live_workers=tuple(range(len(times)))))


def test_adaptive_homogeneous_goes_to_bsp():
    policy = ksync.Adaptive()
    assert policy.rule(4).k == 4
    assert observe(policy, [0.010, 0.011, 0.0105, 0.0102]) is None  # already BSP
    assert policy.rule(4) == ksync.BSP().rule(4)


def test_adaptive_persistent_straggler_goes_k_async_with_bounded_staleness():
    policy = ksync.Adaptive(tolerance=1.3)
    policy.rule(4)
    rule = observe(policy, [0.010, 0.010, 0.020, 0.040])
    # Two workers within 1.3x, but with K=2 the median worker would see 2.75 updates
    # while computing, over the target of 2: K=3.
    assert rule.k == 3 and not rule.wait and rule.max_staleness is not None
    # Stale gradients count less (a gradient one update old at half weight)...
    assert rule.staleness_scaling and rule.weight(staleness=1) == 0.5
    # ...unless asked otherwise.
    plain = ksync.Adaptive(tolerance=1.3, staleness_scaling=False)
    plain.rule(4)
    assert observe(plain, [0.010, 0.010, 0.020, 0.040]).weight(staleness=1) == 1.0
    # slowest takes 4x the fastest: at ~(1+1+0.5+0.25)/3 updates per fast step it sees
    # about 3.7 updates while computing; the bound leaves room for that.
    assert rule.max_staleness >= 4
    assert "K-async" in policy.explain()
    # the straggler recovers: back to BSP, and the history says why each time
    back = observe(policy, [0.010, 0.010, 0.011, 0.010], version=40)
    assert back.k == 4 and back.wait
    assert [v for v, _, _ in policy.history] == [0, 20, 40]


def test_adaptive_stops_waiting_for_a_stalled_worker_and_drops_its_late_gradient():
    policy = ksync.Adaptive(tolerance=1.3)
    policy.rule(3)
    times = (0.010, 0.010, 0.010)
    running = (None, 0.005, 2.0)  # worker 2 has been in one step for 2 s: frozen
    rule = policy.observe(ksync.Observation(version=20, iteration_times=times,
                                            live_workers=(0, 1, 2), running_times=running))
    assert rule.k == 2 and not rule.wait
    # The bound follows the stalled worker's normal speed, so the gradient it finishes
    # 2 s later (about 200 updates stale) is dropped.
    assert rule.max_staleness <= 4
    assert rule.weight(staleness=200) == 0.0
    # It thaws and steps at its old speed again: BSP.
    back = policy.observe(ksync.Observation(version=60, iteration_times=times,
                                            live_workers=(0, 1, 2), running_times=running[:2]
                                            + (None,)))
    assert back == ksync.BSP().rule(3)


def test_adaptive_sees_a_worker_frozen_in_its_first_step_but_not_one_slow_step():
    policy = ksync.Adaptive(tolerance=1.3)
    policy.rule(3)
    usual = (0.010, 0.0115, 0.010)
    # A step 20% over its worker's usual time is noise, not a stall: still BSP.
    assert policy.observe(ksync.Observation(version=20, iteration_times=usual,
                                            live_workers=(0, 1, 2),
                                            running_times=(None, 0.014, None))) is None
    # Worker 2 has never finished a step and has been in its first for a second.
    rule = policy.observe(ksync.Observation(version=40, iteration_times=(0.01, 0.01, None),
                                            live_workers=(0, 1, 2),
                                            running_times=(None, None, 1.0)))
    assert rule.k == 2 and not rule.wait


def test_adaptive_ignores_workers_without_measurements():
    policy = ksync.Adaptive()
    policy.rule(3)
    assert observe(policy, [None, None, None]) is None


@pytest.mark.parametrize("policy, first, second", [
    (ksync.SyncSwitch(switch_after=30), ksync.BSP().rule(4), ksync.ASP().rule(4)),
    (ksync.ASHL(switch_after=30), ksync.ASP().rule(4), ksync.KSync(k=2).rule(4))], ids=repr)
def test_staged_baselines_switch_once(policy, first, second):
    assert policy.rule(4) == first
    assert observe(policy, [0.01] * 4, version=10) is None
    assert observe(policy, [0.01] * 4, version=30) == second
    assert observe(policy, [0.01] * 4, version=60) is None
    assert ksync.get(policy.name, switch_after=5).rule(4) == first


def test_adaptive_raises_k_with_many_workers_to_bound_typical_staleness():
    policy = ksync.Adaptive(tolerance=1.3, target_staleness=4)
    policy.rule(64)
    times = [0.010 * (1 + i / 32) for i in range(64)]  # 1x to ~3x the fastest
    rule = observe(policy, times)
    within = sum(t <= 1.3 * times[0] for t in times)
    assert not rule.wait and rule.k > within
    # A typical worker computing for its median time sees about median * sum(1/t) / K
    # updates: raising K keeps that at the target, not at 64 / within.
    median = sorted(times)[32]
    assert median * sum(1 / t for t in times) / rule.k <= 4.0
    assert median * sum(1 / t for t in times) / (rule.k - 1) > 4.0
    assert f"K raised from {within} to {rule.k}" in policy.explain()
    with pytest.raises(ValueError, match="target_staleness"):
        ksync.Adaptive(target_staleness=0.5)
