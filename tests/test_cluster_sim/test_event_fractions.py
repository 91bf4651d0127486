"""Pause and churn events placed at fractions of a reference run (issue 46, item 6):
reading them, placing them in seconds, refusing to play them unplaced, and `bench
policies` measuring the reference (tuned BSP without the events) on the tuning seeds."""

import json

import pytest

from cluster_sim.cli import event_reference
from cluster_sim.scenarios import UnresolvedEvents, load_scenario, parse_scenario
from cluster_sim.sim.speeds import make_speed_model
from test_bench_policies import TINY

PAUSE = {"action": "pause", "worker": 1, "at_fraction": 0.1, "duration_fraction": 0.2}
KILL = {"action": "kill", "worker": 0, "at_fraction": 0.5, "restart_at_fraction": 0.75}


def scenario(*events, **top):
    return parse_scenario({"workers": 2, "events": list(events), **top}, source="s.toml")


def test_fractions_are_placed_at_the_reference_among_fixed_seconds():
    s = scenario(PAUSE, KILL, {"action": "pause", "worker": 0, "at_s": 5.0, "duration_s": 1.0})
    assert [(e.at_s, e.worker, e.action) for e in s.events] == [(5.0, 0, "pause"),
                                                                (6.0, 0, "resume")]
    placed = s.resolve_events(200.0)
    assert [(e.at_s, e.worker, e.action) for e in placed.events] == [
        (5.0, 0, "pause"), (6.0, 0, "resume"), (20.0, 1, "pause"),
        (pytest.approx(60.0), 1, "resume"), (100.0, 0, "kill"), (150.0, 0, "restart")]
    assert placed.relative_events == () and placed.resolve_events(1.0) is placed
    assert "w0 kill at 100s" in placed.summary()
    assert "w0 kill at 0.5 of the reference run" in s.summary()
    # The file may say the reference itself; then it loads placed.
    assert scenario(PAUSE, event_reference_s=50.0).events[0].at_s == 5.0


def test_an_unplaced_scenario_is_refused_with_how_to_give_the_reference():
    s = scenario(PAUSE)
    with pytest.raises(UnresolvedEvents, match="event_reference_s = SECONDS.*--event-reference"):
        make_speed_model(s, 2, 300.0)
    from cluster_sim.harness.run import run_arm
    with pytest.raises(UnresolvedEvents, match="at_fraction"):
        run_arm(None, None, s)  # before it touches the cluster
    # Without fraction events nothing is asked for.
    make_speed_model(scenario({"action": "pause", "worker": 1, "at_s": 1.0,
                               "duration_s": 1.0}), 2, 300.0)


@pytest.mark.parametrize("events, top, problem", [
    ([dict(PAUSE, at_s=3.0)], {}, r"events\[0\]: mixes seconds \(at_s\) and fractions"),
    ([{"action": "pause", "worker": 1, "at_fraction": 0.1}], {}, "duration_fraction: missing"),
    ([dict(KILL, restart_at_fraction=0.4)], {}, "restart_at_fraction: must be after"),
    ([dict(PAUSE, at_fraction=-0.1)], {}, "at_fraction: must be a finite fraction"),
    ([PAUSE, dict(PAUSE, at_fraction=0.2)], {}, "worker 1: pause at 0.2 s while it is in a pause"),
    ([{"action": "pause", "worker": 1, "at_s": 1.0, "duration_s": 1.0}],
     {"event_reference_s": 9.0}, "event_reference_s: no event is placed at a fraction"),
    # Seconds and fractions that overlap only once placed: named at the reference.
    ([PAUSE, {"action": "pause", "worker": 1, "at_s": 25.0, "duration_s": 1.0}],
     {"event_reference_s": 200.0}, "at event_reference_s = 200: worker 1: pause at 25"),
])
def test_bad_fraction_events_are_named(events, top, problem):
    with pytest.raises(ValueError, match=problem):
        scenario(*events, **top)


def test_the_reference_is_measured_without_the_fraction_events_or_given():
    s = scenario(PAUSE, {"action": "pause", "worker": 0, "at_s": 5.0, "duration_s": 1.0})
    seen = []

    def measure(bare):
        seen.append(bare)
        return 80.0, "measured"

    placed, note = event_reference.resolve(s, None, measure)
    assert len(seen[0].events) == 2 and not seen[0].relative_events  # fixed events stay
    pause_at = lambda placed: next(e.at_s for e in placed.events if e.worker == 1)
    assert pause_at(placed) == 8.0 and note.startswith(
        "Events at fractions of a reference run of 80 s (measured): ")
    placed, note = event_reference.resolve(s, 40.0, measure)
    assert len(seen) == 1 and pause_at(placed) == 4.0 and "--event-reference" in note
    with pytest.raises(UnresolvedEvents):
        event_reference.resolve(s, None, None)
    fixed = scenario()
    assert event_reference.resolve(fixed, None, None) == (fixed, "")


