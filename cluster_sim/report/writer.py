"""Turn per-policy run results into a report directory: JSON, CSV, Markdown and plots.

Input is a list of run results (`cluster_sim.report.results.RunResult` dicts) from the
real harness (`cluster_sim.harness.run.run_arm`), the simulator
(`cluster_sim.sim.Simulation.run`) or the calibration, any number of seeds per policy.
`write_report` writes:

* ``results.json``: per policy, medians over seeds plus every seed's raw result;
* ``curves.csv``: one row per evaluation point (policy, seed, wall_s, pushes, version,
  loss, accuracy);
* ``report.md``: the comparison table, TTA ratios to BSP and ASP, and the plots;
* ``accuracy.png``, ``loss.png``: accuracy and loss against training wall time;
* ``k_over_time.png``: K of each policy's rule against wall time;
* ``staleness.png`` and ``batch_sizes.png`` when results carry ``staleness_histogram`` /
  ``batch_sizes``.

Time to target accuracy over seeds: a seed that never reached the target counts as
+infinity, and ``tta_s`` is the median of that; it is null when the median is infinite,
i.e. when at least half the seeds (strictly more than half for an odd count) missed. So
a reported TTA is one that most seeds achieved, and ``tta_reached`` says how many did.
Other metrics are plain medians over the seeds that report them.

Rebuild a report from a run's results.json (e.g. after changing the plots), whoever
wrote it: ``python -m cluster_sim report runs/static`` (a directory or the file itself).

Example:

```python
from cluster_sim import report
summary = report.write_report("runs/static", results, title="static, 3 seeds")
print(report.format_table(summary))
```
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
import sys

import numpy as np

from cluster_sim.report.results import (TTA_DEFINITION, RunResult, median_of, median_tta,
                                        rule_name)
from cluster_sim.report.tables import format_cell, markdown_table_rows, text_table
from cluster_sim.report.verdict import verdict

__all__ = ["json_safe", "summarise", "write_report", "load_results", "main", "format_table", "COLUMNS",
           "markdown_table", "step_time_spread", "version_to_wall", "REQUIRED_KEYS"]

# The fields of `RunResult` without a default.
REQUIRED_KEYS = tuple(f.name for f in dataclasses.fields(RunResult)
                      if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING and f.name != "seed")
MEDIAN_KEYS = ("final_accuracy", "final_loss", "samples_per_s", "hardware_efficiency", "idle_fraction",
               "staleness_p50", "staleness_p95", "wall_s", "version", "dropped")
CURVE_FIELDS = ("wall_s", "pushes", "version", "loss", "accuracy")
# Baselines the table reports TTA ratios against, matched on the policy's class name.
BASELINES = ("BSP", "ASP")


def _validate(results) -> None:
    if not isinstance(results, (list, tuple)) or not results:
        raise ValueError("no results to report: expected a non-empty list of result dicts "
                         "(one per policy and seed, as from harness.run_arm)")
    for i, r in enumerate(results):
        if not isinstance(r, dict):
            raise ValueError(f"results[{i}] is {type(r).__name__}, expected a dict")
        missing = [k for k in REQUIRED_KEYS if k not in r]
        if missing:
            raise ValueError(f"results[{i}] (policy {r.get('policy', '?')!r}) lacks "
                             f"{', '.join(missing)}")
        for j, point in enumerate(r["curve"]):
            absent = [f for f in CURVE_FIELDS if f not in point]
            if absent:
                raise ValueError(f"results[{i}] (policy {r['policy']!r}) curve[{j}] lacks "
                                 f"{', '.join(absent)}")


def _by_policy(results) -> dict[str, list[dict]]:
    """Results grouped by policy name, first-seen order, each seed tagged."""
    groups: dict[str, list[dict]] = {}
    for r in results:
        runs = groups.setdefault(str(r["policy"]), [])
        runs.append(dict(r, seed=r.get("seed", len(runs))))
    return groups


def _baseline(groups, summaries, name) -> float | None:
    for policy, s in zip(groups, summaries):
        # Exact name before the arguments: "BSP()", "bsp" and "BSP @lr=0.4" match,
        # "BSPThenASP()" does not.
        if rule_name(policy) == name:
            return s["tta_s"]
    return None


def summarise(results) -> list[dict]:
    """Per policy (first-seen order): medians over seeds, TTA ratios, raw runs.

    Each entry has ``policy``, ``seeds``, ``runs``, ``tta_s``, ``tta_reached``, the
    medians of `MEDIAN_KEYS` (None when no seed reports one), ``tta_vs_bsp`` and
    ``tta_vs_asp`` (this policy's TTA divided by the baseline's; None when either is
    missing) and ``per_seed`` (the raw result dicts).

    >>> rs = [{"policy": "BSP()", "tta_s": 20.0, "final_accuracy": 0.9, "wall_s": 20,
    ...        "samples_per_s": 100, "staleness_p50": 0, "staleness_p95": 0, "curve": []},
    ...       {"policy": "ASP()", "tta_s": 10.0, "final_accuracy": 0.9, "wall_s": 10,
    ...        "samples_per_s": 200, "staleness_p50": 1, "staleness_p95": 3, "curve": []}]
    >>> [(s["policy"], s["tta_vs_bsp"]) for s in summarise(rs)]
    [('BSP()', 1.0), ('ASP()', 0.5)]
    """
    _validate(results)
    groups = _by_policy(results)
    summaries = []
    for policy, runs in groups.items():
        entry = {"policy": policy, "seeds": [r["seed"] for r in runs], "runs": len(runs),
                 "tta_s": median_tta([r["tta_s"] for r in runs]),
                 "tta_reached": sum(r["tta_s"] is not None for r in runs)}
        for key in MEDIAN_KEYS:
            entry[key] = median_of([r.get(key) for r in runs])
        entry["step_time_spread"] = median_of([step_time_spread(r) for r in runs])
        summaries.append(entry)
    for s in summaries:
        for name in BASELINES:
            base = _baseline(groups, summaries, name)
            ok = base and s["tta_s"] is not None
            s[f"tta_vs_{name.lower()}"] = s["tta_s"] / base if ok else None
    for s, runs in zip(summaries, groups.values()):
        s["per_seed"] = runs
    return summaries


def step_time_spread(run) -> float | None:
    """Slowest worker's mean step time over the fastest's (1.0: nobody waits for anyone
    at a barrier); None without per-worker step times.

    >>> step_time_spread({"worker_step_times": [0.1, 0.12, None, 0.4]})
    4.0
    """
    times = [t for t in run.get("worker_step_times") or () if t]
    return max(times) / min(times) if times else None


#: What each column of the table means; report.md lists them under the table.
COLUMNS = {
    "seeds": "runs (seeds) of the policy; every other column is a median over them",
    "TTA s": "time to target (validation loss down to the target loss, or accuracy up to "
             "the target accuracy), interpolated between evaluations, seconds of training",
    "reached": "seeds that reached the target accuracy, of all seeds",
    "TTA/BSP": "the policy's TTA over BSP's (below 1.0 is faster); TTA/ASP likewise",
    "final acc": "test accuracy at the last evaluation",
    "samples/s": "training samples processed per second, all workers together",
    "hw eff": "hardware efficiency: samples/s over the sum of each worker's rate while "
              "busy (its stand-alone speed); 1.0 means no time lost waiting",
    "idle": "mean fraction of the run a worker spent not computing a step (waiting at a "
            "barrier, for input or for the chief)",
    "step spread": "slowest worker's mean step time over the fastest's (1.0: equal)",
    "stale p50": "median staleness of applied gradients: updates made between the "
                 "version a gradient was computed from and its application; p95 likewise",
    "updates": "model versions (updates applied); K pushes make one update under K-sync",
    "dropped": "gradients discarded by the rule (too stale, late for their round)",
}


def _table(summaries) -> tuple[list[str], list[list[str]]]:
    """Header and string rows shared by the terminal and Markdown tables."""
    header = ["policy", "seeds", "TTA s", "reached", "TTA/BSP", "TTA/ASP", "final acc",
              "samples/s", "hw eff", "idle", "step spread", "stale p50", "stale p95",
              "updates", "dropped"]
    rows = [[s["policy"], str(s["runs"]), format_cell(s["tta_s"], ".1f"),
             f"{s['tta_reached']}/{s['runs']}", format_cell(s["tta_vs_bsp"], ".2f"),
             format_cell(s["tta_vs_asp"], ".2f"), format_cell(s["final_accuracy"], ".3f"),
             format_cell(s["samples_per_s"], ".0f"), format_cell(s["hardware_efficiency"], ".2f"),
             format_cell(s["idle_fraction"], ".2f"), format_cell(s["step_time_spread"], ".2f"),
             format_cell(s["staleness_p50"], "g"),
             format_cell(s["staleness_p95"], "g"), format_cell(s["version"], ".0f"),
             format_cell(s["dropped"], ".0f")] for s in summaries]
    return header, rows


def _summaries(results_or_summaries) -> list[dict]:
    items = list(results_or_summaries)
    return items if items and "per_seed" in items[0] else summarise(items)


def format_table(results_or_summaries) -> str:
    """The comparison as a plain-text table for the terminal (medians over seeds).

    Takes raw results or `summarise` output.
    """
    return text_table(*_table(_summaries(results_or_summaries)))


def markdown_table(results_or_summaries) -> str:
    """The same table in Markdown."""
    return markdown_table_rows(*_table(_summaries(results_or_summaries)))


def json_safe(value):
    """NaN and infinity become null: JSON has neither, and readers choke on them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    return value


