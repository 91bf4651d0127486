"""The fair race's tables regenerated from a compact store (issue 46, item 8): a tiny
pruned race exported and rendered (tests/test_docs.py checks that every committed page
equals what its stores generate)."""

import json

import pytest

from test_bench_policies import TINY


def test_a_pruned_race_exports_a_compact_store_and_its_tables(tmp_path, capsys):
    from cluster_sim.__main__ import main
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    out, store = tmp_path / "race", tmp_path / "store"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "asp,adaptive", "--lr-grid",
                 "0.05,0.1,0.2", "--tune-seeds", "1", "--tune-stages", "--seeds", "1",
                 "--max-pushes", "120", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "coarse pass on seed 100" in printed
    assert main(["bench", "tables", str(store), "--from-runs", str(out)]) == 0
    page = capsys.readouterr().out
    rows = [json.loads(line) for line in next(store.glob("*_sim4.jsonl")).read_text().splitlines()]
    assert {r["seed"] for r in rows} == {0, 100} and all("curve" not in r for r in rows)
    # The tuning recomputed from the store is the bench's own choice.
    tuned = json.loads((out / "results.json").read_text())["scenarios"]
    chosen = next(iter(tuned.values()))["tuned_settings"]["asp"]
    asp = next(r for r in rows if r["seed"] == 0 and r["spec"].startswith("asp@")
               and "linear" not in r["spec"])
    assert asp["spec"] == f"asp@{chosen['lr']:g}" + (
        f"/{chosen['momentum']:g}" if chosen["momentum"] is not None else "")
    assert "### tiny, 4 simulated workers" in page and "(base rate, not tuned)" in page
    # The store serves --tuned-from as its runs did: the setting the bench chose.
    from cluster_sim.cli.bench_tables import store_tuned
    key = next(store.glob("*_sim4.jsonl")).name[:-len("_sim4.jsonl")]
    spec = store_tuned(store, key, 4, ["asp", "adaptive"])
    assert list(spec) == ["asp"] and (spec["asp"].lr, spec["asp"].momentum) == (
        chosen["lr"], chosen["momentum"])
    with pytest.raises(ValueError, match="no elsewhere on 4 workers in that store"):
        store_tuned(store, "elsewhere", 4, ["asp"])
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "asp", "--tuned-from",
                 str(store), "--seeds", "1", "--stop-after", "0",
                 "--out", str(tmp_path / "from_store")]) == 0
    capsys.readouterr()
    line = next(line for line in (tmp_path / "from_store" / "bench.md").read_text().splitlines()
                if line.startswith(f"Settings tuned in {store}: "))
    assert spec["asp"].text in line.split(": ")[1].split(", ")
    assert "ASP @linear=" in page and "Adaptive / rule" in page
    # Regenerated from the store alone, the same page.
    assert main(["bench", "tables", str(store)]) == 0
    assert capsys.readouterr().out == page
    # Adaptive re-run alone (with BSP, the baseline) replaces its runs on those seeds.
    again = tmp_path / "again"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "adaptive", "--lr-grid",
                 "0.05,0.1,0.2", "--tuned-from", str(out), "--seeds", "1",
                 "--max-pushes", "120", "--out", str(again)]) == 0
    capsys.readouterr()
    assert main(["bench", "tables", str(store), "--from-runs", str(out),
                 "--from-runs", str(again)]) == 0
    replaced = capsys.readouterr().out
    assert "replace the first command's" in replaced
    assert replaced.split("## tiny")[1] == page.split("## tiny")[1]  # the same runs again
    # An arm run alone is added onto the committed store itself (its runs directory
    # gone): it joins the store's arms, every other run kept.
    import shutil
    shutil.rmtree(out)
    before = {k: r for k, r in ((json.dumps(r, sort_keys=True), r) for r in rows)}
    alone = tmp_path / "alone"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "adaptive+unscaled",
                 "--tuned-from", str(store), "--seeds", "1", "--max-pushes", "120",
                 "--out", str(alone)]) == 0
    capsys.readouterr()
    assert main(["bench", "tables", str(store), "--add-runs", str(alone)]) == 0
    added = capsys.readouterr().out
    now = [json.loads(line) for line in next(store.glob("*_sim4.jsonl")).read_text().splitlines()]
    assert {json.dumps(r, sort_keys=True) for r in now} >= set(before)
    assert [r["policy"] for r in now if r["family"] == "adaptive+unscaled"] == [
        "Adaptive unscaled"]
    meta = json.loads((store / "meta.json").read_text())
    assert "Adaptive unscaled" in added and "adaptive+unscaled" in meta["arms"]
    # The commands it keeps name no directory of this machine.
    assert not any(arg.startswith("/") for argv in (meta["argv"], *meta["replaced_by"])
                   for arg in argv)
    # Runs made under other conditions (here a push limit) are refused, nothing written.
    other = tmp_path / "other"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "adaptive", "--tuned-from",
                 str(store), "--seeds", "1", "--max-pushes", "200", "--out", str(other)]) == 0
    capsys.readouterr()
    kept = (store / "meta.json").read_text()
    assert main(["bench", "tables", str(store), "--add-runs", str(other)]) == 2
    assert "max_pushes 120 against 200" in capsys.readouterr().err
    assert (store / "meta.json").read_text() == kept
    # So are runs on another cluster under the same name: the baseline BSP the bench
    # runs beside the asked arm comes out otherwise, and would not pair by seed.
    scenario.write_text(TINY + '[[events]]\naction = "kill"\nworker = 1\nat_s = 0.01\n')
    moved = tmp_path / "moved"
    assert main(["bench", "policies", "--simulate", "--costs", "none", "--scenario",
                 str(scenario), "--workers", "4", "--arms", "adaptive", "--tuned-from",
                 str(store), "--seeds", "1", "--max-pushes", "120", "--out", str(moved)]) == 0
    capsys.readouterr()
    assert main(["bench", "tables", str(store), "--add-runs", str(moved)]) == 2
    err = capsys.readouterr().err  # the baseline that ran beside, not the asked arm
    assert "changed since the store was made" in err and ": BSP" in err
    assert (store / "meta.json").read_text() == kept
