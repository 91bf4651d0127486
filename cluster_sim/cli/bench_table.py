"""The table of one scenario of `bench policies`: every arm, then each rule's
oracle-tuned row (saying when the choice sits at an edge of its grid), every time to
target and ratio to BSP paired by seed, with an interval only where the seeds can give
one (`cluster_sim.report.stats.seed_interval`: a range under 5 seeds, a 90 % interval
with real coverage from 5).

Example:

>>> from cluster_sim.cli.arm_grid import bench_arms
>>> runs = [{"policy": p, "seed": s, "tta_s": t} for p, ts in
...         (("BSP", (10.0, 20.0)), ("ASP", (5.0, 12.0))) for s, t in enumerate(ts)]
>>> print(bench_table(runs, bench_arms(["bsp", "asp"], 4))[0].splitlines()[3])
| ASP | 8.5 [5.0, 12.0] | 2/2 | 0.55 [0.50, 0.60] | - | - | - | - |
>>> "| TTA/BSP paired [range] |" in bench_table(runs, bench_arms(["bsp", "asp"], 4))[0]
True
"""

import math
import statistics

from cluster_sim.cli import seeds_text
from cluster_sim.cli.arm_grid import baseline_label, grid_edges, oracle_choices, oracle_settings, per_seed
from cluster_sim.harness.arms import CONTENDERS
from cluster_sim.report.tables import format_interval, markdown_table_rows

__all__ = ["arm_row", "bench_table", "table_and_verdict", "write_scenario", "grid_note",
           "incomplete_note"]


def arm_row(results, label, baseline="BSP") -> dict:
    """The table's numbers for one arm: median TTA with its interval over seeds, the
    ratio to ``baseline`` paired by seed with its interval, medians of final
    loss/accuracy, updates and dropped gradients."""
    from cluster_sim.report.stats import paired_ratio_ci, seed_interval
    runs = per_seed(results, label)
    bsp = per_seed(results, baseline)
    ttas = [runs[s]["tta_s"] for s in sorted(runs)]
    row = {"arm": label, "seeds": len(runs), "reached": sum(t is not None for t in ttas),
           "tta": seed_interval(ttas), "ratio": None}
    common = sorted(set(runs) & set(bsp))
    if common:
        try:
            row["ratio"] = paired_ratio_ci([runs[s]["tta_s"] for s in common],
                                           [bsp[s]["tta_s"] for s in common])
        except ValueError:  # no seed where either reached the target
            pass
    for key in ("final_loss", "final_accuracy", "version", "dropped"):
        values = [r.get(key) for r in runs.values() if r.get(key) is not None]
        row[key] = statistics.median(values) if values else None
    return row


def _rule_name(name: str) -> str:
    """A rule's name in the oracle rows: "KSync" of "KSync(k={})"."""
    return CONTENDERS[name].label.split("(")[0]


