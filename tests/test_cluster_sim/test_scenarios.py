"""Scenarios: built-ins load, speeds and events are right, bad input fails clearly; the
benchmark's 8-worker set, and the simulator and the harness playing the same speeds."""

import csv
import dataclasses
import math
import pathlib
import statistics

import numpy as np
import pytest

from cluster_sim.scenarios import (BENCH_DIR, DEFAULT_TRACE_DIR, Scenario, SpeedSchedule,
                                   bench_names, builtin_names, load_scenario, parse_scenario)
from cluster_sim.scenarios.machine_usage import usage_file
from cluster_sim.sim.speeds import make_speed_model

SHARED_TRACES = pathlib.Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba_pai"
SHARED_USAGE = SHARED_TRACES.parent / "alibaba2018_machine_usage"
HAVE_USAGE = usage_file(SHARED_USAGE).is_file()
NO_USAGE = "../shared/traces/alibaba2018_machine_usage not present (it is never shipped)"
CLUSTERS = {"homogeneous", "static", "slow3x", "trace", "colocated", "colocated_usage", "pause",
            "churn"}
BENCH = CLUSTERS | {f"ctr_{n}" for n in CLUSTERS}  # each cluster on the held-out workload

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


def test_steady_says_whether_any_workers_speed_moves_during_the_run():
    assert [load_scenario(f"bench/{n}").steady()
            for n in ("homogeneous", "static", "slow3x", "trace", "colocated", "pause",
                      "churn")] == [True, True, True, False, False, False, False]


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
    ("workers = 2\ndata = 'ctr'\ntarget = 'final'\n",
     r"target: workload 'ctr' has no target 'final' \(it has 'early', 'late'\)"),
    ("workers = 2\ndata = 'teacher'\ntarget = 'late'\n", r"target: .* names none"),
    ("workers = 2\nps = 0\n", r"ps: must be > 0"),
    ("workers = 2\ntarget_loss = -0.5\n", r"target_loss: must be > 0"),
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


# -- the benchmark's 8-worker scenarios ---------------------------------------------------

def test_bench_set_is_complete_and_every_file_loads_with_8_workers():
    assert set(bench_names()) == {f"bench/{n}" for n in BENCH}
    for name in bench_names():
        if name.endswith("colocated_usage") and not HAVE_USAGE:
            continue  # its own tests below
        s = load_scenario(name)
        held_out = name.startswith("bench/ctr_")  # the held-out workload, on 2 PS tasks
        assert (s.name, s.num_workers, s.data, s.num_ps) == (
            name, 8, "ctr" if held_out else "teacher", 2 if held_out else 1)
        if held_out:  # the teacher cluster's speeds and events, nothing of its workload
            cluster = load_scenario(name.replace("ctr_", ""))
            assert (s.slowdowns, s.events, s.relative_events) == (
                cluster.slowdowns, cluster.events, cluster.relative_events)
            assert (s.hidden, s.learning_rate, s.target) != (
                cluster.hidden, cluster.learning_rate, cluster.target)
        assert load_scenario(s.name) == s  # the name in a results file loads it again
        # 1.0 = the reference; a trace's fastest median is 1.0, its fast moments a bit more.
        assert all(0 < v <= (1.2 if name.endswith("trace") else 1.0) for v in s.speeds_at(0.0))
        assert s.momentum > 0
    # The 4-worker files keep their meaning: many tests use them.
    assert load_scenario("static").speeds_at(0) == [1.0, 1.0, 0.5, 0.25]
    assert load_scenario("static").data == "digits"
    # The demo: the benchmark's task on the static speeds, to its own nearer target.
    demo = load_scenario("demo")
    assert (demo.data, demo.num_workers, demo.target_loss) == ("teacher", 4, 1.3)
    assert demo.speeds_at(0) == [1.0, 1.0, 0.5, 0.25]
    from cluster_sim.harness.config import RunConfig, load_data, targets
    assert targets(RunConfig.from_scenario(demo), load_data(demo))["target_loss"] == 1.3
    assert load_scenario("static").target_loss is None