def write_report(run_dir, results, title: str | None = None, scenario=None,
                 meta: dict | None = None, extra: dict | None = None,
                 sections=()) -> list[dict]:
    """Write results.json, curves.csv, report.md and PNG plots into ``run_dir``.

    ``scenario`` (a `cluster_sim.scenarios.Scenario`, or the dict a results.json holds
    for it) and ``meta`` (any JSON-able dict,
    e.g. the command line) are recorded in results.json and the report header. ``extra``
    (JSON-able) is added to results.json's top level, and ``sections`` (Markdown texts)
    go into report.md after the verdict (e.g. a benchmark's own tables). Returns
    the `summarise` output. Raises ``ValueError`` on malformed results before writing.
    """
    summaries = summarise(results)
    out = pathlib.Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = {"title": title, "tta_definition": TTA_DEFINITION, "meta": meta or {}}
    if isinstance(scenario, dict):  # as stored in a results.json before
        header["scenario"] = scenario
    elif scenario is not None:
        header["scenario"] = {"name": scenario.name, "summary": scenario.summary(),
                              "source": scenario.source,
                              "target_accuracy": scenario.target_accuracy}
    (out / "results.json").write_text(json.dumps(
        json_safe(dict(header, **(extra or {}), policies=summaries)), indent=2, default=str))
    _write_curves(out / "curves.csv", summaries)
    plots = _plot_all(out, summaries)
    (out / "report.md").write_text(_markdown(summaries, header, plots, sections))
    return summaries


