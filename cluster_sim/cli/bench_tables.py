"""``python -m cluster_sim bench tables DIR``: the fair race's tables (issue 46), regenerated
from a compact store committed to the repository.

A compact store (e.g. ``cluster_sim/results/race_sim8/``) holds, per scenario and worker
count, ``SCENARIO_simN.jsonl``: one line per run of a ``bench policies --simulate
--lr-grid ... --tune-seeds ...`` matrix, tuning seeds included (`compact_run`: the arm's
spec, seed, time to each target, final loss and accuracy, updates, dropped gradients;
no curves), and ``meta.json``: the bench's command, seeds, grid, costs and the commit and
date of the export. The page is generated, never edited by hand:

```
python -m cluster_sim bench tables cluster_sim/results/race_sim8 > docs/benchmarks/race.md
```

Several stores make one page (e.g. a late-target pass kept apart:
``bench tables cluster_sim/results/race_sim8 cluster_sim/results/race_sim8_late``).

The tables recompute each rule's tuned setting from the tuning runs in the store (the
bench's own choice: `cluster_sim.cli.arm_grid.tuning_choices`), then report on the other
seeds: each rule at its tuned setting (flagged where the setting sits at an edge of its
grid), its linear-scaling arm, Adaptive at the base learning rate, times to target with a
range (under 5 seeds) or a 90 % interval (`cluster_sim.report.stats.seed_interval`) and
ratios paired by seed: to tuned BSP, and Adaptive over each rule.

``--from-runs OUT`` first (re)writes the store from a bench's ``--out`` directory (its
``results.json`` and run stores), e.g. after more of the matrix is made:

```
python -m cluster_sim bench tables cluster_sim/results/race_sim8 --from-runs runs/race_sim8
```

Adaptive's runs are an arm of their own (``Adaptive``, the base learning rate): to re-run
them alone (e.g. once Adaptive's default changes) and replace them in the tables, from
the bench's runs directory or, with ``--add-runs``, onto the committed store itself (the
runs directory is git-ignored and may be gone; runs made under other conditions than the
store's are refused):

```
python -m cluster_sim bench policies --simulate --scenario homogeneous --arms adaptive \
    --tuned-from cluster_sim/results/race_sim8 --seeds 0-9 \
    --costs cluster_sim/scenarios/bench/costs_25ms.json --out runs/race_sim8_adaptive
python -m cluster_sim bench tables cluster_sim/results/race_sim8 \
    --add-runs runs/race_sim8_adaptive > docs/benchmarks/race.md
```
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
import subprocess
import sys

from cluster_sim.cli import seeds_text
from cluster_sim.cli.arm_grid import (BASE_ONLY, ORDER, bench_arms, grid_edges, matrix_specs,
                                      per_seed, tuning_choices)
from cluster_sim.harness.arms import parse_arm_specs
from cluster_sim.report.tables import format_interval, markdown_table_rows
from ksync.learning_rate import LearningRate

__all__ = ["compact_run", "export", "race_page", "read_store", "store_arms",
           "tuned_specs", "store_tuned", "store_reference", "store_key", "portable_argv",
           "add_arguments", "run"]

META = "meta.json"
#: Where the committed compact stores live.
RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results"


def store_key(scenario: str, num_workers: int) -> str:
    """The name a store gives ``scenario`` on ``num_workers`` workers (its run store's
    directory without ``_runs``, its compact file without ``.jsonl``).

    >>> store_key("bench/static", 8)
    'bench_static_sim8'
    """
    return f"{scenario.replace('/', '_')}_sim{num_workers}"


def portable_argv(argv) -> list[str]:
    """``argv`` as a store keeps it: an absolute path inside the repository relative to
    its top, one outside it (a scratch ``--out``) as ``runs/NAME``, so that a clone
    names no directory of the machine that made the runs.

    >>> portable_argv(["--out", "/scratch/x2_race", "--tuned-from",
    ...                str(RESULTS / "race_sim8"), "--seeds", "0-9"])
    ['--out', 'runs/x2_race', '--tuned-from', 'cluster_sim/results/race_sim8', '--seeds', '0-9']
    """
    out = []
    for arg in argv:
        path = pathlib.PurePath(arg)
        if path.is_absolute():
            shown = _shown(pathlib.Path(arg))
            arg = shown if not pathlib.PurePath(shown).is_absolute() else f"runs/{path.name}"
        out.append(arg)
    return out


def _outcome(run: dict) -> tuple:
    """What a deterministic simulated run ends at: the same arm, setting and seed on the
    same cluster and simulator ends at the same."""
    return run["tta"], run["final_loss"], run["updates"]


def _target_key(loss: float) -> str:
    return f"{loss:g}"


def compact_run(run: dict, spec: str, targets) -> dict:
    """What the tables need of a stored run (`cluster_sim.cli.run_store`): its arm
    ``spec`` (``asp@0.005/0.5``), seed, and time to each of ``targets`` (losses) at or
    above the run's own target (a run that ran to a lower one holds them all; None:
    never reached).

    >>> run = {"policy": "BSP", "seed": 3, "tta_s": 4.0, "target_loss": 0.5,
    ...        "curve": [{"wall_s": t, "loss": l} for t, l in enumerate([2, 1, .9, .6, .5, .4])],
    ...        "final_loss": 0.4, "final_accuracy": 0.8, "version": 50, "dropped": 0}
    >>> c = compact_run(run, "bsp@0.1", [0.5, 1.0, 0.1])
    >>> c["tta"], c["spec"], c["updates"]   # the trailing mean of 5 evaluations
    ({'0.5': None, '1': 4.0}, 'bsp@0.1', 50)
    """
    from cluster_sim.report.results import curve_tta
    own = run["target_loss"]
    if own is None:  # a workload with an accuracy target: that one alone
        tta = {f"accuracy {run['target_accuracy']:g}": run["tta_s"]}
    else:
        tta = {_target_key(loss): curve_tta(run["curve"], target_loss=loss)["tta_s"]
               for loss in sorted(targets) if loss >= own}
    return {"spec": spec, "policy": run["policy"], "family": run.get("family"),
            "seed": run["seed"], "tta": tta,
            "final_loss": run.get("final_loss"), "final_accuracy": run.get("final_accuracy"),
            "updates": run.get("version"), "dropped": run.get("dropped")}


def _full_arms(meta, entry, tuned=None):
    """Every arm of the matrix's grid on the entry's workers (labels as stored): with
    ``tuned`` (`ArmSpec`s by rule) or ``entry["settings"]`` (a matrix run at settings
    chosen elsewhere, ``--tuned-from``) those settings."""
    from cluster_sim.harness.arms import ArmSpec
    base = LearningRate(entry["base_lr"], momentum=entry["base_momentum"])
    lr_grid = meta["lr_grid"] if meta["lr_grid"] in (None, "auto") else tuple(meta["lr_grid"])
    tuned = tuned or {f: ArmSpec(f, s.get("value"), s.get("lr"), s.get("momentum"))
                      for f, s in (entry.get("settings") or {}).items()}
    return bench_arms(matrix_specs(",".join(meta["arms"])), entry["workers"], tuned or None,
                      base=base, lr_grid=lr_grid, batch_size=entry["batch_size"]), base


def _git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def export(runs_dirs, store_dir, targets=None, onto_store: bool = False) -> list[str]:
    """(Re)write the compact store ``store_dir`` from ``bench policies --simulate``
    ``--out`` directories ``runs_dirs`` (one, or several: a later one's runs replace the
    earlier ones' of the same arm and setting on the seeds it ran, e.g. Adaptive re-run
    alone with ``--tuned-from``); returns the files written. ``onto_store``: start from the store's
    own runs instead (its bench's ``--out`` directory, git-ignored, may be gone), the
    first directory's runs replacing them as a later one's would. ``targets``: the losses
    to keep times for besides each store's own (default: its workload's early and late
    targets, `cluster_sim.cli.bench_config.workload_targets`). ValueError, and nothing
    written, when a later directory's runs were made under other conditions (learning
    rate, batch, costs per sample, push or time limit, target) than the store's."""
    from cluster_sim.cli.bench_config import workload_targets
    from cluster_sim.cli.run_store import saved_conditions
    runs_dirs = [pathlib.Path(d) for d in ([runs_dirs] if isinstance(runs_dirs, (str, pathlib.Path))
                                           else runs_dirs)]
    store_dir = pathlib.Path(store_dir)
    meta, merged = None, {}
    if onto_store:
        meta, rows = read_store(store_dir)
        meta.setdefault("replaced_by", [])
        merged = {key: {(r["policy"], r["seed"]): r for r in runs} for key, runs in rows.items()}
    for runs_dir in runs_dirs:
        bench = json.loads((runs_dir / "results.json").read_text())
        if meta is None:
            meta = {k: bench["meta"][k] for k in ("argv", "seeds", "tune_seeds", "arms",
                                                  "lr_grid", "tune_stages", "target")
                    if k in bench["meta"]}
            meta["argv"] = portable_argv(meta["argv"])
            # A bench made before its meta said so: --tune-stages in its command.
            meta.setdefault("tune_stages", "--tune-stages" in meta["argv"])
            meta["costs"] = {k: v for k, v in bench["costs"].items() if k != "raw"}
            meta["commit"] = _git("rev-parse", "--short=12", "HEAD")
            meta["date"] = _git("show", "-s", "--format=%cs", "HEAD")
            meta["stores"], meta["replaced_by"] = {}, []
        else:
            meta["replaced_by"].append(portable_argv(bench["meta"]["argv"]))
            # An arm run alone joins the store's arms (its rows are labelled by them).
            meta["arms"] += [a for a in bench["meta"]["arms"] if a not in meta["arms"]]
        # The arms the command asked for (``arms`` adds BSP, the baseline, when absent);
        # a bench made before it said so: its command line's.
        argv = bench["meta"]["argv"]
        asked = bench["meta"].get("asked") or (argv[argv.index("--arms") + 1]
                                               if "--arms" in argv else "")
        asked = {spec.name for spec in parse_arm_specs(asked, ORDER)} if asked else set()
        for path in sorted(runs_dir.glob("*_sim*_runs")):
            key = path.name[:-len("_runs")]
            if not (path / "runs.jsonl").exists():
                continue  # a store opened, no run made yet
            conditions = saved_conditions(path)
            run_config, sim = conditions["run_config"], conditions["simulator"]
            own = sim["target_loss"]
            wanted = (sorted({own, *(targets or workload_targets(own))})
                      if own is not None else [])
            # The store's own target, or (a run to the late target) the highest kept.
            early = own if run_config["target_loss"] is None else max(wanted)
            accuracy = f"accuracy {sim['target_accuracy']:g}"
            made = {
                "scenario": conditions["scenario"].split(":")[0],
                "workers": sim["num_workers"],
                "early": _target_key(early) if early is not None else accuracy,
                "own": _target_key(own) if own is not None else accuracy,
                "base_lr": run_config["learning_rate"],
                "base_momentum": run_config["momentum"],
                "batch_size": run_config["batch_size"],
                "us_per_sample": conditions["us_per_sample"],
                "max_pushes": sim["max_pushes"], "max_time_s": sim.get("max_time_s")}
            entry = meta["stores"].setdefault(key, made)
            differ = {k: (entry.get(k), v) for k, v in made.items() if entry.get(k) != v}
            if differ:
                raise ValueError(f"{path}: its runs were made under other conditions than "
                                 f"{store_dir / key}'s ({key}: store, runs: "
                                 + ", ".join(f"{k} {a!r} against {b!r}"
                                             for k, (a, b) in differ.items())
                                 + "); run them with the store's bench settings")
            if not meta.get("tune_seeds"):  # settings chosen elsewhere (--tuned-from)
                scenario_key = f"{key.rsplit('_sim', 1)[0]}@{sim['num_workers']}"
                settings = bench["scenarios"].get(scenario_key, {}).get("tuned_settings")
                entry.setdefault("settings", {f: {k: v.get(k) for k in ("value", "lr",
                                                                        "momentum")}
                                              for f, v in (settings or {}).items()})
            arms, _ = _full_arms(meta, entry)
            spec = {a.arm.label: a.spec.text if a.spec else a.family for a in arms}
            new = {}
            for line in (path / "runs.jsonl").read_text().splitlines():
                try:
                    run = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed bench
                row = compact_run(run, spec.get(run["policy"], run["policy"]), wanted)
                new[row["policy"], row["seed"]] = row
            # The simulator is deterministic: a run the bench made beside the arms it
            # was asked for (the baseline BSP) that comes out otherwise than the same
            # arm, setting and seed before was made on another cluster or simulator,
            # and the store's other runs would no longer pair with the new ones by seed.
            had = merged.get(key, {})
            changed = sorted(k for k, r in new.items() if k in had and r["family"] not in asked
                             and _outcome(had[k]) != _outcome(r))
            if changed:
                (policy, seed), *_ = changed
                raise ValueError(f"{path}: {policy} on seed {seed} ended at {new[policy, seed]['tta']} "
                                 f"s to target, loss {new[policy, seed]['final_loss']:.6g} there "
                                 f"and {had[policy, seed]['tta']}, "
                                 f"{had[policy, seed]['final_loss']:.6g} in {store_dir / key} "
                                 f"({len(changed)} such runs): the scenario or the simulator "
                                 "changed since the store was made; re-make the store")
            merged[key] = {**had, **new}
    written = []
    store_dir.mkdir(parents=True, exist_ok=True)
    for key, rows in merged.items():
        out = store_dir / f"{key}.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in
                               sorted(rows.values(), key=lambda r: (r["seed"], r["policy"]))))
        written.append(str(out))
    if not meta["replaced_by"]:
        del meta["replaced_by"]
    (store_dir / META).write_text(json.dumps(meta, indent=1) + "\n")
    return written + [str(store_dir / META)]