def bench_table(results, arms, title="") -> tuple[str, dict]:
    """The Markdown table of one scenario (every arm, then the oracle-tuned rows, each
    saying when its choice is at an edge of the grid) and its data: ``{"rows",
    "oracle", "oracle_settings", "oracle_edges", "baseline", "bsp_tta_cv"}``."""
    from cluster_sim.report.stats import coefficient_of_variation, interval_label
    baseline = baseline_label(results, arms)
    labels = [a.arm.label for a in arms if per_seed(results, a.arm.label)]
    rows = [arm_row(results, label, baseline) for label in labels]
    oracle = oracle_choices(results, arms)
    edges = {name: grid_edges(arms, label) for name, label in oracle.items()}
    for name, label in oracle.items():
        if sum(a.family == name and not a.linear for a in arms) == 1:
            continue  # run at one setting: its own row is the tuned one
        edge = f" (at the grid's edge: {', '.join(edges[name])})" if edges[name] else ""
        rows.append(dict(arm_row(results, label, baseline),
                         arm=f"{_rule_name(name)} oracle-tuned = {label}{edge}", oracle=name))
    bsp = per_seed(results, baseline)
    cv = coefficient_of_variation([bsp[s]["tta_s"] for s in sorted(bsp)]) if bsp else None
    fmt = lambda v, f: "-" if v is None else format(v, f)
    body = [[r["arm"], format_interval(*r["tta"][:3], ".1f"), f"{r['reached']}/{r['seeds']}",
             "-" if r["ratio"] is None else format_interval(*r["ratio"][:3], ".2f"),
             fmt(r["final_loss"], ".3f"), fmt(r["final_accuracy"], ".3f"),
             fmt(r["version"], ".0f"), fmt(r["dropped"], ".0f")] for r in rows]
    header = ["arm", f"TTA s [{interval_label(r['tta'] for r in rows)}]", "reached",
              f"TTA/{baseline} paired [{interval_label(r['ratio'] for r in rows)}]",
              "final loss", "final acc", "updates", "dropped"]
    cv_text = (f"{baseline}'s TTA coefficient of variation: " +
               ("- (fewer than two seeds)" if cv is None or math.isnan(cv) else
                "inf (a seed missed the target)" if math.isinf(cv) else f"{100 * cv:.1f} %"))
    notes = [cv_text, "Under 5 seeds a [range] is min-max over seeds around the median; "
             "from 5 seeds a 90% CI is a t interval on the logs around the geometric "
             "mean (the median's order-statistic interval where a run never reached)."]
    if all(a.arm.learning_rate is None for a in arms):
        # Averaged rounds at one rate under-step every rule that waits for several
        # gradients: the ratios then measure the rate as much as the rule (issue 46).
        notes.append("Every arm at the scenario's learning rate: these ratios compare the "
                     "rules at one shared rate, not each at its best (give each its own: NAME@LR; --lr-grid tunes it).")
    text = "\n".join(([f"### {title}", ""] if title else []) +
                     [markdown_table_rows(header, body), "", *notes])
    return text, {"rows": rows, "oracle": oracle, "baseline": baseline,
                  "oracle_settings": oracle_settings(oracle, arms), "oracle_edges": edges,
                  "bsp_tta_cv": cv}


def table_and_verdict(results, arms, title="") -> str:
    """`bench_table`'s Markdown and the report's plain-language verdict under it
    (`cluster_sim.report.verdict`): what a short version of the benchmark (the demo)
    prints after `run_matrix`."""
    from cluster_sim.report import summarise, verdict
    text, _data = bench_table(results, arms, title)
    return f"{text}\n\n{verdict(summarise(results))}"


# ---- a scenario's section of bench.md and its report ------------------------------------

def write_scenario(out, scenario_key, results, arms, scenario, meta, title):
    """``bench_table``'s text and data for one scenario (and worker count), its report
    (every run, curves and plots: `cluster_sim.report.write_report`) written to
    ``out/SCENARIO_KEY``; with no result yet, a line saying so and no report."""
    from cluster_sim.report import write_report
    if not results:  # stopped (--stop-after) before this scenario's first run
        import shutil  # an earlier report there would be read as this matrix's
        shutil.rmtree(out / scenario_key.replace("/", "_"), ignore_errors=True)
        return f"### {title}\n\nNo run made yet.", {}
    text, data = bench_table(results, arms, title=title)
    write_report(out / scenario_key.replace("/", "_"), results, title=title,
                 scenario=scenario, meta=meta, extra={"bench": data}, sections=[text])
    return text, data


def grid_note(args, values, tune_seeds=()) -> str:
    """The table's line saying where its tuned settings came from ("" for none):
    ``values`` are `ArmSpec`s by rule, ``args`` the command's (``--grid-from-sim``,
    ``--tuned-from``)."""
    if not values:
        return ""
    seeds = f" on seeds {seeds_text(tune_seeds)}" if tune_seeds else ""
    how = ("tuned in the simulator" + seeds if args.grid_from_sim else
           f"tuned{seeds}, not among the reported seeds" if tune_seeds else
           f"tuned in {args.tuned_from}" if args.tuned_from else "pinned by --arms")
    return f"\n\nSettings {how}: " + ", ".join(
        getattr(spec, "described", spec.text) for spec in values.values())


def incomplete_note(missing, total, store_dir, log) -> str:
    """The table's line saying how many of its runs are still to make ("" for none)."""
    if not missing:
        return ""
    log(f"stopped with {missing} run(s) to go; run the same command to resume")
    return (f"\n\nIncomplete: {missing} of {total} runs not made yet (--stop-after); the "
            f"same command resumes them from {store_dir}.")