def _write_curves(path, summaries) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(("policy", "seed") + CURVE_FIELDS)
        for s in summaries:
            for run in s["per_seed"]:
                for point in run["curve"]:
                    writer.writerow([s["policy"], run["seed"]] + [
                        "" if point[f] is None else point[f] for f in CURVE_FIELDS])


def _markdown(summaries, header, plots, sections=()) -> str:
    lines = [f"# {header['title'] or 'Policy comparison'}", ""]
    if "scenario" in header:
        sc = header["scenario"]
        lines += [f"Scenario: {sc['summary']} (target accuracy {sc['target_accuracy']:g}).", ""]
    seeds = sorted({len(s["per_seed"]) for s in summaries})
    lines += [f"Medians over {'/'.join(map(str, seeds))} seed(s) per policy. "
              f"{TTA_DEFINITION} TTA/BSP and TTA/ASP divide a policy's median TTA by the "
              "baseline's (below 1.0 is faster). Hardware efficiency is samples/s divided "
              "by the sum of the workers' stand-alone samples/s under the same slowdowns.",
              "", markdown_table(summaries), "", f"**Verdict.** {verdict(summaries)}", ""]
    for section in sections:
        lines += [section, ""]
    lines += ["Columns:", ""]
    lines += [f"- `{name}`: {meaning}" for name, meaning in COLUMNS.items()] + [""]
    for name, caption in plots:
        lines += [f"![{caption}]({name})", ""]
    lines += ["Raw data: `results.json` (every seed), `curves.csv` (every evaluation).", ""]
    return "\n".join(lines)


