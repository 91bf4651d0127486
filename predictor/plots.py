"""Plot of forecasts against the truth for a few held-out series (matplotlib, Agg).

Example:

>>> import numpy as np, tempfile, os
>>> from predictor.plots import plot_forecasts
>>> from predictor.traces import Series
>>> s = [Series("job", "0", np.linspace(1.0, 2.0, 50))]
>>> ids = np.array([[0, t] for t in range(20, 40)])
>>> truth = np.stack([s[0].speed[t:t + 5] for t in range(20, 40)])
>>> path = os.path.join(tempfile.mkdtemp(), "f.png")
>>> plot_forecasts(path, s, [s[0].speed], ids, truth, {"perfect": truth}, step=5)
>>> os.path.getsize(path) > 0
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_forecasts"]


def plot_forecasts(path, series, values, ids, truth, forecasts: dict, step: int = 5,
                   max_series: int = 3, max_points: int = 400) -> None:
    """For up to ``max_series`` test series (most variable first), plot the truth and
    each forecaster's ``step``-ahead forecast aligned with the time it forecasts."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spread = [np.std(np.log(v)) for v in values]
    chosen = list(np.argsort(spread)[::-1][:max_series])
    fig, axes = plt.subplots(len(chosen), 1, figsize=(11, 3.2 * len(chosen)), squeeze=False)
    for ax, s_idx in zip(axes[:, 0], chosen):
        rows = np.flatnonzero(ids[:, 0] == s_idx)
        # Zoom on the stretch whose speed varies most (slow episodes), not a flat one.
        t = ids[rows, 1] + step - 1
        if len(rows) > max_points:
            y = np.log(truth[rows, step - 1])
            c1, c2 = np.cumsum(np.r_[0, y]), np.cumsum(np.r_[0, y * y])
            m = (c1[max_points:] - c1[:-max_points]) / max_points
            var = (c2[max_points:] - c2[:-max_points]) / max_points - m * m
            start = int(np.argmax(var))
            rows, t = rows[start:start + max_points], t[start:start + max_points]
        ax.plot(t, truth[rows, step - 1], color="black", lw=1.6, label="truth")
        for name, pred in forecasts.items():
            ax.plot(t, pred[rows, step - 1], lw=1.0, alpha=0.85, label=f"{name} (h={step})")
        ax.set_title(series[s_idx].name)
        ax.set_xlabel("sample index (every 10 iterations)")
        ax.set_ylabel("speed (1000 / norm. step time)")
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
