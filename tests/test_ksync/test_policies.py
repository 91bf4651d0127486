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
    (lambda: ksync.Adaptive(hysteresis=-1), "hysteresis must be"),
    (lambda: ksync.parse("adaptive:momentum=1.5"), "momentum must be"),
])
def test_bad_configuration_fails_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def observe(policy, times, version=20, rule=None, running=None):
    """The rule ``policy`` proposes (None: keep ``rule``, by default its initial one):
    the policy alone, given its context as a controller would give it."""
    n = len(times)
    context = ksync.Context(num_workers=n, rule=rule or policy.rule(n))
    proposal = policy.observe(Observation(version=version, iteration_times=tuple(times),
                                          live_workers=tuple(range(n)),
                                          running_times=running), context)
    return None if proposal is None else proposal[0]


def measure(version, times, running=None, loss=None):
    return ksync.Measurement(version=version, live_workers=tuple(range(len(times))),
                             iteration_times=tuple(times),
                             running_times=tuple(running or ()), loss=loss)


def test_adaptive_stops_waiting_for_a_stalled_worker_and_drops_its_late_gradient():
    policy = ksync.Adaptive()
    times = (0.010, 0.010, 0.010)
    running = (None, 0.005, 2.0)  # worker 2 has been in one step for 2 s: frozen
    bsp = ksync.BSP().rule(3)
    rule = observe(policy, times, rule=bsp, running=running)
    # Nobody waits for worker 2, and the gradient it finishes 2 s later (about 200
    # updates stale) is not applied.
    assert (rule.wait and rule.k <= 2) or not rule.wait
    assert rule.wait or rule.weight(staleness=200) == 0.0
    # It thaws and steps at its usual speed again: a rule its gradients count in.
    back = observe(policy, times, version=60, rule=rule, running=running[:2] + (None,))
    assert back is not None and (not back.wait or back.k == 3)
    assert back.wait or back.weight(staleness=1) > 0


def test_adaptive_sees_a_worker_frozen_in_its_first_step_but_not_one_slow_step():
    policy = ksync.Adaptive()
    bsp = ksync.BSP().rule(3)
    # A step 40% over its worker's usual time is noise, not a stall: all three count.
    noisy = observe(policy, (0.010, 0.0115, 0.010), rule=bsp, running=(None, 0.014, None))
    assert noisy is None or not noisy.wait or noisy.k == 3
    # Worker 2 has never finished a step and has been in its first for a second.
    rule = observe(policy, (0.01, 0.01, None), version=40, rule=bsp,
                   running=(None, None, 1.0))
    assert (rule.wait and rule.k == 2) or rule.weight(staleness=100) == 0.0


def test_adaptive_ignores_workers_without_measurements():
    assert observe(ksync.Adaptive(), [None, None, None]) is None


@pytest.mark.parametrize("policy, first, second", [
    (ksync.SyncSwitch(switch_after=30), ksync.BSP().rule(4), ksync.ASP().rule(4)),
    (ksync.ASHL(switch_after=30), ksync.ASP().rule(4), ksync.KSync(k=2).rule(4))], ids=repr)
def test_staged_baselines_switch_once(policy, first, second):
    assert policy.rule(4) == first
    assert observe(policy, [0.01] * 4, version=10) is None
    assert observe(policy, [0.01] * 4, version=30) == second
    assert observe(policy, [0.01] * 4, version=60, rule=second) is None
    assert ksync.get(policy.name, switch_after=5).rule(4) == first


# -- rules from the recent literature ------------------------------------------------


def test_rennala_fast_worker_fills_a_round_stale_gradients_dropped_nobody_waits():
    """Rennala SGD, B=4 over 3 workers: worker 0 (fast) pushes three gradients at the
    current version, worker 1 one: the round commits with them; worker 2's gradient,
    computed at the old version, is dropped; no worker is ever told to wait."""
    rule = ksync.Rennala(batch=4).rule(3)   # B > workers is legal
    assert rule == Rule(k=4, wait=False, max_staleness=0)
    state = UpdateState(3, rule)
    results = run_sequence(state, [(0, 0, 8), (0, 0, 8), (1, 0, 8), (0, 0, 8),   # round 0
                                   (2, 0, 8),                                    # stale
                                   (1, 1, 8)])
    assert [r.committed for r in results] == [False, False, False, True, False, False]
    assert [r.accepted for r in results] == [True, True, True, True, False, True]
    assert results[4].staleness == 1 and state.dropped == 1
    assert state.version == 1 and state.applied == 4 and state.pending == 1
    assert all(state.may_start(w) for w in range(3))
    state.check_invariants()


