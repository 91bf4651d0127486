"""Scenarios: built-ins load, speeds and events are right, bad input fails clearly."""

import dataclasses
import math
import pathlib

import pytest

from cluster_sim.scenarios import (DEFAULT_TRACE_DIR, Scenario, SpeedSchedule, builtin_names,
                                   load_scenario)

SHARED_TRACES = pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba_pai"

MINIMAL = "workers = 2\n"


def write(tmp_path, text, name="s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_builtins_are_all_there_and_load():
    assert set(builtin_names()) >= {"homogeneous", "static", "trace", "colocated", "pause",
                                    "churn"}
    for name in builtin_names():
        s = load_scenario(name)
        assert s.name == name
        assert len(s.speeds_at(0.0)) == s.num_workers
        assert all(0 < v <= 1.0 for v in s.speeds_at(0.0))


def test_static_and_homogeneous_speeds_and_workload():
    s = load_scenario("static")
    assert s.speeds_at(0.0) == [1.0, 1.0, 0.5, 0.25]
    assert s.speeds_at(1e6) == [1.0, 1.0, 0.5, 0.25]
    assert (s.num_ps, s.data, s.batch_size, s.hidden) == (1, "digits", 32, (64, 64))
    assert s.momentum > 0  # staleness must cost something
    assert load_scenario("homogeneous").speeds_at(5.0) == [1.0] * 4


def test_colocated_alternates_out_of_phase():
    s = load_scenario("colocated")
    assert s.speeds_at(1.0) == [1.0, 0.5, 1.0, 1.0]
    assert s.speeds_at(16.0) == [1.0, 1.0, 1.0, 0.5]
    assert s.speeds_at(31.0) == [1.0, 0.5, 1.0, 1.0]  # periodic
    assert s.mean_speed(1, 0.0, 30.0) == pytest.approx(0.75)
    assert s.speeds_at(14.9)[1] == 0.5 and s.speeds_at(15.0)[1] == 1.0  # switches at 15 s


def test_pause_freezes_one_worker_for_20_s():
    s = load_scenario("pause")
    pause, resume = s.events
    assert (pause.action, resume.action, pause.worker) == ("pause", "resume", resume.worker)
    assert resume.at_s - pause.at_s == 20.0
    w = pause.worker
    assert s.effective_speed(w, pause.at_s + 1) == 0.0
    assert s.effective_speed(w, resume.at_s + 1) == s.speed(w, resume.at_s + 1) > 0
    assert not s.frozen(w, pause.at_s - 0.01) and s.frozen(w, pause.at_s)


def test_churn_kills_and_restarts_and_the_mean_speed_counts_it():
    s = load_scenario("churn")
    assert [e.action for e in s.events] == ["kill", "restart"]
    kill, restart = s.events
    # Over [0, restart]: worker 3 (speed 0.25) runs only until it is killed.
    assert s.mean_speed(3, 0.0, restart.at_s) == pytest.approx(0.25 * kill.at_s / restart.at_s)
    assert s.mean_speed(0, 0.0, restart.at_s) == pytest.approx(1.0)


def test_speed_schedule_mean_and_breakpoints():
    sch = SpeedSchedule((0, 10), (1.0, 0.5), period_s=20)
    assert sch.breakpoints(0, 45) == [10.0, 20.0, 30.0, 40.0]
    assert sch.mean(5, 15) == pytest.approx(0.75)
    assert sch.mean(0, 45) == pytest.approx((20 * 1.0 + 20 * 0.5 + 5 * 1.0) / 45)
    hold = SpeedSchedule((0, 10), (1.0, 0.5))
    assert hold.speed(1e9) == 0.5 and hold.breakpoints(0, 100) == [10.0]


def test_trace_scenario_uses_vendored_sample_by_default():
    s = load_scenario("trace")
    assert DEFAULT_TRACE_DIR.is_dir()
    # The vendored sample has 60 points, 10 iterations apart, at 9.6 ms per iteration.
    assert s.slowdowns[0][0].period_s == pytest.approx(60 * 10 * 0.0096)
    medians = [s.mean_speed(w, 0.0, 200.0) for w in range(s.num_workers)]
    # Normalised so the fastest follows ~1.0 and the trace's slow worker is slower.
    assert max(medians) == pytest.approx(1.0, abs=0.03)
    assert min(medians) < 0.85
    # Time-varying: the speed changes within a few seconds of the trace.
    assert len({s.speed(0, t / 10) for t in range(100)}) > 1
    assert s.slowdowns[0][0].breakpoints(0.0, 1.0)


def test_trace_dir_override_and_missing_dir(tmp_path):
    csv = ",worker,gpu,time,batch_time_norm\n"
    rows = [(0, 1, 500), (0, 11, 1000), (1, 1, 1000), (1, 11, 1000)]
    csv += "".join(f"{i},{w},20,{t},{v}\n" for i, (w, t, v) in enumerate(rows))
    (tmp_path / "job_9_norm.csv").write_text(csv)
    path = write(tmp_path, "workers = 2\n[slowdowns.trace]\ntime_unit_s = 1.0\n")
    s = load_scenario(path, traces_dir=tmp_path)
    # Worker 0 has the fastest median (0.75 of 1/500 vs 1/1000): it becomes 1.0 at best.
    assert s.speed(0, 0.0) == pytest.approx(1 / 0.75)
    assert s.speed(0, 10.0) == pytest.approx(0.5 / 0.75)
    assert s.speed(1, 0.0) == pytest.approx(0.5 / 0.75)
    assert s.speed(0, 20.0) == s.speed(0, 0.0)  # loops after two points of 10 s
    with pytest.raises(ValueError, match="does not exist"):
        load_scenario(path, traces_dir=tmp_path / "nope")
    with pytest.raises(ValueError, match=r"slowdowns.trace.workers.*no worker 7"):
        load_scenario(write(tmp_path, "workers = 2\n[slowdowns.trace]\nworkers = [0, 7]\n"),
                      traces_dir=tmp_path)


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared traces not present")
def test_trace_scenario_reads_full_shared_traces():
    s = load_scenario("trace", traces_dir=SHARED_TRACES)
    speeds = [s.mean_speed(w, 0.0, 100.0) for w in range(4)]
    assert speeds[0] == pytest.approx(1.0, abs=0.03) and speeds[3] < 0.8


def test_other_scenarios_ignore_traces_dir(tmp_path):
    assert load_scenario("static", traces_dir=tmp_path / "nope").speeds_at(0)[3] == 0.25


def test_back_to_back_pauses_are_allowed(tmp_path):
    pause = "[[events]]\naction = 'pause'\nworker = 1\nat_s = {}\nduration_s = 10\n"
    s = load_scenario(write(tmp_path, MINIMAL + pause.format(20) + pause.format(10)))
    assert [(e.at_s, e.action) for e in s.events] == [
        (10.0, "pause"), (20.0, "resume"), (20.0, "pause"), (30.0, "resume")]
    assert s.frozen(1, 20.0) and not s.frozen(1, 30.0) and not s.frozen(0, 15.0)
    assert s.mean_speed(1, 0.0, 40.0) == pytest.approx(0.5)


def test_scenario_checks_one_slowdown_list_per_worker():
    with pytest.raises(ValueError, match="1 slowdown lists for 2 workers"):
        Scenario("x", num_workers=2, slowdowns=((SpeedSchedule((0,), (1,)),),))


@pytest.mark.parametrize("text, match", [
    ("workers = 2\nspeed = 1\n", r"s.toml: speed: unknown key"),
    ("", r"s.toml: workers: missing"),
    ("workers = 0\n", r"workers: must be > 0"),
    ("workers = 'four'\n", r"workers: expected int"),
    ("workers = 2\n[slowdowns]\nspeeds = [1.0, 0.0]\n", r"slowdowns.speeds: speeds must be .*> 0"),
    ("workers = 2\n[slowdowns]\nspeeds = [1.0, -1]\n", r"> 0"),
    ("workers = 2\n[slowdowns]\nspeeds = [1.0]\n", r"slowdowns.speeds: expected a list of 2"),
    ("workers = 2\n[[slowdowns.schedule]]\nworkers = [2]\ntimes_s = [0]\nspeeds = [1]\n",
     r"slowdowns.schedule\[0\].workers: worker 2 out of range"),
    ("workers = 2\n[[slowdowns.schedule]]\nworkers = [0]\ntimes_s = [1, 2]\nspeeds = [1, 1]\n",
     r"slowdowns.schedule\[0\]: schedule times must start at 0"),
    ("workers = 2\n[[slowdowns.schedule]]\nworkers = [0]\ntimes_s = [0, 5]\nspeeds = [1, 1]\n"
     "period_s = 5\n", r"period_s"),
    ("workers = 2\n[[events]]\naction = 'explode'\nworker = 0\nat_s = 1\n",
     r"events\[0\].action: expected 'pause' or 'kill'"),
    ("workers = 2\n[[events]]\naction = 'pause'\nworker = 0\nat_s = 1\n",
     r"events\[0\].duration_s: missing"),
    ("workers = 2\n[[events]]\naction = 'kill'\nworker = 0\nat_s = 5\nrestart_at_s = 2\n",
     r"events\[0\].restart_at_s: must be after"),
    ("workers = 2\n[[events]]\naction = 'pause'\nworker = 0\nat_s = 1\nduration_s = 10\n"
     "[[events]]\naction = 'kill'\nworker = 0\nat_s = 5\n", r"events: worker 0: kill at 5"),
    ("workers = 2\ndata = 'imagenet'\n", r"data: unknown dataset 'imagenet'"),
    ("workers = 2\n[model]\nhidden = [64, 0]\n", r"model.hidden"),
    ("workers = 2\n[training]\nmomentum = 1.5\n", r"training.momentum"),
    ("workers = 2\n[slowdowns.trace]\njob = 'job_77'\n", r"slowdowns.trace.job: no trace file"),
    ("workers = 2\n[slowdowns.trace]\nspeed = 2\n", r"slowdowns.trace.speed: unknown key"),
    ("workers = [2\n", r"s.toml: malformed TOML"),
    ("workers = 2\n[slowdowns]\ninject = 'cgroup'\n", r"slowdowns.inject: expected one of"),
    ("workers = 2\n[slowdowns]\ninject = 'sigstop'\n[[events]]\naction = 'kill'\nworker = 0\n"
     "at_s = 5\n", r"slowdowns.inject: the sigstop duty cycle cannot be combined"),
])
def test_bad_scenarios_fail_naming_file_and_key(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        load_scenario(write(tmp_path, text))


def test_unknown_name_lists_builtins():
    with pytest.raises(ValueError, match=r"unknown scenario 'nosuch'.*static"):
        load_scenario("nosuch")
    with pytest.raises(ValueError, match="does not exist"):
        load_scenario("missing/file.toml")


def test_minimal_file_defaults(tmp_path):
    s = load_scenario(write(tmp_path, MINIMAL, "tiny.toml"))
    assert (s.name, s.speeds_at(0.0), s.events) == ("tiny", [1.0, 1.0], ())
    assert math.isclose(s.mean_speed(1, 0, 1), 1.0) and s.us_per_sample == 300.0


def test_blackbox_inject_mode(tmp_path):
    s = load_scenario(write(tmp_path, "workers = 2\n[slowdowns]\ninject = 'sigstop'\n"
                                      "speeds = [1.0, 0.5]\n"))
    assert s.inject == "sigstop" and "black-box" in s.summary()
    assert load_scenario("static").inject == "delay"
    with pytest.raises(ValueError, match="cannot be combined with pause or kill"):
        dataclasses.replace(load_scenario("churn"), inject="sigstop")