# ---- plots ------------------------------------------------------------------------------

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # files only: works headless and in tests
    import matplotlib.pyplot as plt
    return plt


def _colours(summaries):
    cmap = _pyplot().get_cmap("tab10")
    return {s["policy"]: cmap(i % 10) for i, s in enumerate(summaries)}


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)


def _plot_all(out, summaries) -> list[tuple[str, str]]:
    """Write every plot the data allows; return (file name, caption) pairs."""
    plots = []
    for key, label in (("accuracy", "test accuracy"), ("loss", "test loss")):
        _plot_curves(out / f"{key}.png", summaries, key, label)
        plots.append((f"{key}.png", f"{label} against training wall time"))
    if any(r.get("k_history") for s in summaries for r in s["per_seed"]):
        _plot_k(out / "k_over_time.png", summaries)
        plots.append(("k_over_time.png", "K (gradients per update) against wall time"))
    if any(r.get("staleness_histogram") for s in summaries for r in s["per_seed"]):
        _plot_staleness(out / "staleness.png", summaries)
        plots.append(("staleness.png", "staleness distribution of pushed gradients"))
    if any(r.get("batch_sizes") for s in summaries for r in s["per_seed"]):
        _plot_batches(out / "batch_sizes.png", summaries)
        plots.append(("batch_sizes.png", "per-worker batch sizes against wall time"))
    return plots


def _policy_plot(path, summaries, draw, xlabel, ylabel) -> None:
    """One axes, one colour per policy: ``draw(ax, summary, colour)`` adds its lines."""
    plt = _pyplot()
    colours = _colours(summaries)
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in summaries:
        draw(ax, s, colours[s["policy"]])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def _seed_style(summary, index, colour) -> dict:
    # One legend entry per policy; further seeds share its colour, fainter.
    return {"color": colour, "alpha": 1.0 if index == 0 else 0.4,
            "label": summary["policy"] if index == 0 else None}


def _plot_curves(path, summaries, key, label) -> None:
    def draw(ax, s, colour):
        for i, run in enumerate(s["per_seed"]):
            pts = [(p["wall_s"], p[key]) for p in run["curve"] if p[key] is not None]
            if pts:
                ax.plot(*zip(*pts), marker=".", **_seed_style(s, i, colour))
    _policy_plot(path, summaries, draw, "training wall time (s)", label)


def version_to_wall(run):
    """A function from update version to wall time, interpolating the run's evaluation
    curve (from version 0 at time 0).

    >>> version_to_wall({"curve": [{"wall_s": 2.0, "version": 10}]})(5)
    1.0
    """
    pts = [(0.0, 0.0)] + [(float(p["version"]), float(p["wall_s"])) for p in run["curve"]
                          if p.get("version") is not None]
    versions, walls = zip(*sorted(pts))
    return lambda v: float(np.interp(v, versions, walls))


def _plot_k(path, summaries) -> None:
    def draw(ax, s, colour):
        for i, run in enumerate(s["per_seed"]):
            history = run.get("k_history") or []
            if not history:
                continue
            to_wall = version_to_wall(run)
            x = [to_wall(h["version"]) for h in history]
            y = [h["k"] for h in history]
            # K holds until the next change, and until the run ends.
            x.append(max(x[-1], float(run["wall_s"] or x[-1])))
            y.append(y[-1])
            ax.step(x, y, where="post", **_seed_style(s, i, colour))
    _policy_plot(path, summaries, draw, "training wall time (s, from update versions)",
                 "K (gradients per update)")