# ---- the tables -------------------------------------------------------------------------

def _times(runs: dict, seeds, target: str) -> list:
    return [runs[s]["tta"].get(target) if s in runs else None for s in seeds]


def _interval(values) -> str:
    from cluster_sim.report.stats import seed_interval
    if not values:
        return "-"
    i = seed_interval(values)
    return format_interval(*i[:3], ".1f")


def _median(values) -> str:
    finite = [math.inf if v is None else v for v in values]
    m = statistics.median(finite) if finite else None
    return "-" if m is None else "never" if math.isinf(m) else f"{m:.1f}"


def _ratio(a: dict, b: dict, seeds, target: str) -> str:
    """``a`` over ``b`` paired by seed (the seeds both ran), with its interval."""
    from cluster_sim.report.stats import paired_ratio_ci
    common = [s for s in seeds if s in a and s in b]
    if not common:
        return "-"
    try:
        i = paired_ratio_ci(_times(a, common, target), _times(b, common, target))
    except ValueError:
        return "- (neither reached)"
    return format_interval(*i[:3], ".2f")


def _reached(runs: dict, seeds, target: str) -> str:
    ran = [s for s in seeds if s in runs and target in runs[s]["tta"]]
    return f"{sum(runs[s]['tta'][target] is not None for s in ran)}/{len(ran)}"


