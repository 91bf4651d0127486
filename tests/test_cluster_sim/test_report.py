"""Report: medians over seeds, TTA definition, files written, plots readable."""

import csv
import dataclasses
import json

import matplotlib.image as mpimg
import pytest

from cluster_sim import report
from cluster_sim.scenarios import load_scenario


def result(policy, seed, tta, acc=0.95, sps=1000.0, **extra):
    """A synthetic run_arm-style result with a 3-point curve."""
    curve = [{"wall_s": 5.0 * (i + 1), "pushes": 60 * (i + 1), "version": 20 * (i + 1),
              "loss": 1.0 / (i + 1), "accuracy": acc * (i + 1) / 3} for i in range(3)]
    r = {"policy": policy, "seed": seed, "tta_s": tta, "final_accuracy": acc,
         "wall_s": 15.0, "samples_per_s": sps, "staleness_p50": 1, "staleness_p95": 4,
         "pushed": 180, "applied": 170, "dropped": 5, "pending": 5, "version": 60,
         "rule": "x", "k_history": [{"version": 0, "k": 4, "wait": True, "rule": "x",
                                     "reason": "start"},
                                    {"version": 30, "k": 2, "wait": True, "rule": "x",
                                     "reason": "slow worker"}],
         "worker_pushes": [60, 60, 40, 20], "curve": curve}
    r.update(extra)
    return r


def results():
    out = []
    for seed, (bsp, asp, ada) in enumerate([(40.0, 20.0, 10.0), (60.0, None, 12.0),
                                           (50.0, 30.0, None)]):
        out.append(result("BSP()", seed, bsp, sps=500 + seed, hardware_efficiency=0.4,
                          idle_fraction=0.5))
        out.append(result("ASP()", seed, asp, sps=900 + 10 * seed,
                          staleness_histogram=[5, 10, 3]))
        out.append(result("Adaptive()", seed, ada, acc=0.96 - 0.01 * seed,
                          hardware_efficiency=0.8 + 0.05 * seed, idle_fraction=0.1,
                          staleness_histogram=[20, 1],
                          batch_sizes=[{"wall_s": 0.0, "sizes": [32, 32, 16, 8]},
                                       {"wall_s": 7.0, "sizes": [40, 40, 8]}]))
    return out


def test_median_tta_counts_misses_as_infinite():
    assert report.median_tta([10.0, 20.0, 30.0]) == 20.0
    assert report.median_tta([10.0, None, 30.0]) == 30.0
    assert report.median_tta([10.0, None, None]) is None
    assert report.median_tta([10.0, 20.0, None, 40.0]) == 30.0
    assert report.median_tta([10.0, None]) is None
    assert report.median_tta([]) is None


def test_summarise_medians_and_ratios():
    by = {s["policy"]: s for s in report.summarise(results())}
    assert list(by) == ["BSP()", "ASP()", "Adaptive()"]
    bsp, asp, ada = by["BSP()"], by["ASP()"], by["Adaptive()"]
    assert (bsp["tta_s"], bsp["tta_reached"], bsp["runs"], bsp["seeds"]) == (50.0, 3, 3, [0, 1, 2])
    assert (asp["tta_s"], asp["tta_reached"]) == (30.0, 2)
    assert (ada["tta_s"], ada["tta_reached"]) == (12.0, 2)
    assert bsp["samples_per_s"] == 501.0 and asp["samples_per_s"] == 910.0
    assert ada["final_accuracy"] == pytest.approx(0.95)
    assert ada["hardware_efficiency"] == pytest.approx(0.85)
    assert asp["hardware_efficiency"] is None  # no seed reported it
    assert ada["tta_vs_bsp"] == pytest.approx(12 / 50)
    assert ada["tta_vs_asp"] == pytest.approx(12 / 30)
    assert bsp["tta_vs_bsp"] == 1.0
    assert len(ada["per_seed"]) == 3


def test_seed_defaults_to_run_index_and_no_baseline_gives_no_ratio():
    rs = [result("KSync(k=2)", None, 10.0), result("KSync(k=2)", None, 20.0)]
    for r in rs:
        del r["seed"]
    (s,) = report.summarise(rs)
    assert s["seeds"] == [0, 1] and s["tta_s"] == 15.0
    assert s["tta_vs_bsp"] is None and s["tta_vs_asp"] is None