def _plot_staleness(path, summaries) -> None:
    def draw(ax, s, colour):
        hists = [r["staleness_histogram"] for r in s["per_seed"] if r.get("staleness_histogram")]
        if not hists:
            return
        # Seeds are pooled: counts add, then normalise to a fraction of pushes.
        total = np.zeros(max(len(h) for h in hists))
        for h in hists:
            total[:len(h)] += h
        if total.sum() > 0:
            ax.step(np.arange(len(total)), total / total.sum(), where="mid", color=colour,
                    label=s["policy"])
    _policy_plot(path, summaries, draw, "staleness (updates behind when applied)",
                 "fraction of gradients")


def _plot_batches(path, summaries) -> None:
    plt = _pyplot()
    with_batches = [s for s in summaries
                    if any(r.get("batch_sizes") for r in s["per_seed"])]
    fig, axes = plt.subplots(len(with_batches), 1, figsize=(7, 2.6 * len(with_batches)),
                             squeeze=False, sharex=True)
    for ax, s in zip(axes[:, 0], with_batches):
        # The first seed with data: seeds differ in timing, so overlaying them blurs.
        run = next(r for r in s["per_seed"] if r.get("batch_sizes"))
        x = [b["wall_s"] for b in run["batch_sizes"]]
        # Workers may come and go (churn): pad missing workers with NaN (gaps in the plot).
        width = max(len(b["sizes"]) for b in run["batch_sizes"])
        sizes = np.full((len(x), width), np.nan)
        for row, b in enumerate(run["batch_sizes"]):
            sizes[row, :len(b["sizes"])] = b["sizes"]
        # The last sizes hold until the run ends.
        end = max(x[-1], float(run.get("wall_s") or x[-1]))
        x, sizes = x + [end], np.vstack([sizes, sizes[-1:]])
        for w in range(sizes.shape[1]):
            ax.step(x, sizes[:, w], where="post", label=f"worker {w}")
        ax.set_title(f"{s['policy']} (seed {run['seed']})", fontsize=9)
        ax.set_ylabel("batch size")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
    axes[-1, 0].set_xlabel("training wall time (s)")
    _save(fig, path)


def load_results(path) -> tuple[list[dict], dict]:
    """The raw per-seed results and the header of a results file, and the directory
    it is in.

    ``path`` is a run directory holding ``results.json`` or a JSON file: a report's
    results.json (`write_report`), a plain list of run results, or a dict whose
    ``"results"`` is such a list or maps scenario names to such lists (the calibration's
    real.json). Results written before `RunResult` existed are read too (the simulator's
    final ``batch_sizes`` as a list of ints becomes one ``{"wall_s", "sizes"}`` entry).
    """
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text())
        header = {}
        if isinstance(data, dict) and "policies" in data:
            runs = [r for p in data["policies"] for r in p["per_seed"]]
            header = {k: v for k, v in data.items() if k != "policies"}
        else:
            runs = data.get("results") if isinstance(data, dict) else data
            if isinstance(runs, dict):  # per scenario
                runs = [r for group in runs.values() for r in group]
            if not isinstance(runs, list):
                raise KeyError("policies")
        runs = [_upgrade(r) for r in runs]
    except FileNotFoundError:
        raise ValueError(f"no results.json in {str(path.parent)!r}" if path.name == "results.json"
                         else f"no results file {str(path)!r}") from None
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path}: not a results.json from cluster_sim.report "
                         f"({type(err).__name__}: {err})") from None
    return runs, header


def _upgrade(run: dict) -> dict:
    sizes = run.get("batch_sizes")
    if sizes and not isinstance(sizes[0], dict):
        run = dict(run, batch_sizes=[{"wall_s": run.get("wall_s") or 0.0, "sizes": sizes}])
    return run


def main(argv=None) -> int:
    """``python -m cluster_sim report PATH``: rewrite a report from a results file (or a
    run directory holding results.json) in the file's directory."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m cluster_sim report",
                                     description=main.__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="PATH",
                        help="a results.json (harness, simulator or calibration) or its directory")


def run(args) -> int:
    path = pathlib.Path(args.run_dir)
    out = path if path.is_dir() else path.parent
    try:
        runs, header = load_results(path)
        summaries = write_report(out, runs, title=header.get("title"),
                                 scenario=header.get("scenario"), meta=header.get("meta"))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(summaries))
    print(f"\nreport: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