def _choices(meta: dict, key: str, rows: list):
    """The entry ``key``'s arms, base step size and each rule's chosen label, chosen
    as the bench chose: on the tuning seeds' times to the target its runs ran to."""
    entry = meta["stores"][key]
    arms, base = _full_arms(meta, entry)
    tune = list(meta.get("tune_seeds") or [])
    own = [dict(r, tta_s=r["tta"].get(entry["own"])) for r in rows]
    choices, pool = tuning_choices(own, arms, tune, base if meta.get("tune_stages") else None,
                                   entry["workers"])
    # A choice past the grid's edge was reported with a linear-scaling arm of its own.
    by_label = {a.arm.label: a for a in pool}
    reported = _full_arms(meta, entry, {f: by_label[label].spec for f, label in choices.items()
                                        if by_label[label].spec is not None})[0]
    return list({a.arm.label: a for a in pool + reported}.values()), base, choices


def read_store(store_dir) -> tuple[dict, dict]:
    """A compact store's ``meta.json`` and its runs (``{key: [row, ...]}``); ValueError
    naming the file and what is wrong with it.

    >>> meta, rows = read_store(RESULTS / "race_sim8")
    >>> sorted(rows), len(rows["static_sim8"]) > 100
    (['homogeneous_sim8', 'static_sim8'], True)
    """
    store_dir = pathlib.Path(store_dir)
    path = store_dir / META
    try:
        meta = json.loads(path.read_text())
        rows = {}
        for key in meta["stores"]:
            path = store_dir / f"{key}.jsonl"
            rows[key] = [json.loads(line) for line in path.read_text().splitlines()]
            for row in rows[key]:
                row["seed"], row["tta"], row["policy"]  # what the tables read
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a compact store of `bench tables` "
                         f"({type(err).__name__}: {err})") from None
    return meta, rows


