"""The harness on the shared local cluster: a short run under a scenario with a pause."""

import dataclasses

import pytest

from cluster_sim.harness.run import ARMS, Arm, run_arm, window_metrics
from cluster_sim.scenarios import parse_scenario

from conftest import NUM_WORKERS, proc_state


def small_scenario(**events):
    table = {"name": "small", "workers": NUM_WORKERS, "max_pushes": 120,
             "target_accuracy": 0.99, "us_per_sample": 200.0,
             "slowdowns": {"speeds": [1.0, 1.0, 0.5]}}
    table.update(events)
    return parse_scenario(table)


@pytest.mark.cluster
def test_run_arm_measures_a_paused_worker_and_resumes_it(cluster):
    scenario = small_scenario(events=[{"action": "pause", "worker": 2, "at_s": 0.5,
                                       "duration_s": 2.0}])
    result = run_arm(cluster, Arm("BSP", "bsp"), scenario, seed=1)
    assert [e[1:] for e in result["events"]] == [(2, "pause"), (2, "resume")]
    assert result["pushed"] == 120
    assert result["applied"] + result["dropped"] + result["pending"] == result["pushed"]
    assert 0 < result["hardware_efficiency"] <= 1.05
    assert 0 <= result["idle_fraction"] < 1
    assert result["curve"][-1]["pushes"] == 120 and result["tta_s"] is None


@pytest.mark.cluster
def test_run_arm_with_allocation_records_batch_sizes(cluster):
    result = run_arm(cluster, Arm("BSP+alloc", "bsp", allocation="last"), small_scenario())
    assert result["batch_sizes"] and sum(result["batch_sizes"][-1]["sizes"]) == 32 * NUM_WORKERS
    assert result["dropped"] == 0
    # The steady-state window is the run's second half: fewer pushes than the whole run.
    steady, last = result["steady"], result["curve"][-1]
    # Efficiency is measured against stand-alone speeds timed at another moment: on a
    # loaded machine it lands above 1 (1.62 seen), so only its presence is a test here;
    # the benchmarks report it.
    assert len(result["curve"]) >= 2 and 0 < steady["hardware_efficiency"] < float("inf")
    assert sum(w["pushes"] for w in last["workers"]) == 120
    assert all(t > 0 for t in steady["worker_step_times"])


@pytest.mark.cluster
def test_background_evaluation_is_kerass_and_stops_fit_at_the_interpolated_target(cluster):
    """Validation beside training: the numpy evaluation of the weights read from the PS
    equals model.evaluate on them; evaluations are close together; fit stops within a
    few steps of the target (no drain per evaluation); the reported time is the
    interpolated crossing of the curve (the report's one definition)."""
    from cluster_sim.harness.run import RunConfig
    from cluster_sim.report.results import curve_tta, trailing_mean
    scenario = small_scenario(max_pushes=900, target_accuracy=0.85)
    config = RunConfig.from_scenario(scenario, check_evaluator=True, eval_min_gap_s=0.1)
    result = run_arm(cluster, Arm("BSP", "bsp"), scenario, seed=0, config=config)
    check = result["evaluator"]["check"]
    assert check["numpy"]["loss"] == pytest.approx(check["keras"]["loss"], rel=1e-5)
    assert check["numpy"]["accuracy"] == pytest.approx(check["keras"]["accuracy"], abs=1e-6)
    curve = result["curve"]
    assert result["tta_s"] is not None and result["pushed"] < 900
    # Stopped soon after the first evaluation where the mean of the last five is at the
    # target (the time to target's definition): at most a few steps later.
    means = trailing_mean([p["accuracy"] for p in curve])
    first = next(p for p, m in zip(curve, means) if m >= 0.85)
    assert result["pushed"] - first["pushes"] <= 4 * NUM_WORKERS, (first, result["pushed"])
    assert result["tta_s"] == curve_tta(curve, target_accuracy=0.85)["tta_s"]
    before = [p for p in curve if p["wall_s"] < first["wall_s"]]
    assert before[-1]["wall_s"] < result["tta_s"] <= first["wall_s"]
    assert result["evaluator"]["points"] == len(curve) and result["evaluator"]["read_s_p50"] > 0
    assert [p["pushes"] for p in curve] == sorted(p["pushes"] for p in curve)


