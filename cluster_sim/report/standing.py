"""Where one rule stands across a policy benchmark's scenarios.

The adaptive-rule issue's questions, answered from the ``results.json`` files that
``python -m cluster_sim bench policies`` writes per scenario: in each scenario, the rule's
time to target against the *oracle-tuned best fixed rule* (BSP, ASP and every fixed
family at its best grid value there: what a user who hand-tunes gets) and against BSP,
as ratios paired by seed with their intervals (a range under 5 seeds:
`cluster_sim.report.stats.seed_interval`); and across scenarios, the
geometric mean of each arm's median time to target (a fixed family at its tuned value
per scenario; never reaching the target counts as infinite).

``python -m cluster_sim bench standing runs/bench_sim8 [runs/rerun ...] [--arm Adaptive]``
adds, with ``--versus LABEL`` (e.g. ``--arm Adaptive+alloc --versus Adaptive``), the
rule against that other arm per scenario, paired by seed the same way.

Example:

>>> rows = {"a": {"BSP": {0: 10.0, 1: 12.0}, "KAsync(k=2)": {0: 4.0, 1: 5.0},
...               "Adaptive": {0: 4.2, 1: 4.8}}}
>>> oracle = {"a": {"kasync": "KAsync(k=2)"}}
>>> s = standing(rows, oracle, "Adaptive")
>>> s["scenarios"]["a"]["best"], round(s["scenarios"]["a"]["vs_best"][0], 3)
('KAsync(k=2)', 1.005)
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np

from cluster_sim.report.results import median_tta
from cluster_sim.report.stats import interval_label, paired_ratio_ci
from cluster_sim.report.tables import format_interval, markdown_table_rows

#: fixed rules without a grid that count as hand-tunable choices.
FIXED_SINGLE = ("BSP", "ASP")


def _median(times) -> float:
    """Median time to target over seeds (``{seed: seconds or None}``), never reached =
    +inf (`median_tta`)."""
    tta = median_tta(list(times.values()))
    return math.inf if tta is None else tta


def _paired(a, b):
    """`paired_ratio_ci` of ``a`` over ``b`` (``{seed: seconds}``) on the seeds both
    ran, or None when no seed has a ratio (both never reached, or no common seed)."""
    seeds = sorted(set(a) & set(b))
    try:
        return paired_ratio_ci([a[s] for s in seeds], [b[s] for s in seeds])
    except ValueError:
        return None


def standing(rows: dict, oracle: dict, arm: str, versus: str | None = None) -> dict:
    """``rows[scenario][label]`` = ``{seed: time to target in s, None if never}``;
    ``oracle[scenario][family]`` = the label of the family's tuned value there;
    ``versus``: another arm to pair ``arm`` with in each scenario (``vs_other``).
    ValueError if ``arm`` or ``versus`` is in no scenario (naming the arms there are)."""
    for label, option in ((arm, "--arm"), (versus, "--versus")):
        if label is not None and not any(label in by_label for by_label in rows.values()):
            arms = sorted({name for by_label in rows.values() for name in by_label})
            raise ValueError(f"no arm {label!r} in these results; {option} takes one of "
                             f"{', '.join(arms)}")
    scenarios, columns = {}, {}
    for name, by_label in rows.items():
        fixed = [label for label in (*FIXED_SINGLE, *oracle.get(name, {}).values())
                 if label in by_label]
        best = min(fixed, key=lambda label: _median(by_label[label]))
        entry = {"best": best, "best_tta": _median(by_label[best]),
                 "bsp_tta": _median(by_label["BSP"]) if "BSP" in by_label else None}
        if arm in by_label:
            entry["tta"] = _median(by_label[arm])
            entry["vs_best"] = _paired(by_label[arm], by_label[best])
            if "BSP" in by_label:
                entry["vs_bsp"] = _paired(by_label[arm], by_label["BSP"])
            if versus in by_label:
                entry["vs_other"] = _paired(by_label[arm], by_label[versus])
        scenarios[name] = entry
        # One column per arm family: a tuned family under its family name.
        tuned = {label: family for family, label in oracle.get(name, {}).items()}
        grids = {label.split("(")[0] for label in tuned}
        for label, times in by_label.items():
            if label not in tuned and label.split("(")[0] in grids:
                continue  # a grid value that is not this scenario's tuned one
            key = f"{tuned[label]} (tuned)" if label in tuned else label
            columns.setdefault(key, {})[name] = _median(times)
    names = list(rows)
    geo = {}
    for key, medians in columns.items():
        if len(medians) == len(names):
            values = [medians[n] for n in names]
            geo[key] = (math.inf if any(math.isinf(v) for v in values)
                        else float(math.exp(np.mean(np.log(values)))))
    return {"scenarios": scenarios, "geomean": dict(sorted(geo.items(), key=lambda kv: kv[1]))}


def load(directories) -> tuple[dict, dict]:
    """``rows`` and ``oracle`` of `standing` from every ``results.json`` under the
    given bench output directories (one per scenario and worker count): each arm's
    time to target per seed, from the file's runs (not the bench table's interval); a
    later directory's arms replace an earlier one's of the same scenario and name."""
    rows, oracle = {}, {}
    for directory in directories:
        for path in sorted(pathlib.Path(directory).glob("*/results.json")):
            data = json.loads(path.read_text())
            bench = data.get("bench")
            if not bench:
                continue
            # Directories given later add arms to, or replace arms of, a scenario of the
            # same name: e.g. one rule re-run beside a finished matrix (same seeds).
            name = path.parent.name
            rows.setdefault(name, {}).update({
                policy["policy"]: {run["seed"]: run.get("tta_s") for run in policy["per_seed"]}
                for policy in data.get("policies", [])})
            oracle.setdefault(name, {}).update(bench.get("oracle") or {})
    if not rows:
        raise ValueError(f"no bench results.json under {list(map(str, directories))}; give "
                         "the --out directory of `python -m cluster_sim bench policies`")
    return rows, oracle


def format_standing(result: dict, arm: str, versus: str | None = None) -> str:
    """Markdown: the per-scenario table and the geometric means."""
    cell = lambda v: "never" if v is None or math.isinf(v) else f"{v:.2f}"  # noqa: E731
    ratio = lambda r: "-" if r is None else format_interval(*r[:3], ".2f")  # noqa: E731
    entries = result["scenarios"].values()
    kind = lambda key: interval_label(e.get(key) for e in entries)  # noqa: E731
    other = [f"{arm} / {versus}, paired [{kind('vs_other')}]"] if versus else []
    table = markdown_table_rows(
        ["scenario", "oracle-tuned best fixed rule", "its TTA s", f"{arm} TTA s",
         f"{arm} / best, paired [{kind('vs_best')}]", f"{arm} / BSP, paired [{kind('vs_bsp')}]",
         *other],
        [[name, e["best"], cell(e["best_tta"]), cell(e.get("tta")),
          ratio(e.get("vs_best")), ratio(e.get("vs_bsp")),
          *([ratio(e.get("vs_other"))] if versus else [])]
         for name, e in result["scenarios"].items()])
    means = markdown_table_rows(["arm", "geometric mean"],
                                [[key, cell(v)] for key, v in result["geomean"].items()])
    return f"{table}\n\nGeometric mean of median TTA over the scenarios (s):\n\n{means}"


def add_arguments(parser) -> None:
    parser.add_argument("directories", nargs="+",
                        help="--out directories of `bench policies` runs")
    parser.add_argument("--arm", default="Adaptive", help="the arm to place (default Adaptive)")
    parser.add_argument("--versus", default=None, metavar="LABEL",
                        help="also pair the arm with this one per scenario, e.g. --arm "
                             "Adaptive+alloc --versus Adaptive")


def run(args) -> int:
    try:
        rows, oracle = load(args.directories)
        result = standing(rows, oracle, args.arm, args.versus)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_standing(result, args.arm, args.versus))
    return 0