def test_write_report_files(tmp_path):
    scenario = load_scenario("static")
    summaries = report.write_report(tmp_path / "run", results(), title="static test",
                                    scenario=scenario, meta={"command": "demo"})
    run = tmp_path / "run"
    data = json.loads((run / "results.json").read_text())
    assert data["scenario"]["name"] == "static" and data["meta"] == {"command": "demo"}
    assert "infinite" in data["tta_definition"]
    assert [p["policy"] for p in data["policies"]] == ["BSP()", "ASP()", "Adaptive()"]
    assert data["policies"][1]["tta_s"] == 30.0
    assert data["policies"][1]["per_seed"][1]["tta_s"] is None
    assert summaries[2]["tta_s"] == data["policies"][2]["tta_s"]

    with open(run / "curves.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 * 3 * 3
    assert list(rows[0]) == ["policy", "seed", "wall_s", "pushes", "version", "loss",
                             "accuracy"]
    assert rows[-1]["policy"] == "Adaptive()" and rows[-1]["seed"] == "2"

    md = (run / "report.md").read_text()
    assert "# static test" in md and "| Adaptive() |" in md
    assert "0.24" in md  # Adaptive TTA / BSP TTA = 12 / 50
    for name in ("accuracy.png", "loss.png", "k_over_time.png", "staleness.png",
                 "batch_sizes.png"):
        path = run / name
        assert f"]({name})" in md
        image = mpimg.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100
        assert image.std() > 0  # something was drawn, not a blank canvas


def test_optional_plots_skipped_without_data(tmp_path):
    rs = [result("BSP()", 0, 10.0, k_history=[]), result("ASP()", 0, None, k_history=[])]
    report.write_report(tmp_path, rs)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"results.json", "curves.csv", "report.md", "accuracy.png", "loss.png"} <= names
    assert not names & {"k_over_time.png", "staleness.png", "batch_sizes.png"}
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["policies"][1]["tta_s"] is None and data["policies"][1]["tta_vs_bsp"] is None