def test_rennala_one_worker_alone_completes_rounds():
    state = UpdateState(4, ksync.Rennala(batch=8).rule(4))
    for _ in range(16):
        assert state.may_start(0)
        state.push(0, state.version, 8)
    assert state.version == 2 and state.dropped == 0


def test_ringmaster_applies_delays_up_to_r_and_drops_the_rest():
    rule = ksync.Ringmaster(max_delay=2).rule(4)
    assert rule == ksync.SSP(max_staleness=2).rule(4)  # the same rule under drop semantics
    state = UpdateState(4, rule)
    results = run_sequence(state, [(0, 0, 8), (1, 0, 8), (2, 0, 8), (3, 0, 8),
                                   (0, 1, 8), (1, 3, 8), (3, 1, 8)])
    assert [r.staleness for r in results] == [0, 1, 2, 3, 2, 1, 4]
    assert [r.accepted for r in results] == [True, True, True, False, True, True, False]
    assert all(r.committed for r in results if r.accepted)   # applied on arrival
    assert state.version == 5 and state.dropped == 2
    assert all(state.may_start(w) for w in range(4))
    state.check_invariants()


def test_ringmaster_delay_boundary_exactly():
    state = UpdateState(2, ksync.Ringmaster(max_delay=3).rule(2))
    for _ in range(10):
        state.push(0, state.version, 8)
    assert state.push(1, 10 - 3, 8).accepted            # delay 3 = R: applied
    assert not state.push(1, 11 - 4, 8).accepted        # delay 4 > R: ignored


def adasync_run(policy, losses, workers=8, every=10):
    """A controller around ``policy`` given ``losses`` at one observation each; the K
    after each (None: unchanged)."""
    controller = ksync.RuleController(policy, workers)
    controller.refresh(ksync.Measurement(0, live_workers=tuple(range(workers))))
    ks = []
    for version, loss in enumerate(losses, start=1):
        decision = controller.refresh(ksync.Measurement(
            version * every, live_workers=tuple(range(workers)), loss=loss))
        ks.append(decision.rule.k if decision.changed else None)
    return controller, ks


def test_adasync_raises_k_as_the_loss_falls_capped_at_the_workers():
    policy = ksync.AdaSync(k0=2, refresh_every=10)
    assert policy.rule(8) == Rule(k=2, wait=True, max_staleness=0)
    controller, ks = adasync_run(policy, [4.0, 3.0, 1.0, 0.9, 0.25, 0.3, 0.05, 0.001])
    # F0 = 4: K = ceil(2 * sqrt(4 / F)): 3.0 -> 3, 1.0 -> 4, 0.9 -> 5, 0.25 -> 8,
    # 0.3 -> still 8 (never lowered), 0.05 -> 18 capped at 8.
    assert ks == [None, 3, 4, 5, 8, None, None, None]
    assert "K = min(8, ceil(2 * sqrt(F0 / F))) = 8" in controller.explain()
    assert "AdaSync: loss 0.001 from F0=4: ceil(2 * sqrt(4e+03))" in controller.explain()
    assert [v for v, _, _ in controller.history] == [0, 20, 30, 40, 50]
    assert controller.first_loss == (10, 4.0) and controller.last_loss == (80, 0.001)


def test_adasync_alone_decides_from_the_context_it_is_given():
    policy = ksync.AdaSync(k0=1)
    context = ksync.Context(num_workers=8, rule=Rule(k=3, wait=True, max_staleness=0),
                            first_loss=(10, 2.0), last_loss=(30, 0.125))
    observation = Observation(30, (0.1,) * 8, tuple(range(8)), loss=0.125)
    rule, reason = policy.observe(observation, context)   # ceil(sqrt(16)) = 4
    assert rule.k == 4 and reason.startswith("loss fell from 2 to 0.125")
    # never below the K it runs: a loss that rises again keeps K = 3
    assert policy.observe(Observation(40, (0.1,) * 8, tuple(range(8)), loss=1.5),
                          context) is None
    assert policy.observe(Observation(40, (0.1,) * 8, tuple(range(8))), context) is None