def test_ctr_scenarios_shard_over_2_ps_and_choose_a_target():
    """The held-out workload's scenarios: bench/ctr_static is bench/static's speeds with
    the ctr model and training settings (`cluster_sim.ctr.CTR_TRAINING`) on 2 PS tasks,
    to the early target unless told ``target = "late"``; ctr_small is the tests' 2 x 2.
    A name with the prefix and no cluster of that name is refused."""
    from cluster_sim.ctr import CTR_TARGETS, CTR_TRAINING
    from cluster_sim.harness.config import RunConfig, targets
    from cluster_sim.workloads import load
    s = load_scenario("bench/ctr_static")
    assert s.speeds_at(0) == load_scenario("bench/static").speeds_at(0)
    assert (s.num_ps, s.data, s.hidden, s.learning_rate, s.momentum, s.batch_size) == (
        2, "ctr", CTR_TRAINING["hidden"], CTR_TRAINING["learning_rate"],
        CTR_TRAINING["momentum"], CTR_TRAINING["batch_size"])
    data = load("ctr", train_size=10, test_size=10)
    assert targets(RunConfig.from_scenario(s), data)["target_loss"] == \
        CTR_TARGETS["early"]["loss"]
    late = load_scenario("bench/ctr_static", overrides={"target": "late"})
    assert late.target == "late" and RunConfig.from_scenario(late).target == "late"
    assert targets(RunConfig.from_scenario(late), data)["target_loss"] == \
        CTR_TARGETS["late"]["loss"]
    # An explicit target loss wins; a file without a target takes the workload's default.
    assert targets(RunConfig(target="late", target_loss=0.5), data)["target_loss"] == 0.5
    small = load_scenario("ctr_small")
    assert (small.num_workers, small.num_ps, small.data, small.target) == (2, 2, "ctr", None)
    assert targets(RunConfig.from_scenario(small), data)["target_loss"] == \
        CTR_TARGETS["early"]["loss"]
    with pytest.raises(ValueError, match="has no target 'late'"):
        targets(RunConfig(target="late"), load("teacher", train_size=10, test_size=10))
    with pytest.raises(ValueError, match="unknown scenario 'bench/ctr_nowhere'.*bench/ctr_trace"):
        load_scenario("bench/ctr_nowhere")


def test_bench_static_spans_4x_and_the_others_are_what_they_say():
    static = load_scenario("bench/static").speeds_at(0.0)
    assert max(static) / min(static) == 4.0
    # Equal to the 4-worker static tiled over 8 workers, as the simulator tiles it.
    assert make_speed_model("static", 8, 1000).speed(7, 0.0) == static[7] == 0.25
    assert [make_speed_model("static", 8, 1000).speed(w, 0) for w in range(8)] == static
    assert load_scenario("bench/homogeneous").speeds_at(3.0) == [1.0] * 8
    slow = load_scenario("bench/slow3x").speeds_at(0.0)
    assert slow[:7] == [1.0] * 7 and slow[7] == pytest.approx(1 / 3)
    col = load_scenario("bench/colocated")
    assert col.speeds_at(1.0) == [1, 0.5, 1, 0.5, 1, 1, 1, 1]
    assert col.speeds_at(31.0) == [1, 1, 1, 1, 1, 0.5, 1, 0.5]
    assert col.speeds_at(61.0) == col.speeds_at(1.0)  # periodic
    assert col.mean_speed(5, 0.0, 60.0) == pytest.approx(0.75)


# The bench's pause and churn place their events at fractions of a reference run; at a
# reference of 200 s they fall at 20-40 s and 80-100 s.
AT_200S = {"event_reference_s": 200.0}


def test_bench_pause_and_churn_events():
    pause = load_scenario("bench/pause", overrides=AT_200S)
    assert [(e.at_s, e.worker, e.action) for e in pause.events] == [
        (20.0, 1, "pause"), (40.0, 1, "resume"), (80.0, 6, "pause"), (100.0, 6, "resume")]
    assert pause.effective_speed(1, 30.0) == 0.0 and pause.effective_speed(1, 40.0) == 1.0
    churn = load_scenario("bench/churn", overrides=AT_200S)
    assert [(e.at_s, e.worker, e.action) for e in churn.events] == [
        (20.0, 3, "kill"), (40.0, 3, "restart"), (80.0, 4, "kill"), (100.0, 4, "restart")]
    assert churn.mean_speed(4, 70.0, 120.0) == pytest.approx(30 / 50)


def _trace_medians(path, workers):
    """Median speed (1 / batch_time_norm) of each worker, read straight from the CSV."""
    times = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            times.setdefault(int(row["worker"]), []).append(float(row["batch_time_norm"]))
    return [1.0 / statistics.median(times[w]) for w in workers]