def test_json_has_no_nan(tmp_path):
    report.write_report(tmp_path, [result("ASP()", 0, 5.0, samples_per_s=float("nan"))])
    text = (tmp_path / "results.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["policies"][0]["samples_per_s"] is None


def test_format_table_text_and_markdown():
    text = report.format_table(results())
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["policy", "seeds", "TTA"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    ada = next(l for l in lines if l.startswith("Adaptive()")).split()
    assert ada[1:6] == ["3", "12.0", "2/3", "0.24", "0.40"]
    assert report.format_table(report.summarise(results())) == text
    assert report.markdown_table(results()).count("\n") == 2 + 2


@pytest.mark.parametrize("bad, match", [
    ([], "no results"),
    ([{"policy": "BSP()"}], r"results\[0\] \(policy 'BSP\(\)'\) lacks tta_s"),
    (["x"], r"results\[0\] is str"),
    ([dict(result("BSP()", 0, 1.0), curve=[{"wall_s": 1.0}])], r"curve\[0\] lacks pushes"),
])
def test_bad_results_fail_clearly_before_writing(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        report.write_report(tmp_path / "out", bad)
    assert not (tmp_path / "out").exists()


def test_cli_rebuilds_report_from_results_json(tmp_path, capsys):
    report.write_report(tmp_path, results(), title="again", scenario=load_scenario("pause"))
    for name in ("report.md", "accuracy.png"):
        (tmp_path / name).unlink()
    assert report.main([str(tmp_path)]) == 0
    assert "Adaptive()" in capsys.readouterr().out
    md = (tmp_path / "report.md").read_text()
    assert "# again" in md and "Scenario: pause" in md and (tmp_path / "accuracy.png").stat().st_size
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["policies"][2]["tta_s"] == 12.0 and data["scenario"]["name"] == "pause"


def test_cli_errors_clearly(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("{}")
    assert report.main([str(tmp_path)]) == 2
    assert "not a results.json" in capsys.readouterr().err


def test_a_simulator_result_renders_with_the_same_report(tmp_path):
    import predictor
    import ksync
    from cluster_sim.sim import SimConfig, Simulation

    config = SimConfig(num_workers=4, max_pushes=120, eval_every=40, stop_at_target=False)
    runs = [Simulation(ksync.Adaptive(refresh_every=10),
                       dataclasses.replace(config, allocate_every=5),
                       batch_allocation=predictor.BatchAllocator(128, min_batch=4)).run(),
            Simulation(ksync.BSP(), config).run()]
    assert runs[0]["batch_sizes"][0] == {"wall_s": 0.0, "sizes": [32, 32, 32, 32]}
    assert len(runs[0]["batch_sizes"]) > 1 and runs[1]["batch_sizes"] == []
    summaries = report.write_report(tmp_path, runs, title="simulated")
    assert [s["policy"].split("(")[0] for s in summaries] == ["Adaptive", "BSP"]
    for name in ("report.md", "batch_sizes.png", "k_over_time.png", "staleness.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Rebuilt from the file alone, as `python -m cluster_sim report FILE` does.
    assert report.main([str(tmp_path / "results.json")]) == 0


def test_one_tta_definition_for_every_table():
    # A seed that never reached the target counts as infinite: [10, never, never] has none.
    runs = [result("BSP()", s, tta) for s, tta in enumerate([10.0, None, None])]
    (s,) = report.summarise(runs)
    assert s["tta_s"] is None and s["tta_reached"] == 1


def test_older_result_files_still_render(tmp_path):
    old = dict(result("BSP()", 0, 5.0), batch_sizes=[32, 32, 16, 8])  # the old simulator's
    (tmp_path / "old.json").write_text(json.dumps({"config": {}, "results": [old]}))
    assert report.main([str(tmp_path / "old.json")]) == 0
    assert (tmp_path / "batch_sizes.png").stat().st_size > 0
    calibration = {"costs": {}, "results": {"static": [old], "trace": [old]}}
    (tmp_path / "real.json").write_text(json.dumps(calibration))
    runs, _ = report.load_results(tmp_path / "real.json")
    assert len(runs) == 2 and runs[0]["batch_sizes"][0]["sizes"] == [32, 32, 16, 8]


def test_the_table_helpers_are_public():
    assert report.format_cell(None, ".1f") == "-" and report.format_cell(2.25, ".1f") == "2.2"
    assert report.version_to_wall({"curve": [{"wall_s": 4.0, "version": 8}]})(2) == 1.0
    assert report.text_table(["a"], [["xyz"]]).splitlines() == ["a", "---", "xyz"]


def test_report_defines_every_column_and_ends_the_table_with_a_verdict(tmp_path):
    from cluster_sim.report.writer import _table
    runs = [result("BSP()", i, tta) for i, tta in enumerate((10.0, 12.0))]
    runs += [result("ASP()", i, tta) for i, tta in enumerate((5.0, 6.0))]
    summaries = report.write_report(tmp_path, runs)
    header, _ = _table(summaries)
    text = (tmp_path / "report.md").read_text()
    for column in header[1:]:
        defined = column.replace("TTA/ASP", "TTA/BSP").replace("p95", "p50")
        assert defined in report.COLUMNS, column
    for column in ("idle", "step spread", "stale p50", "hw eff"):
        assert f"- `{column}`: " in text
    # ASP's time over BSP's, seed by seed: 5/10 and 6/12, so 0.50x [0.50, 0.50].
    assert ("**Verdict.** ASP() reached the target fastest: 0.50x BSP's time [0.50, 0.50] "
            "(median ratio paired by seed over 2 seeds, [min, max] of them: fewer than 5 "
            "seeds give no interval), faster than BSP in every seed.") in text


def test_curve_tta_interpolates_the_loss_crossing_and_records_accuracys():
    """The one time-to-target definition (harness and simulator call it): the loss
    target when there is one, interpolated; accuracy's crossing beside it; how far
    apart the evaluations were up to the crossing."""
    from cluster_sim.report.results import TTA_WINDOW, curve_tta, target_reached
    curve = [{"wall_s": t, "loss": l, "accuracy": a} for t, l, a in
             [(0.0, 2.3, 0.1), (10.0, 0.9, 0.6), (12.0, 0.5, 0.8), (14.0, 0.3, 0.85)]]
    r = curve_tta(curve, target_loss=0.7, target_accuracy=0.84, window=1)
    assert r["tta_s"] == pytest.approx(11.0)       # half way from 0.9 to 0.5
    assert r["tta_accuracy_s"] == pytest.approx(13.6)
    assert r["max_eval_gap"] == pytest.approx(10.0 / 11.0)
    # Without a target loss, accuracy is the target; never reached is None.
    assert curve_tta(curve, target_accuracy=0.84, window=1)["tta_s"] == pytest.approx(13.6)
    missed = curve_tta(curve, target_loss=0.1, target_accuracy=0.99)
    assert missed["tta_s"] is None and missed["tta_accuracy_s"] is None
    assert missed["max_eval_gap"] == pytest.approx(10.0 / 14.0)
    # By default the mean of the last TTA_WINDOW evaluations: a swinging plateau whose
    # dips cross the target has not reached it; a curve that settles under it has.
    assert TTA_WINDOW == 5
    swings = [{"wall_s": float(t), "loss": l, "accuracy": 0.6}
              for t, l in enumerate([1.2, 1.05, 0.97, 1.11, 1.03, 1.06, 0.97, 1.05])]
    r = curve_tta(swings, target_loss=0.98)
    assert r["tta_s"] is None and r["tta_first_s"] == pytest.approx(1.875)
    assert not target_reached(swings, target_loss=0.98)
    settles = swings + [{"wall_s": 8.0 + t, "loss": 0.95, "accuracy": 0.7} for t in range(5)]
    assert target_reached(settles, target_loss=0.98)
    assert curve_tta(settles, target_loss=0.98)["tta_s"] == pytest.approx(
        9.0 + (0.996 - 0.98) / (0.996 - 0.974))  # means 0.996 at 9 s, 0.974 at 10 s