def store_arms(meta: dict, key: str) -> list:
    """Every arm (`cluster_sim.cli.arm_grid.BenchArm`) of the store's entry ``key``,
    labelled as its runs are."""
    return _full_arms(meta, meta["stores"][key])[0]


def tuned_specs(meta: dict, key: str, rows: list) -> dict:
    """Each tuned rule's chosen setting (an `ArmSpec`: value, learning rate, momentum)
    in the store's entry ``key``: what its tables report as "tuned setting".

    >>> meta, rows = read_store(RESULTS / "race_sim8")
    >>> tuned_specs(meta, "static_sim8", rows["static_sim8"])["bsp"].text
    'bsp@0.08'
    """
    arms, _, choices = _choices(meta, key, rows)
    by_label = {a.arm.label: a for a in arms}
    return {family: by_label[label].spec for family, label in choices.items()}


def store_reference(store_dir, scenario: str, num_workers: int):
    """``(seconds, how)`` of the reference run the compact store's ``scenario`` on
    ``num_workers`` workers placed its fraction events and time budget by
    (`cluster_sim.cli.event_reference`): tuned BSP's median time to target without those
    events on the tuning seeds, chosen from its ``_reference`` runs as the bench chose;
    None when the store holds none (a scenario without fraction events). A bench
    ``--tuned-from`` the store runs on the same cluster by it.

    >>> seconds, how = store_reference(RESULTS / "race_sim8_pc", "pause", 8)
    >>> round(seconds, 1), how.split(" (")[0]
    (293.1, 'BSP @lr=0.08')
    """
    meta, rows = read_store(store_dir)
    key = store_key(scenario, num_workers) + REFERENCE
    if key not in rows:
        return None
    from cluster_sim.cli.event_reference import reference_seconds
    _, _, choices = _choices(meta, key, rows[key])
    seeds = list(meta["tune_seeds"])
    own = meta["stores"][key]["own"]
    runs = [{"seed": r["seed"], "tta_s": r["tta"].get(own)} for r in rows[key]
            if r["policy"] == choices["bsp"] and r["seed"] in seeds]
    return reference_seconds(runs, seeds), (
        f"{choices['bsp']} (tuned BSP's median time to target without fraction events "
        f"on seeds {seeds_text(seeds)}, the reference of {_shown(pathlib.Path(store_dir))})")


