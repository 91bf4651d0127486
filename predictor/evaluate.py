"""Evaluate every forecaster on held-out whole workers of a trace directory.

Usage::

    python -m predictor.evaluate --traces /work/shared/traces/alibaba_pai --out runs/predictor_eval

Split (fixed seed, see ``predictor.traces.split_by_worker``): within each job,
30 % of the workers are test, 10 % validation, the rest training. Models are
fit on the training workers only; the validation workers serve early stopping
of the GRUs; baselines choose their window / smoothing factor on the training
workers. The test workers are only forecast. Every point of a test series with
at least ``--min-history`` points before it and ``R`` after it is a forecast
origin. Prints MAPE (%) and RMSE (speed = 1000 / normalised step time) at
horizons 1, 5 and 10 and for the mean speed over the next R = 10 steps, and
writes ``results.json``, ``results.md`` and ``forecasts.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from .metrics import horizon_metrics
from .traces import load_traces, split_by_worker
from .windows import forecast_origins

__all__ = ["make_forecasters", "evaluate", "format_table", "main"]

R = 10
HORIZONS = (1, 5, 10)


def make_forecasters(gru_kwargs: dict | None = None) -> dict:
    """The forecasters compared, with the settings the shipped default uses."""
    from .baselines import ExponentialSmoothing, LagRegressor, LastValue, MovingAverage
    from .gru import GRUOnly, GRUSmoothingForecaster

    gru_kwargs = dict(gru_kwargs or {})
    return {
        "GRUSmoothing": GRUSmoothingForecaster(horizon=R, **gru_kwargs),
        "LastValue": LastValue(),
        "MovingAverage": MovingAverage(),
        "ExpSmoothing": ExponentialSmoothing(),
        "GRUOnly": GRUOnly(horizon=R, **gru_kwargs),
        "LagRegressor": LagRegressor(horizon=R),
    }


def evaluate(series_dir, out_dir=None, min_history: int = 32, seed: int = 0,
             gru_kwargs: dict | None = None, verbose: bool = True) -> dict:
    """Fit on training workers, forecast test workers; return metrics per forecaster."""
    say = print if verbose else (lambda *a, **k: None)
    train, val, test = split_by_worker(load_traces(series_dir), seed=seed)
    for label, part in (("train", train), ("validation", val), ("test", test)):
        say(f"{label:>10}: {len(part)} series, {sum(len(s.speed) for s in part)} points: "
            + " ".join(s.name for s in part), flush=True)
    clean = _cleaner()
    train_x, val_x, test_x = ([clean(s.speed, s.name) for s in part] for part in (train, val, test))
    hist, truth, ids = forecast_origins(test_x, min_history=min_history, horizon=R,
                                        max_history=256)
    if not hist:
        raise ValueError(f"test series are shorter than min_history + R = {min_history + R}")
    say(f"test origins: {len(hist)} (min_history={min_history}, R={R})", flush=True)

    results, forecasts = {}, {}
    for name, model in make_forecasters(gru_kwargs).items():
        start = time.perf_counter()
        say(f"[{name}] fitting on {len(train_x)} training series ...", flush=True)
        model.fit(train_x, validation=val_x or None, **({"verbose": 1} if verbose and
                                                        name.startswith("GRU") else {}))
        fit_s = time.perf_counter() - start
        pred = np.concatenate([model.predict(hist[i:i + 4096], horizon=R)
                               for i in range(0, len(hist), 4096)])
        results[name] = horizon_metrics(truth, pred, HORIZONS, R)
        results[name]["fit_seconds"] = round(fit_s, 2)
        forecasts[name] = pred
        say(f"[{name}] fit {fit_s:.1f}s, predict {time.perf_counter() - start - fit_s:.1f}s, "
            f"{repr(model)}", flush=True)
    table = format_table(results)
    say(table)
    report = {"split": {"train": [s.name for s in train], "validation": [s.name for s in val],
                        "test": [s.name for s in test], "seed": seed},
              "origins": len(hist), "min_history": min_history, "R": R, "metrics": results}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(report, indent=2))
        (out / "results.md").write_text(table + "\n")
        from .plots import plot_forecasts
        plot_forecasts(out / "forecasts.png", test, test_x, ids, truth, forecasts, step=5)
        say(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'forecasts.png'}")
    return report


def _cleaner():
    from .checks import clean_series
    return lambda x, name: clean_series(x, name)


def format_table(results: dict) -> str:
    """Markdown table: MAPE and RMSE per forecaster and horizon, best MAPE in bold."""
    cols = [f"h={h}" for h in HORIZONS] + [f"mean{R}"]
    best = {c: min(r[c]["MAPE"] for r in results.values()) for c in cols}
    head = "| forecaster | " + " | ".join(f"MAPE {c} | RMSE {c}" for c in cols) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(cols))]
    for name, r in results.items():
        cells = []
        for c in cols:
            m = f"{r[c]['MAPE']:.2f}%"
            cells += [f"**{m}**" if r[c]["MAPE"] == best[c] else m, f"{r[c]['RMSE']:.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "GRUSmoothing" in results and len(results) > 1:
        gains = []
        for c in cols:
            base = min(r[c]["MAPE"] for n, r in results.items() if n != "GRUSmoothing")
            gains.append(f"{c}: {100 * (1 - results['GRUSmoothing'][c]['MAPE'] / base):+.1f}%")
        lines.append("\nGRUSmoothing MAPE reduction vs best other forecaster: " + ", ".join(gains))
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m predictor.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", required=True, help="directory of CSV traces (long format)")
    p.add_argument("--out", default="runs/predictor_eval", help="output directory")
    p.add_argument("--min-history", type=int, default=32)
    p.add_argument("--seed", type=int, default=0, help="split seed")
    p.add_argument("--epochs", type=int, default=None, help="override GRU epochs")
    p.add_argument("--units", type=int, default=None, help="override GRU units")
    p.add_argument("--window", type=int, default=None, help="override GRU window")
    args = p.parse_args(argv)
    gru = {k: v for k, v in (("epochs", args.epochs), ("units", args.units),
                             ("window", args.window)) if v is not None}
    evaluate(args.traces, args.out, min_history=args.min_history, seed=args.seed, gru_kwargs=gru)


if __name__ == "__main__":
    main()