@pytest.mark.parametrize("directory, csv_name", [
    (None, "job_4_norm_sample.csv"),
    pytest.param(SHARED_TRACES, "job_4_norm.csv", marks=pytest.mark.skipif(
        not SHARED_TRACES.is_dir(), reason="../shared/traces/alibaba_pai not present")),
])
def test_bench_trace_workers_median_speeds_differ_at_least_2x(directory, csv_name):
    s = load_scenario("bench/trace", traces_dir=directory)
    workers = [0, 1, 2, 3, 4, 5, 6, 9]  # as the file's comment says
    csv_path = (directory or BENCH_DIR / "traces") / csv_name
    medians = _trace_medians(csv_path, workers)
    assert max(medians) / min(medians) >= 2.0
    # The scenario plays those very workers: the same medians, fastest at 1.0.
    played = [statistics.median(s.slowdowns[w][0].speeds) for w in range(8)]
    assert played == pytest.approx([m / max(medians) for m in medians], rel=1e-9)
    assert max(played) / min(played) >= 2.0


def test_bench_trace_excerpt_is_small_and_attributed():
    excerpt = BENCH_DIR / "traces" / "job_4_norm_sample.csv"
    assert excerpt.stat().st_size < 100_000
    readme = (BENCH_DIR / "traces" / "README.md").read_text()
    assert "CC BY 4.0" in readme and "MLaaS in the Wild" in readme


def test_overrides_replace_keys_before_reading_and_the_trace_pace_follows():
    base = load_scenario("bench/trace")
    slower = load_scenario("bench/trace", overrides={"us_per_sample": 2 * base.us_per_sample,
                                                     "training.batch_size": 16,
                                                     "target_accuracy": 0.8})
    assert (slower.batch_size, slower.target_accuracy) == (16, 0.8)
    # One trace iteration = one nominal step: same step time (2x per sample, half the
    # batch), same period.
    assert slower.slowdowns[0][0].period_s == pytest.approx(base.slowdowns[0][0].period_s)
    with pytest.raises(ValueError, match="training.batch_size: must be > 0"):
        load_scenario("bench/static", overrides={"training.batch_size": 0})


def _usage_csv(tmp_path, rows):
    # machine_id, time_stamp, cpu_util_percent, then the trace's 6 other columns.
    lines = [f"{m},{t},{cpu},50,,,1,1,1" for m, t, cpu in rows]
    path = tmp_path / "machine_usage_16machines.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_machine_usage_section_reads_available_cpu(tmp_path):
    # Two machines sampled every 100 s for 1000 s; m_b is busier in its second half.
    rows = [(m, t, cpu) for t in range(0, 1001, 100) for m, cpu in
            (("m_a", 20), ("m_b", 40 if t < 500 else 90))]
    _usage_csv(tmp_path, rows)
    text = ("workers = 3\n[slowdowns]\nspeeds = [1.0, 1.0, 0.5]\n"
            "[slowdowns.machine_usage]\ndir = '.'\nmachines = ['m_b', 'm_a']\n"
            "workers = [2, 0]\ngrid_s = 250\ntime_unit_s = 0.01\n")
    s = load_scenario(write(tmp_path, text))
    # 250 s windows of the trace last 2.5 s; worker 2 = m_b times its static 0.5.
    assert s.speeds_at(0.0) == pytest.approx([0.8, 1.0, 0.6 * 0.5])
    assert s.speed(2, 5.1) == pytest.approx(0.1 * 0.5)  # window [500, 750): 90 % busy
    assert s.speed(1, 5.1) == 1.0  # no machine: a dedicated worker
    assert s.slowdowns[2][1].period_s == pytest.approx(10.0)  # 4 windows, then it loops
    late = load_scenario(write(tmp_path, text + "start_s = 500\n", "late.toml"))
    assert late.speed(2, 0.0) == pytest.approx(0.05)


@pytest.mark.parametrize("extra, match", [
    ("machines = ['m_zz']\n", r"machines: .*no machine 'm_zz'.*m_a"),
    ("machines = []\n", r"machines: expected a non-empty list"),
    ("machines = ['m_a']\nworkers = [0, 1]\n", r"workers: expected 1 distinct"),
    ("machines = ['m_a']\nstart_s = 5000\n", r"start_s: start_s 5000 is past the trace"),
    ("machines = ['m_a']\ncpu = 1\n", r"machine_usage.cpu: unknown key"),
])
def test_machine_usage_section_errors_name_the_key(tmp_path, extra, match):
    _usage_csv(tmp_path, [(m, t, 30) for t in range(0, 1001, 100) for m in ("m_a", "m_b")])
    with pytest.raises(ValueError, match=match):
        load_scenario(write(tmp_path, "workers = 2\n[slowdowns.machine_usage]\n"
                                      "dir = '.'\ngrid_s = 250\n" + extra))