def test_adasync_without_a_loss_keeps_k0_and_says_so():
    controller, ks = adasync_run(ksync.AdaSync(k0=3), [None, None, None, float("nan")],
                                 workers=4, every=20)
    assert ks == [None] * 4 and controller.rule.k == 3 and controller.first_loss is None
    assert "no training loss reported yet, so K stays at K0=3" in controller.explain()
    assert "report_loss" in controller.explain()


def test_adasync_through_the_controller_takes_the_measured_loss():
    controller = ksync.RuleController(ksync.AdaSync(k0=1, refresh_every=5), 4)

    def refresh(version, loss):
        return controller.refresh(ksync.Measurement(version=version, live_workers=(0, 1, 2, 3),
                                                    loss=loss))

    refresh(0, None)
    assert refresh(5, 1.0).rule.k == 1       # F0
    assert refresh(10, 0.1).rule.k == 4      # ceil(sqrt(10)) = 4 = the workers
    # a dead worker caps the waiting rule at the live workers, with the usual reason
    decision = controller.refresh(ksync.Measurement(version=12, live_workers=(0, 1, 2)))
    assert decision.rule.k == 3 and "3 live worker" in controller.explain()


@pytest.mark.parametrize("spec, expected", [
    ("rennala:batch=16", ksync.Rennala(batch=16)),
    ("Rennala:batch=2", ksync.Rennala(batch=2)),
    ("ringmaster:max_delay=0", ksync.Ringmaster(max_delay=0)),
    ("adasync", ksync.AdaSync()),
    ("adasync:k0=2;refresh_every=50", ksync.AdaSync(k0=2, refresh_every=50)),
], ids=str)
def test_new_rules_parse_by_name(spec, expected):
    policy = ksync.parse(spec)
    assert type(policy) is type(expected) and policy.get_config() == expected.get_config()
    assert ksync.get(type(expected).name, **expected.get_config()).get_config() == \
        expected.get_config()


@pytest.mark.parametrize("make, message", [
    (lambda: ksync.Rennala(batch=0), "Rennala batch .* must be an integer >= 1, got 0"),
    (lambda: ksync.parse("rennala:batch=-3"), "Rennala batch .* >= 1, got -3"),
    (lambda: ksync.parse("rennala:batch=1.5"), "Rennala batch .* got 1.5"),
    (lambda: ksync.parse("rennala"), r'needs batch.*"rennala:batch=2"'),
    (lambda: ksync.Ringmaster(max_delay=-1), "Ringmaster max_delay .* >= 0, got -1"),
    (lambda: ksync.parse("ringmaster"), r'needs max_delay.*"ringmaster:max_delay=2"'),
    (lambda: ksync.AdaSync(k0=0), "AdaSync k0 .* >= 1, got 0"),
    (lambda: ksync.AdaSync(refresh_every=0), "refresh_every must be an integer >= 1"),
    (lambda: ksync.AdaSync(k0=9).rule(8), "only 8 worker"),
    (lambda: ksync.parse("adasync:k=2"), "has no argument k"),
])
def test_new_rules_refuse_bad_parameters_clearly(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_only_waiting_rules_refuse_k_above_the_workers():
    assert ksync.KAsync(k=6).rule(3).k == 6          # async: workers push again
    with pytest.raises(ValueError, match="only 3 worker"):
        ksync.KSync(k=6).rule(3)


def test_the_policies_package_keeps_every_import_path_and_defines_each_name_once():
    """`ksync.policies` is a package of rooms (base, fixed, adaptive, literature,
    registry); the names callers import from `ksync.policies` and `ksync` are the
    objects of the one module that defines them."""
    import importlib

    import ksync.policies as policies
    rooms = {room: importlib.import_module(f"ksync.policies.{room}")
             for room in ("base", "fixed", "adaptive", "literature", "registry")}
    for name in policies.__all__:
        obj = getattr(policies, name)
        homes = [room for room, module in rooms.items() if name in vars(module)
                 and getattr(obj, "__module__", module.__name__) == module.__name__]
        assert len(homes) == 1, (name, homes)
        if name in ksync.__all__:
            assert getattr(ksync, name) is obj
    assert sorted(policies.registry._BY_NAME) == sorted(
        cls.name for cls in vars(policies).values()
        if isinstance(cls, type) and issubclass(cls, policies.Policy)
        and cls is not policies.Policy)
