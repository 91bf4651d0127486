"""The plain-language verdict under a comparison table, computed from the measured runs.

Which rule reached the target fastest, by how much before BSP, and how large a
difference the seeds themselves produce: the noise is the seed-to-seed spread of each
policy's time to target ((slowest - fastest seed) / median), the median over policies.
A difference smaller than that is not evidence that one rule is faster; with one seed
there is no spread to measure, and the verdict says so.

Example:

>>> runs = lambda *ttas: [{"tta_s": t} for t in ttas]
>>> print(verdict([{"policy": "BSP", "tta_s": 12.0, "per_seed": runs(10.0, 12.0, 13.0)},
...                {"policy": "ASP", "tta_s": 9.0, "per_seed": runs(8.0, 9.0, 12.0)}]))
ASP reached the target fastest, 25 % before BSP; differences under 35 % are within noise at 3 seeds (the median seed-to-seed spread of time to target), so ASP and BSP are not separated.
>>> print(verdict([{"policy": "BSP", "tta_s": 12.0, "per_seed": runs(12.0)},
...                {"policy": "ASP", "tta_s": 9.0, "per_seed": runs(9.0)}]))
ASP reached the target fastest, 25 % before BSP; one seed cannot separate the rules (seed-to-seed differences are unmeasured): run --seeds 3 or more before choosing.
"""

from __future__ import annotations

import numpy as np

__all__ = ["verdict", "seed_noise"]


def seed_noise(summaries) -> float | None:
    """Median over policies of (slowest - fastest seed's TTA) / median TTA, from the
    policies with at least two seeds that reached the target; None without any."""
    spreads = []
    for s in summaries:
        ttas = [r["tta_s"] for r in s["per_seed"] if r.get("tta_s") is not None]
        if len(ttas) >= 2 and np.median(ttas) > 0:
            spreads.append((max(ttas) - min(ttas)) / float(np.median(ttas)))
    return float(np.median(spreads)) if spreads else None


def verdict(summaries) -> str:
    """One or two sentences on `cluster_sim.report.summarise` output (see the module
    docstring); never a ranking the seeds cannot support."""
    reached = [s for s in summaries if s["tta_s"] is not None]
    if not reached:
        return ("No rule reached the target accuracy within its budget: compare final "
                "accuracy, or raise --max-pushes.")
    best = min(reached, key=lambda s: s["tta_s"])
    text = f"{best['policy']} reached the target fastest"
    bsp = next((s for s in summaries if s["policy"].split("(")[0].strip().upper() == "BSP"),
               None)
    if bsp is None:
        text += " (no BSP run to compare with)"
    elif bsp is best:
        text += f" ({best['tta_s']:.1f} s)"
    elif bsp["tta_s"] is None:
        text += ", and BSP did not reach it"
    else:
        text += f", {100 * (1 - best['tta_s'] / bsp['tta_s']):.0f} % before BSP"
    seeds = max(len(s["per_seed"]) for s in summaries)
    noise = seed_noise(summaries)
    if seeds < 2 or noise is None:
        return (text + "; one seed cannot separate the rules (seed-to-seed differences "
                "are unmeasured): run --seeds 3 or more before choosing.")
    close = [s["policy"] for s in reached
             if s is not best and s["tta_s"] / best["tta_s"] - 1 < noise]
    text += (f"; differences under {100 * noise:.0f} % are within noise at {seeds} seeds "
             "(the median seed-to-seed spread of time to target)")
    if close:
        names = [best["policy"], *close]
        joined = ", ".join(names[:-1]) + " and " + names[-1]
        return text + f", so {joined} are not separated."
    return text + f", so {best['policy']} is faster beyond the noise."