def test_colocated_usage_names_a_missing_trace_and_how_to_pass_it(tmp_path):
    with pytest.raises(ValueError, match=r"colocated_usage.toml: slowdowns.machine_usage.dir: "
                                         r"the Alibaba 2018 machine-usage trace is not at "
                                         r".*nope.*not shipped.*machine_usage="):
        load_scenario("bench/colocated_usage", machine_usage=tmp_path / "nope")
    # Other scenarios ignore the option, so one command line serves all.
    assert load_scenario("bench/static", machine_usage=tmp_path / "nope").num_workers == 8


@pytest.mark.skipif(not HAVE_USAGE, reason=NO_USAGE)
def test_colocated_usage_follows_the_real_machines_available_cpu():
    s = load_scenario("bench/colocated_usage", machine_usage=SHARED_USAGE)
    machines = [f"m_{n}" for n in range(1934, 1942)]
    cpu = {m: [] for m in machines}
    with open(usage_file(SHARED_USAGE), newline="") as fh:
        for row in csv.reader(fh):
            if row[0] in cpu and row[2]:
                cpu[row[0]].append(float(row[2]))
    for w, m in enumerate(machines):
        played = s.slowdowns[w][0]
        # Worker w follows machine m: the median of its windows is that of the raw samples.
        raw = statistics.median(100.0 - c for c in cpu[m]) / 100.0
        assert statistics.median(played.speeds) == pytest.approx(raw, abs=0.03), m
        assert min(played.speeds) < 0.3 < 0.75 < max(played.speeds)  # bursts of load
        assert played.times_s[1] == pytest.approx(10.0)  # 300 s of trace = 10 s of run
    assert len({round(v, 3) for v in s.speeds_at(100.0)}) > 4  # the machines differ


# -- the simulator and the harness play the same speeds -----------------------------------

def _played_speeds(scenario, times):
    """What `ScenarioPlayer` sets in a real `SlowdownLayer` at each training time, as
    speeds (us_per_sample / per-sample delay)."""
    from cluster_sim.harness.player import ScenarioPlayer
    from cluster_sim.slowdown import SlowdownLayer

    layer = SlowdownLayer(scenario.num_workers)
    layer.build((None, 4))
    clock = [0.0]
    player = ScenarioPlayer(None, scenario, lambda: clock[0], layer, scenario.us_per_sample)
    out = []
    for t in times:
        clock[0] = t
        assert player.tick() == t
        out.append([scenario.us_per_sample / d for d in layer.delays.numpy()])
    return out


@pytest.mark.parametrize("name", ["bench/static", "bench/colocated", "bench/trace",
                                  pytest.param("bench/colocated_usage", marks=pytest.mark.skipif(
                                      not HAVE_USAGE, reason=NO_USAGE))])
def test_simulator_and_harness_agree_on_speeds(name):
    scenario = load_scenario(name, machine_usage=SHARED_USAGE if HAVE_USAGE else None)
    times = [0.0, 0.7, 12.3, 29.9, 30.0, 47.5, 95.0]
    sim = make_speed_model(scenario, num_workers=16, us_per_sample=scenario.us_per_sample)
    harness = _played_speeds(scenario, times)
    for t, played in zip(times, harness):
        want = [sim.speed(w, t) for w in range(8)]
        assert played == pytest.approx(want, rel=1e-6), t
        assert [sim.speed(w + 8, t) for w in range(8)] == want  # tiled over 16 workers
        step = [sim.compute_time(w, t, scenario.batch_size) for w in range(8)]
        assert step == pytest.approx([scenario.batch_size * scenario.us_per_sample * 1e-6 / v
                                      for v in played])


def test_simulator_plays_pauses_and_kills_of_the_bench_scenarios():
    pause = make_speed_model(load_scenario("bench/pause", overrides=AT_200S), num_workers=16,
                             us_per_sample=1000)
    step = 0.032  # 32 samples at 1 ms, speed 1
    assert pause.compute_time(1, 0.0, 32) == pytest.approx(step)
    # Started 10 ms before the pause: 10 ms done, frozen 20 s, then the other 22 ms.
    assert pause.compute_time(1, 19.99, 32) == pytest.approx(20.0 + step)
    assert pause.compute_time(9, 19.99, 32) == pytest.approx(20.0 + step)  # tiled worker 9
    assert pause.compute_time(1, 35.0, 32) == pytest.approx(5.0 + step)  # waits the resume
    assert pause.compute_time(0, 19.99, 32) == pytest.approx(step)
    churn = make_speed_model(load_scenario("bench/churn", overrides=AT_200S), num_workers=8,
                             us_per_sample=1000)
    # Worker 4 (speed 1) killed at 80 s: the step under way is lost, begun again at 100 s.
    assert churn.compute_time(4, 79.99, 32) == pytest.approx(20.01 + step)
    assert churn.compute_time(3, 19.99, 32) == pytest.approx(20.01 + 4 * step)  # speed 0.25
    never = parse_scenario({"workers": 2, "events": [{"action": "kill", "worker": 1,
                                                      "at_s": 1.0}]})
    assert make_speed_model(never, 2, 1000).compute_time(1, 5.0, 32) == math.inf


