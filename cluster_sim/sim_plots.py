"""Plots of simulated runs: accuracy against simulated time, and staleness histograms.

Example:

```python
write_plots(results, "runs/sim")   # accuracy.png, staleness.png
```
"""

import pathlib


def write_plots(results: list[dict], out, target_accuracy: float | None = None) -> list:
    """PNG files in ``out`` (matplotlib's Agg backend, no display needed); their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(r["policy"] for r in results))
    colours = {p: f"C{i % 10}" for i, p in enumerate(policies)}

    fig, ax = plt.subplots(figsize=(8, 5))
    labelled = set()
    for r in results:
        xs = [c["wall_s"] for c in r["curve"]]
        ys = [c["accuracy"] for c in r["curve"]]
        p = r["policy"]
        ax.plot(xs, ys, color=colours[p], alpha=0.8, label=None if p in labelled else p)
        labelled.add(p)
    if target_accuracy:
        ax.axhline(target_accuracy, color="grey", linestyle="--", linewidth=1,
                   label=f"target {target_accuracy:g}")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title("accuracy against simulated time (one line per seed)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    accuracy = out / "accuracy.png"
    fig.tight_layout()
    fig.savefig(accuracy, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(len(policies), 1, figsize=(8, 2.2 * len(policies)), squeeze=False)
    for ax, p in zip(axes[:, 0], policies):
        hists = [np.asarray(r["staleness_histogram"]) for r in results if r["policy"] == p]
        total = np.zeros(max(len(h) for h in hists))
        for h in hists:
            total[:len(h)] += h
        ax.bar(np.arange(len(total)), total / max(total.sum(), 1), color=colours[p], width=1.0)
        ax.set_title(p, fontsize=9)
        ax.set_ylabel("fraction")
    axes[-1, 0].set_xlabel("staleness at arrival (updates)")
    fig.tight_layout()
    staleness = out / "staleness.png"
    fig.savefig(staleness, dpi=110)
    plt.close(fig)
    return [accuracy, staleness]