def store_tuned(store_dir, scenario: str, num_workers: int, families) -> dict:
    """`tuned_specs` of the rules ``families`` in the compact store's ``scenario`` on
    ``num_workers`` workers (``--tuned-from`` a store: real runs at the settings the
    simulated race tuned). ValueError names what the store has.

    >>> specs = store_tuned(RESULTS / "race_sim8", "static", 8, ["bsp", "asp", "adaptive"])
    >>> sorted(s.text for s in specs.values())
    ['asp@0.04/0.5', 'bsp@0.08']
    """
    meta, rows = read_store(store_dir)
    key = store_key(scenario, num_workers)
    if key not in rows:
        raise ValueError(f"--tuned-from {str(store_dir)!r}: no {scenario} on {num_workers} "
                         f"workers in that store (it has {', '.join(sorted(rows))})")
    if not meta.get("tune_seeds"):
        raise ValueError(f"--tuned-from {str(store_dir)!r}: its {key} runs were not tuned "
                         "there (made with --tuned-from themselves); give the tuned store")
    return {f: spec for f, spec in tuned_specs(meta, key, rows[key]).items()
            if f in families}


def scenario_tables(meta: dict, key: str, rows: list) -> str:
    """The section of one store (scenario, workers): per target, each rule at its tuned
    setting, its linear-scaling arm and Adaptive."""
    from cluster_sim.report.stats import interval_label, seed_interval
    entry = meta["stores"][key]
    arms, base, choices = _choices(meta, key, rows)
    tune = list(meta.get("tune_seeds") or [])
    by_label = {a.arm.label: a for a in arms}
    reported = sorted({r["seed"] for r in rows if r["seed"] not in tune})
    planned = list(meta.get("seeds") or reported)
    targets = [entry["early"]] + sorted(
        {t for r in rows if r["seed"] in reported for t in r["tta"]} - {entry["early"]},
        key=float, reverse=True)
    runs = lambda label: per_seed([r for r in rows if r["seed"] in reported], label)
    made = sum(r["seed"] in tune for r in rows)
    name, n = entry["scenario"], entry["workers"]
    tuning = (f"Tuned on seeds {seeds_text(tune)} ({made} tuning runs"
              + (", pruned in stages: `--tune-stages`" if meta.get("tune_stages") else "")
              + ")" if tune else "Each rule at the setting its command took (--tuned-from: "
              "chosen elsewhere, not tuned for this target)")
    lines = [f"### {name}, {n} simulated workers", "",
             tuning + f"; reported on seeds {seeds_text(reported)}"
             + (f" (of {seeds_text(planned)} planned: the matrix is unfinished)"
                if set(planned) - set(reported) else "")
             + ". Base learning rate "
             f"{base.rate:g}, momentum {base.momentum:g}; {entry['us_per_sample']:g} us per "
             f"sample; at most {entry['max_pushes']} pushes"
             + (f" and {entry['max_time_s']:.4g} simulated s (`--time-budget`: a run "
                "stopped there never reached)" if entry.get("max_time_s") else "")
             + " a run. Made at commit "
             f"{meta['commit']} ({meta['date']})."]
    if not reported:
        chosen = ", ".join(choices.values()) or "none yet"
        return "\n".join(lines + ["", f"No reported run yet: tuning only (choices so far: "
                                       f"{chosen})."])
    families = [f for f in ORDER if any(a.family == f for a in arms)]
    chosen = lambda family: choices.get(family) or next(
        (a.arm.label for a in arms if a.family == family and not a.linear), None)
    bsp_label = chosen("bsp")
    adaptive = next((a.arm.label for a in arms if a.family == "adaptive"), None)
    for target in targets:
        what = "early target" if target == entry["early"] else "late target"
        goal = target if target.startswith("accuracy") else f"validation loss {target}"
        header = ["rule", "tuned setting", "TTA s median", "TTA s [interval]", "reached",
                  f"TTA / tuned BSP [interval]", "Adaptive / rule [interval]",
                  "linear-scaling arm", "its TTA s [interval]", "linear / tuned [interval]"]
        body, intervals = [], []
        for family in families:
            label = chosen(family)
            mine = runs(label) if label else {}
            if not mine:
                continue
            edges = grid_edges(arms, label) if family in choices else []
            setting = label + (f" (grid edge: {', '.join(edges)})" if edges else "")
            if family in BASE_ONLY:
                setting += " (base rate, not tuned)"
            times = _times(mine, sorted(mine), target)
            intervals.append(seed_interval(times))
            linear = next((a.arm.label for a in arms if a.family == family and a.linear
                           and a.value == by_label[label].value), None)
            lin = runs(linear) if linear else {}
            body.append([
                label.split(" ")[0].split("(")[0],
                setting, _median(times), _interval(times), _reached(mine, reported, target),
                _ratio(mine, runs(bsp_label), reported, target) if bsp_label else "-",
                "-" if family == "adaptive" or not adaptive
                else _ratio(runs(adaptive), mine, reported, target),
                linear or "-",
                _interval(_times(lin, sorted(lin), target)) if lin else "-",
                _ratio(lin, mine, reported, target) if lin else "-"])
        label = interval_label(intervals)
        header = [h.replace("[interval]", f"[{label}]") for h in header]
        lines += ["", f"#### Time to the {what} ({goal})", "",
                  markdown_table_rows(header, body)]
    return "\n".join(lines)


