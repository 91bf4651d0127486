"""README.md's tables from runs.jsonl
(``python cluster_sim/results/stall_halving/stall_tables.py``): time to target (early
unless said), s, seeds 100; 101 (tuning seeds: none of these is reported elsewhere), each
variant beside the product (``off``), and each variant's spread over the four base rates
(the slowest rate's time over the fastest's, per seed)."""
import collections
import json
import pathlib

runs = [json.loads(line) for line in
        (pathlib.Path(__file__).parent / "runs.jsonl").read_text().splitlines()]
variants = list(dict.fromkeys(r["variant"] for r in runs))
cells = collections.defaultdict(lambda: collections.defaultdict(dict))
for r in runs:
    rate = r["arm"].partition("lr=")[2]
    cells[r["scenario"], r["workers"], rate, r["target"]][r["variant"]][r["seed"]] = r["tta_s"]


def times(by_seed):
    return "; ".join("never" if t is None else f"{t:.1f}" for _, t in sorted(by_seed.items()))


print("| cell, base rate | " + " | ".join(variants) + " |")
print("|---" * (len(variants) + 1) + "|")
for (scenario, workers, rate, target), by_variant in cells.items():
    late = ", late target" if target == "late" else ""
    print(f"| {scenario} / {workers}, {rate}{late} | "
          + " | ".join(times(by_variant.get(v, {})) or "-" for v in variants) + " |")

print()
print("| cell: spread over the base rates (seeds 100; 101) | " + " | ".join(variants) + " |")
print("|---" * (len(variants) + 1) + "|")
for scenario, workers in dict.fromkeys((s, w) for s, w, _, _ in cells):
    rates = [k for k in cells if k[:2] == (scenario, workers) and k[3] == "early"]
    row = []
    for v in variants:
        spread = []
        for seed in (100, 101):
            ts = [cells[k][v].get(seed) for k in rates]
            if len(ts) == 4 and all(t is not None for t in ts):
                spread.append(f"{max(ts) / min(ts):.2f}")
            else:
                spread.append("-")
        row.append("; ".join(spread))
    print(f"| {scenario} / {workers} | " + " | ".join(row) + " |")