def test_a_simulated_run_of_a_pause_keeps_every_push_counted():
    import ksync
    from cluster_sim.sim.engine import SimConfig, Simulation

    # Worker 1 frozen for most of a short run: it pushes far less than worker 0.
    scenario = parse_scenario({"name": "p", "workers": 3, "events": [
        {"action": "pause", "worker": 1, "at_s": 0.05, "duration_s": 1.0}]})
    result = Simulation(ksync.ASP(), SimConfig(num_workers=3, scenario=scenario,
                                               max_pushes=240, eval_every=240)).run()
    assert result["applied"] + result["dropped"] + result["pending"] == result["pushed"] == 240
    pushes = result["worker_pushes"]
    assert pushes[1] < pushes[0] / 3, pushes


def test_trace_even_follows_near_equal_real_workers():
    """The near-homogeneous trace of the allocation bench: job_4's fast workers, whose
    median speeds are within 4 % of each other while each moves from point to point."""
    s = load_scenario("trace_even")
    assert s.num_workers == 4
    medians, moves = [], []
    for (schedule,) in s.slowdowns:
        speeds = np.array(schedule.speeds)
        medians.append(np.median(speeds))
        moves.append(np.abs(np.diff(speeds) / speeds[:-1]).mean())
    assert 0.95 <= min(medians) and max(medians) <= 1.0 + 1e-9
    assert all(0.02 < m < 0.1 for m in moves)


def test_downtime_is_one_account_for_the_model_and_the_simulator():
    """`Scenario.downtime` is what `frozen` and the simulator's speeds read: the
    simulated worker is killed exactly where the model says it is frozen by a kill."""
    churn = load_scenario("churn")
    assert churn.downtime(3) == ((20.0, 45.0, "kill"),) and churn.downtime(0) == ()
    speeds = make_speed_model(churn, num_workers=4, us_per_sample=300)
    for t in (19.99, 20.0, 30.0, 44.99, 45.0):
        assert speeds.killed(3, t) == churn.frozen(3, t) == (20.0 <= t < 45.0)
    with pytest.raises(ValueError, match="worker 4 out of range"):
        churn.downtime(4)


def test_speed_matrix_is_the_scenario_per_window(tmp_path, capsys):
    """`python -m cluster_sim speeds` writes each scenario's [workers, windows] speeds
    (0 while stopped); a scenario with fraction events needs its reference first."""
    from cluster_sim.__main__ import main
    from cluster_sim.scenarios.windows import speed_matrix
    out = tmp_path / "regimes.npz"
    assert main(["speeds", "--scenarios", "bench/pause", "--out", str(out)]) == 2
    assert "at_fraction" in capsys.readouterr().err and not out.exists()
    # The machine-usage trace is never shipped: its scenario only where ../shared has it.
    names = ["pause", "bench/pause"] + (["bench/colocated_usage"] if HAVE_USAGE else [])
    assert main(["speeds", "--scenarios", ",".join(names), "--event-reference", "100",
                 "--window-s", "1.0", "--out", str(out)]) == 0
    with np.load(out) as npz:
        got = {name: npz[name] for name in npz.files}
    assert set(got) == set(names)
    placed = load_scenario("bench/pause").resolve_events(100.0)
    [(begin, end, _)] = placed.downtime(1)
    middles = np.arange(got["bench/pause"].shape[1]) + 0.5
    assert np.array_equal(got["bench/pause"][1] == 0, (begin <= middles) & (middles < end))
    assert np.array_equal(got["pause"], speed_matrix(load_scenario("pause"), window_s=1.0))
    if not HAVE_USAGE:
        return
    # A machine-usage scenario's factors count (a TOML reading of its own saw none).
    usage = got["bench/colocated_usage"]
    assert usage.shape == (8, 2400) and 0 < usage.min() < usage.max() < 1.0