def test_window_metrics_counts_only_the_window():
    def point(wall, *workers):
        return {"wall_s": wall, "workers": [{"pushes": p, "samples": s, "busy_s": b}
                                            for p, s, b in workers]}
    start = point(10.0, (5, 50, 1.0), (5, 50, 3.0))
    end = point(12.0, (15, 150, 2.0), (7, 70, 3.8))
    m = window_metrics(start, end)
    assert m["samples_per_s"] == pytest.approx(60.0)          # 120 samples in 2 s
    # stand-alone speeds 100/s and 25/s: 60 of 125 samples/s
    assert m["hardware_efficiency"] == pytest.approx(0.48)
    assert m["worker_step_times"] == pytest.approx([0.1, 0.4])
    assert m["idle_fraction"] == pytest.approx(1 - (0.5 + 0.4) / 2)


@pytest.mark.cluster
def test_blackbox_duty_cycle_slows_the_worker_and_leaves_none_stopped(cluster):
    scenario = dataclasses.replace(small_scenario(), inject="sigstop")
    result = run_arm(cluster, Arm("ASP", "asp"), scenario, seed=1)
    assert result["applied"] + result["dropped"] + result["pending"] == result["pushed"] == 120
    # Half the wall time stopped: the slow worker's steps take far longer and it
    # makes fewer of the asynchronous pushes.
    # (Slower, not a factor: 1.40 against a 1.4 bound was seen on an idle 2-core run.)
    times = result["worker_step_times"]
    assert times[2] > max(times[0], times[1]), times
    assert result["worker_pushes"][2] < min(result["worker_pushes"][:2]), result["worker_pushes"]
    for w in range(NUM_WORKERS):
        assert proc_state(cluster.pid("worker", w)) != "T"


@pytest.mark.cluster
def test_deadline_allocation_shrinks_the_slow_workers_batch(cluster):
    # The injected compute dominates TensorFlow's per-step cost (a fast step is 48 ms of
    # sleep), so the slow worker's measured speed is clearly lower also on a loaded
    # machine; at 200 us/sample a CI run once measured one fast worker as slow as it.
    result = run_arm(cluster, ARMS["nbsgd"], small_scenario(us_per_sample=1500.0))
    sizes = result["batch_sizes"][-1]["sizes"]
    assert sizes[2] < min(sizes[:2]) and max(sizes) <= 32 and sum(sizes) < 32 * NUM_WORKERS, sizes
    assert result["dropped"] == 0


def test_every_builtin_arm_builds_its_policy():
    for arm in ARMS.values():
        assert 1 <= arm.make_policy().rule(4).k <= 4, arm


@pytest.mark.cluster
def test_scenario_and_cluster_sizes_must_match(cluster):
    with pytest.raises(ValueError, match="start the cluster from the scenario"):
        run_arm(cluster, Arm("BSP", "bsp"), parse_scenario({"name": "x", "workers": 5}))


def test_run_config_from_scenario_maps_the_harness_fields():
    from cluster_sim.harness.run import RunConfig
    from cluster_sim.scenarios import load_scenario
    config = RunConfig.from_scenario(load_scenario("static"), seed=3)
    assert config.speeds == (1.0, 1.0, 0.5, 0.25)
    assert (config.seed, config.batch_size, config.hidden) == (3, 32, (64, 64))
    with pytest.raises(TypeError):
        RunConfig.from_scenario(load_scenario("static"), no_such_field=1)


def test_progress_bar_ends_full_at_the_target_and_names_a_miss():
    from cluster_sim.harness.progress import TargetBar
    from cluster_sim.harness.run import RunConfig
    config = RunConfig(max_pushes=1200, target_accuracy=0.93)
    point = lambda pushes, accuracy: {"pushes": pushes, "accuracy": accuracy, "loss": 1.0}
    with TargetBar("BSP s0", config) as bar:
        assert "tracing the step" in str(bar.bar)  # not a silent wait
        bar(60, 0.5)
        bar.point(point(360, 0.94))
        bar.finish({"tta_s": 4.2, "final_accuracy": 0.94})
        assert bar.bar.n == bar.bar.total == 360  # full, not 30 % of the budget
        assert "reached target 0.93 in 4.2 s" in str(bar.bar)
    with TargetBar("ASP s0", config) as bar:
        bar(1200, 0.9)
        bar.finish({"tta_s": None, "final_accuracy": 0.9})
        assert "target 0.93 not reached (accuracy 0.900)" in str(bar.bar)
    with TargetBar("ASP s1", config, target_loss=0.3) as bar:
        bar.point(point(100, 0.9))
        assert "loss 1.000" in str(bar.bar) and "target loss 0.3" in str(bar.bar)
        bar.finish({"tta_s": None, "final_accuracy": 0.9, "final_loss": 0.5})
        assert "target loss 0.3 not reached (loss 0.500)" in str(bar.bar)