def test_the_bench_places_the_events_at_tuned_bsps_time_on_the_tuning_seeds(tmp_path, capsys):
    from cluster_sim.__main__ import main
    path = tmp_path / "frac.toml"
    path.write_text(FRACTIONS)
    out = tmp_path / "out"
    command = ["bench", "policies", "--simulate", "--costs", "none", "--scenario", str(path),
               "--arms", "bsp", "--seeds", "1", "--tune-seeds", "100-101", "--lr-grid",
               "0.05,0.1", "--workers", "4", "--out", str(out)]
    assert main(command) == 0
    printed = capsys.readouterr().out
    (store,) = out.glob("*_sim4_reference_runs")  # the reference's runs, kept apart
    reference = [json.loads(line) for line in (store / "runs.jsonl").read_text().splitlines()]
    assert {r["seed"] for r in reference} == {100, 101}  # tuning seeds, never reported ones
    best = min(("BSP @lr=0.05", "BSP @lr=0.1"), key=lambda p: sorted(
        r["tta_s"] for r in reference if r["policy"] == p))
    seconds = sorted(r["tta_s"] for r in reference if r["policy"] == best)
    median = (seconds[0] + seconds[1]) / 2
    assert f"reference run {median:.1f} s ({best}'s median" in printed
    table = json.loads((out / "results.json").read_text())["scenarios"]
    (row,) = table.values()
    assert f"w2 pause at {0.2 * median:g}s" in row["events"]  # the stores state the seconds
    assert f"reference run of {median:g} s" in (out / "bench.md").read_text()
    capsys.readouterr()
    # A bench --tuned-from the compact store places them by the store's reference (one
    # measured again at the scenario's rate would move them); from the runs directory,
    # which keeps no choice of its reference, it asks for the seconds.
    from cluster_sim.cli import bench_tables
    bench_tables.export(out, tmp_path / "store")
    again = tmp_path / "again"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario", str(path),
                 "--arms", "bsp", "--seeds", "1", "--tuned-from", str(tmp_path / "store"),
                 "--workers", "4", "--out", str(again)]) == 0
    capsys.readouterr()
    (placed,) = json.loads((again / "results.json").read_text())["scenarios"].values()
    assert placed["events"].split(": ", 1)[1] == row["events"].split(": ", 1)[1]
    assert f"reference run of {median:g} s ({best} (tuned BSP's median" in (
        again / "bench.md").read_text()
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario", str(path),
                 "--arms", "bsp", "--seeds", "1", "--tuned-from", str(out), "--workers", "4",
                 "--out", str(tmp_path / "from_runs")]) == 2
    assert "give --event-reference SECONDS" in capsys.readouterr().err
    # Real runs take the reference from the command, before any cluster starts.
    assert main(["bench", "policies", "--scenario", str(path), "--arms", "bsp",
                 "--out", str(tmp_path / "real")]) == 2
    assert "--event-reference SECONDS" in capsys.readouterr().err


def test_a_time_budget_in_multiples_of_the_reference_stops_a_slow_arm(tmp_path, capsys):
    """``--time-budget 1.5x``: the reference (tuned BSP) is measured once on the tuning
    seeds, and a run far slower than it (a tenth of the rate) stops at 1.5 times it,
    never reaching; the tuned BSP itself is not stopped before it could reach."""
    from cluster_sim.__main__ import main
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    out = tmp_path / "out"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(path), "--arms", "bsp,bsp@0.005", "--seeds", "1", "--tune-seeds",
                 "100-101", "--lr-grid", "0.05,0.1", "--workers", "4", "--time-budget",
                 "1.5x", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count(": reference run ") == 1
    (row,) = json.loads((out / "results.json").read_text())["scenarios"].values()
    budget = row["time_budget_s"]
    median = float(printed.split(": reference run ")[1].split(" s")[0])
    assert budget == pytest.approx(1.5 * median, abs=0.1)
    assert f"Every run stops at 1.5x a reference run of" in (out / "bench.md").read_text()
    (store,) = out.glob("*_sim4_runs")
    runs = {r["policy"]: r for r in map(json.loads, (store / "runs.jsonl").read_text()
                                        .splitlines()) if r["seed"] == 0}
    slow = runs["BSP @lr=0.005"]
    assert slow["tta_s"] is None and slow["wall_s"] <= budget + 1.0, slow["wall_s"]
    from cluster_sim.cli import bench_tables
    bench_tables.export(out, tmp_path / "store")  # the compact store's tables say it
    section = bench_tables.store_section(tmp_path / "store")
    assert f"{budget:.4g} simulated s (`--time-budget`" in section
    # The reference's runs are named as such, not shown as an unfinished matrix.
    assert "4 simulated workers: the reference run" in section
    assert "No reported run yet" not in section
    with pytest.raises(ValueError, match="give seconds .* or a multiple"):
        event_reference.parse_budget("fast")
    assert main(["bench", "policies", "--scenario", str(path), "--arms", "bsp",
                 "--time-budget", "2x", "--out", str(tmp_path / "real")]) == 2
    assert "real runs measure no reference run" in capsys.readouterr().err


# The bench tests' tiny digits scenario, with a pause at fractions of the reference run.
FRACTIONS = TINY + """
[[events]]
action = "pause"
worker = 2
at_fraction = 0.2
duration_fraction = 0.3
"""


def test_the_framework_cost_probe_runs_a_scenario_with_fraction_events():
    """`bench policies --simulate` without ``--costs`` probes the framework costs on the
    first scenario: its fraction events (no reference yet) must not stop the probe."""
    from cluster_sim.cli.bench_costs import probe_scenario
    scenario = load_scenario("bench/pause")
    with pytest.raises(UnresolvedEvents):
        scenario.check_resolved()
    home = probe_scenario(scenario)
    home.check_resolved()
    assert (home.events, home.relative_events, home.slowdowns) == ((), (), ())
