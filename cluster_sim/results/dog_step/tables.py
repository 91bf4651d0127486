"""README.md's tables from runs.jsonl (``python cluster_sim/results/dog_step/tables.py``):
time to the early target, s, seeds 100; 101 (tuning seeds: none of these is reported
elsewhere), and the median rate DoG used."""
import collections
import json
import pathlib

runs = [json.loads(line) for line in
        (pathlib.Path(__file__).parent / "runs.jsonl").read_text().splitlines()]
cells = collections.defaultdict(list)
for r in runs:
    cells[r["scenario"], r["workers"], r["arm"], r["variant"]].append(r)
print("| cell | arm | variant | TTA s (seeds 100; 101, or 100 alone) | rate used (median) |")
print("|---|---|---|---|---|")
for (scenario, n, arm, variant), rs in cells.items():
    tta = "; ".join("never" if r["tta_s"] is None else f"{r['tta_s']:.1f}" for r in rs)
    print(f"| {scenario} / {n} | {arm} | {variant} | {tta} | "
          f"{'; '.join(str(r['used'][1]) for r in rs)} |")
