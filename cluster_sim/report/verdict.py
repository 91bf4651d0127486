"""The plain-language verdict under a comparison table, computed from the measured runs.

Which rule reached the target fastest, by how much against BSP and against the next
fastest rule, and with what confidence: each comparison is the ratio of the two rules'
times to target paired by seed (same initial weights and data order) with its interval
(`cluster_sim.report.stats.paired_ratio_ci`: under 5 seeds the median and the range of
the seeds, from 5 a 90 % interval). A difference counts only when the interval (or
range) excludes 1; otherwise the verdict says the rules are not separated at this many
seeds. With one seed there is no interval, and
the verdict says so.

Example:

>>> runs = lambda *ttas: [{"seed": i, "tta_s": t} for i, t in enumerate(ttas)]
>>> print(verdict([{"policy": "BSP", "tta_s": 12.0, "per_seed": runs(10.0, 12.0, 13.0)},
...                {"policy": "ASP", "tta_s": 9.0, "per_seed": runs(6.0, 9.0, 10.0)},
...                {"policy": "SSP", "tta_s": 9.5, "per_seed": runs(9.0, 9.5, 9.0)}]))
ASP reached the target fastest: 0.75x BSP's time [0.60, 0.77] (median ratio paired by seed over 3 seeds, [min, max] of them: fewer than 5 seeds give no interval), faster than BSP in every seed; against the next fastest, SSP: 0.95x [0.67, 1.11], not separated at 3 seeds.
>>> print(verdict([{"policy": "BSP", "tta_s": 12.0, "per_seed": runs(12.0)},
...                {"policy": "ASP", "tta_s": 9.0, "per_seed": runs(9.0)}]))
ASP reached the target fastest, 25 % before BSP; one seed cannot separate the rules (seed-to-seed differences are unmeasured): run --seeds 3 or more before choosing.
"""

from __future__ import annotations

from cluster_sim.report.results import rule_name
from cluster_sim.report.stats import paired_ratio_ci

__all__ = ["verdict"]


def _paired(a, b):
    """``(median, low, high, pairs)`` of ``a``'s time over ``b``'s on their common
    seeds, or None when no common seed has a ratio."""
    ta = {r["seed"]: r.get("tta_s") for r in a["per_seed"]}
    tb = {r["seed"]: r.get("tta_s") for r in b["per_seed"]}
    common = sorted(set(ta) & set(tb))
    try:
        return paired_ratio_ci([ta[s] for s in common], [tb[s] for s in common])
    except ValueError:  # no common seed, or neither reached the target on any
        return None


def _ratio_text(ratio, versus):
    point, low, high, pairs = ratio
    cell = lambda v: "never" if v == float("inf") else f"{v:.2f}"
    return f"{cell(point)}x{versus} [{cell(low)}, {cell(high)}]", pairs


def verdict(summaries) -> str:
    """One or two sentences on `cluster_sim.report.summarise` output (see the module
    docstring); never a ranking the seeds cannot support."""
    reached = [s for s in summaries if s["tta_s"] is not None]
    if not reached:
        return ("No rule reached the target within its budget: compare the final loss "
                "and accuracy, or raise --max-pushes.")
    ranked = sorted(reached, key=lambda s: s["tta_s"])
    best = ranked[0]
    bsp = next((s for s in summaries if rule_name(s["policy"]) == "BSP"), None)
    seeds = max(len(s["per_seed"]) for s in summaries)
    text = f"{best['policy']} reached the target fastest"
    if seeds < 2:
        if bsp is None:
            text += " (no BSP run to compare with)"
        elif bsp is best:
            text += f" ({best['tta_s']:.1f} s)"
        elif bsp["tta_s"] is None:
            text += ", and BSP did not reach it"
        else:
            text += f", {100 * (1 - best['tta_s'] / bsp['tta_s']):.0f} % before BSP"
        return (text + "; one seed cannot separate the rules (seed-to-seed differences "
                "are unmeasured): run --seeds 3 or more before choosing.")
    parts = []
    if bsp is None:
        parts.append(text + " (no BSP run to compare with)")
    elif bsp is not best and _paired(best, bsp) is None:
        parts.append(f"{text} (no seed run by both it and BSP to compare)")
    elif bsp is not best:
        ratio = _paired(best, bsp)
        cell, pairs = _ratio_text(ratio, " BSP's time")
        parts.append(f"{text}: {cell} ({_how(ratio)}), " +
                     (_faster(ratio, "than BSP") if ratio[2] < 1 else
                      f"not separated from BSP at {pairs} seeds"))
    else:
        parts.append(f"{text} ({best['tta_s']:.1f} s, median over {seeds} seeds)")
    # The next fastest, unless it is BSP, which the first comparison covers.
    if len(ranked) > 1 and ranked[1] is not bsp and _paired(best, ranked[1]) is not None:
        runner = ranked[1]
        ratio = _paired(best, runner)
        cell, pairs = _ratio_text(ratio, "")
        parts.append(f"against the next fastest, {runner['policy']}: {cell}, " +
                     (_faster(ratio, "") if ratio[2] < 1 else
                      f"not separated at {pairs} seeds"))
    return "; ".join(parts) + "."


def _how(ratio) -> str:
    """What the interval of a paired ratio (`cluster_sim.report.stats.Interval`) is."""
    n = ratio[3]
    return {"range": f"median ratio paired by seed over {n} seeds, [min, max] of them: "
                     "fewer than 5 seeds give no interval",
            "t": f"geometric mean of the ratios paired by seed over {n} seeds, "
                 f"{ratio.label} (t on the logs)",
            "order": f"median ratio paired by seed over {n} seeds, {ratio.label} "
                     "(order statistics)"}[ratio.kind]


def _faster(ratio, than: str) -> str:
    """A range below 1 says every seed was faster, not that the difference is real."""
    than = f" {than}" if than else ""
    return (f"faster{than} in every seed" if ratio.kind == "range"
            else f"faster{than} beyond seed noise")
