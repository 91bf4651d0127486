"""The calibration's arithmetic: framework costs from probe epochs, timing error."""

import pytest

from cluster_sim.cli.calibrate import (costs_from_probe, error_table, time_at_version,
                                       timing_error)


def probe_raw(asp_epochs, bsp_epochs):
    return {"asp": {"epoch_s": asp_epochs, "iteration_time_s": [0.02, 0.03, 0.02]},
            "bsp": {"epoch_s": bsp_epochs, "iteration_time_s": [0.02]}}


def test_costs_come_from_median_epochs_so_one_disturbed_run_does_not_set_them():
    quiet = costs_from_probe(probe_raw({20: [0.3] * 4, 100: [1.1] * 4},
                                       {20: [0.5] * 4, 100: [1.7] * 4}), 4, 0.01)
    # One epoch of each length three times as slow (another job took the cores).
    noisy = costs_from_probe(probe_raw({20: [0.3] * 3 + [0.9], 100: [1.1] * 3 + [3.3]},
                                       {20: [0.5] * 3 + [1.5], 100: [1.7] * 3 + [5.1]}),
                             4, 0.01)
    for key in ("chunk_overhead_s", "step_overhead_s", "read_overhead_s", "gate_latency_s"):
        assert noisy[key] == pytest.approx(quiet[key]), key
    # ASP: 10 ms a push over 4 workers = a 40 ms step. The measured iteration time (20 ms,
    # the median) starts at the version read and includes the 10 ms injected sleep, so
    # 10 ms follow the parameter read and the other 20 ms of framework cost precede it.
    # BSP's 15 ms a push = a 60 ms round, 20 ms more than a step.
    assert quiet["step_overhead_s"] == pytest.approx(0.01)
    assert quiet["read_overhead_s"] == pytest.approx(0.02)
    assert quiet["gate_latency_s"] == pytest.approx(0.02)
    assert quiet["chunk_overhead_s"] == pytest.approx((0.1 + 0.2) / 2)


def run(seed, tta, points, policy="asp"):
    return {"policy": policy, "seed": seed, "tta_s": tta, "samples_per_s": 100.0,
            "staleness_p95": 3, "final_accuracy": 0.95,
            "curve": [{"wall_s": t, "version": v} for t, v in points]}


def test_time_at_version_interpolates_and_says_never():
    curve = [{"wall_s": 2.0, "version": 60}, {"wall_s": 5.0, "version": 120}]
    assert time_at_version(curve, 30) == pytest.approx(1.0)
    assert time_at_version(curve, 90) == pytest.approx(3.5)
    assert time_at_version(curve, 121) is None


def test_timing_error_pairs_the_real_runs_update_count():
    real = run(0, 4.0, [(2.0, 60), (4.0, 120)])
    # The simulation reached 120 updates at 5 s, whatever its accuracy did then.
    assert timing_error(real, run(0, None, [(2.5, 60), (5.0, 120)])) == pytest.approx(0.25)
    assert timing_error(run(0, None, [(2.0, 60)]), run(0, 3.0, [(3.0, 60)])) is None
    assert timing_error(real, run(0, None, [(2.5, 60)])) is None


def test_error_table_reports_tta_and_timing_errors_per_policy():
    real = [run(0, 4.0, [(2.0, 60), (4.0, 120)]), run(1, 4.0, [(2.0, 60), (4.0, 120)])]
    sim = [run(0, 6.0, [(3.0, 60), (6.0, 120)]), run(1, None, [(4.0, 60), (8.0, 120)])]
    table = error_table(real, sim)
    row = table.splitlines()[2].split()
    # sim TTA: median of 6 s and never is never ("-"); t@v: median of +50% and +100%.
    assert row[:5] == ["asp", "4.0", "-", "-", "+75%"], table


def test_reuse_simulates_again_and_writes_both_sides_as_reports(tmp_path, capsys):
    """The --reuse path end to end on a saved real.json (here made by the simulator): the
    error table, and the real and simulated runs as the demo's reports."""
    import json

    import ksync
    from cluster_sim.__main__ import main
    from cluster_sim.sim import SimConfig, simulate

    real = simulate(ksync.BSP(), SimConfig(num_workers=4, max_pushes=240, eval_every=60))
    real["policy"] = "BSP"  # the harness labels runs by their arm's label
    raw = probe_raw({"20": [0.3], "100": [1.1]}, {"20": [0.5], "100": [1.7]})
    (tmp_path / "real.json").write_text(json.dumps(
        {"costs": {"raw": raw}, "specs": ["bsp"], "seeds": 1, "results": {"static": [real]}}))
    out = tmp_path / "out"
    assert main(["calibrate", "--reuse", str(tmp_path), "--scenarios", "static",
                 "--seeds", "1", "--out", str(out)]) == 0
    assert "t@v err" in capsys.readouterr().out
    for side in ("real", "simulated"):
        data = json.loads((out / "static" / side / "results.json").read_text())
        assert [p["policy"] for p in data["policies"]] == ["BSP"]
    assert (out / "calibration.txt").read_text().startswith("real and simulated")


def test_arms_are_read_by_the_arm_spec_parser_and_policies_is_the_old_name(tmp_path, capsys):
    from cluster_sim.__main__ import build_parser, main
    from cluster_sim.cli.calibrate import scenario_arms
    from cluster_sim.harness.arms import parse_arm_specs
    from cluster_sim.scenarios import load_scenario
    parser = build_parser()
    for option in ("--arms", "--policies"):
        args = parser.parse_args(["calibrate", option, "bsp@0.1,kasync=3"])
        assert args.arms == "bsp@0.1,kasync=3"
    arms = scenario_arms(parse_arm_specs("bsp@0.1,kasync=3"), load_scenario("static"))
    assert [a.label for a in arms] == ["BSP @lr=0.1", "KAsync(k=3)"]
    assert arms[0].learning_rate.rate == 0.1 and arms[1].learning_rate is None
    assert main(["calibrate", "--arms", "ksync:k=3", "--out", str(tmp_path)]) == 2
    assert "arm 'ksync:k=3'" in capsys.readouterr().err