def _shown(store_dir: pathlib.Path) -> str:
    """The store's path as typed at the repository's top, wherever this runs."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        return store_dir.resolve().relative_to(root).as_posix()
    except ValueError:
        return store_dir.as_posix()


def store_section(store_dir) -> str:
    """The tables of one compact store, under the command that made its runs."""
    store_dir = pathlib.Path(store_dir)
    meta, rows = read_store(store_dir)
    costs = meta["costs"]
    lines = [f"## From `{_shown(store_dir)}`", "",
             f"Runs made by `{' '.join(meta['argv'])}` (store exported at commit "
             f"{meta['commit']}, {meta['date']}). Costs: framework "
             f"{1e3 * costs.get('framework_step_s', 0):.0f} ms a step, gate latency "
             f"{1e3 * costs.get('gate_latency_s', 0):.0f} ms, start-up "
             f"{costs.get('chunk_overhead_s', 0):g} s."]
    for argv in meta.get("replaced_by", ()):
        lines += ["", f"The runs of the rules (and seeds) of `{' '.join(argv)}` replace the "
                      "first command's."]
    sections = [(reference_note if key.endswith(REFERENCE) else scenario_tables)(
        meta, key, runs) for key, runs in rows.items()]
    return "\n".join(lines) + "\n\n" + "\n\n".join(sections)


#: The key suffix of a store's reference runs (`cluster_sim.cli.event_reference`).
REFERENCE = "_reference"


def reference_note(meta: dict, key: str, rows: list) -> str:
    """What a store's reference runs are: tuned BSP without fraction events on the
    tuning seeds, whose median time to target placed the scenario's events and its time
    budget (the scenario's own section says the seconds)."""
    entry = meta["stores"][key]
    seeds = sorted({r["seed"] for r in rows})
    return (f"### {entry['scenario']}, {entry['workers']} simulated workers: the reference "
            f"run\n\n{len(rows)} runs of BSP without the events placed at fractions of a "
            f"run, over its learning-rate grid on seeds {seeds_text(seeds)}: tuned BSP's "
            "median time to target there is what those events, and a time budget where "
            "the scenario's section says one, are fractions and multiples of.")


def race_page(*store_dirs) -> str:
    """The Markdown page of every table in the compact stores ``store_dirs``."""
    shown = " ".join(_shown(pathlib.Path(d)) for d in store_dirs)
    head = ["# The fair race, simulated (issue 46)", "",
            f"Generated by `python -m cluster_sim bench tables {shown}` from the compact "
            "stores there; do not edit. Times are simulated seconds to the target (the "
            "trailing mean of 5 evaluations' validation loss, interpolated). Intervals: "
            "under 5 seeds the range (min-max) around the median; from 5 seeds a 90% t "
            "interval on the logs around the geometric mean (the median's order-statistic "
            "interval where a run never reached). Ratios are paired by seed: below 1 the "
            "first is faster. `never`: did not reach the target within the run's pushes "
            "(or its time budget, where the store says one)."]
    return "\n\n".join(["\n".join(head), *(store_section(d) for d in store_dirs)]) + "\n"


def add_arguments(parser) -> None:
    parser.add_argument("stores", nargs="+", metavar="DIR",
                        help="compact stores (meta.json and SCENARIO_simN.jsonl), e.g. "
                             "cluster_sim/results/race_sim8; one page of them all")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-runs", action="append", default=None, metavar="OUT",
                        help="first (re)write DIR from a bench policies --simulate --out "
                             "directory (its results.json and run stores); repeated, a "
                             "later directory's runs replace the earlier's of the same "
                             "arm and setting on its seeds (Adaptive re-run alone, "
                             "--tuned-from)")
    source.add_argument("--add-runs", action="append", default=None, metavar="OUT",
                        help="merge into DIR the runs of a bench policies --simulate --out "
                             "directory, replacing DIR's runs of the same arm and setting "
                             "on its seeds and keeping the others (an arm run alone with "
                             "--tuned-from DIR, the store's own runs directory gone); "
                             "repeatable")


def run(args) -> int:
    try:
        if args.from_runs or args.add_runs:
            if len(args.stores) > 1:
                raise ValueError("--from-runs and --add-runs write one store: give one DIR")
            for path in export(args.from_runs or args.add_runs, args.stores[0],
                               onto_store=bool(args.add_runs)):
                print(f"wrote {path}", file=sys.stderr)
        sys.stdout.write(race_page(*args.stores))
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
