"""Evaluate every forecaster on held-out workers or jobs: forecast error and allocation regret.

Usage::

    python -m predictor.evaluate --traces ../shared/traces/alibaba_pai --out runs/predictor_eval
    python -m cluster_sim speeds --scenarios colocated,pause,churn --out runs/regimes.npz
    python -m predictor.evaluate --traces ../shared/traces/alibaba_pai --holdout job \\
        --metric both --machine-usage ../shared/traces/alibaba2018_machine_usage \\
        --regimes runs/regimes.npz --out runs/predictor_regret

Splits (``predictor.heldout``): ``--holdout worker`` (default, fixed seed): within
each job 30 % of the workers are test, 10 % validation, the rest training.
``--holdout job``: each job in turn is test (all its workers), the others train.
With ``--machine-usage``, the first half of the 2018 machine-usage machines joins
every training set and the second half is held out (``predictor.regime``).
Models are fit on training series only; validation workers serve early stopping
of the GRUs; baselines choose their window / smoothing factor on the training
series. Test series are only forecast.

``--metric mape``: every point of a test series with at least ``--min-history``
points before it and ``R`` after it is a forecast origin; MAPE (%) and RMSE (speed
= 1000 / normalised step time) at horizons 1, 5 and 10 and for the mean speed over
the next R = 10 steps. ``--metric regret``: allocation replayed with each
forecaster (``predictor.regret``) on every test job's workers as one cluster
(a window = ``--every`` trace points) and, with ``--machine-usage`` / ``--regimes`` (an
``.npz`` of ``[workers, windows]`` speed matrices by name, as ``python -m cluster_sim
speeds`` writes them from scenarios),
on the regime-change traces (with ``--holdout job`` by models trained on every
job). Writes ``results.json``, ``results.md`` (and ``forecasts.png`` for MAPE) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from .heldout import HOLDOUTS, make_folds
from .metrics import horizon_metrics
from .traces import load_traces
from .windows import forecast_origins

__all__ = ["make_forecasters", "evaluate", "format_table", "format_regret", "main"]

R = 10
HORIZONS = (1, 5, 10)
METRICS = ("mape", "regret", "both")
#: the classical baselines the targets compare against.
CLASSICAL = ("LastValue", "MovingAverage", "ExpSmoothing", "LagRegressor")


def make_forecasters(gru_kwargs: dict | None = None) -> dict:
    """The forecasters compared, with the settings the shipped default uses."""
    from .baselines import (ChangePointSmoothing, ExponentialSmoothing, LagRegressor,
                            LastValue, MovingAverage)
    from .gru import GRUOnly, GRUSmoothingForecaster

    gru_kwargs = dict(gru_kwargs or {})
    gru = GRUSmoothingForecaster(horizon=R, **gru_kwargs)
    return {
        "GRUSmoothing": gru,
        "LastValue": LastValue(),
        "MovingAverage": MovingAverage(),
        "ExpSmoothing": ExponentialSmoothing(),
        "GRUOnly": GRUOnly(horizon=R, **{k: v for k, v in gru_kwargs.items()
                                         if k not in ("changepoint", "jump")}),
        "LagRegressor": LagRegressor(horizon=R),
        # The GRU's level alone: its change-point threshold and one-point jumps.
        "CPSmoothing": ChangePointSmoothing(threshold=gru.changepoint or 3.0,
                                            jump=gru.jump if gru.changepoint else None),
    }


def load_regimes(regimes) -> dict | None:
    """``regimes`` as ``{name: speeds}``: a dict as it is, an ``.npz`` path read (its
    arrays by name), None as None."""
    if regimes is None or isinstance(regimes, dict):
        return regimes
    path = Path(regimes)
    if not path.is_file():
        raise FileNotFoundError(f"--regimes {path}: no such file; write one with `python -m "
                                "cluster_sim speeds --scenarios colocated,pause,churn --out "
                                f"{path}`")
    with np.load(path) as npz:
        return {name: npz[name] for name in npz.files}


def evaluate(series_dir, out_dir=None, min_history: int = 32, seed: int = 0,
             gru_kwargs: dict | None = None, verbose: bool = True, holdout: str = "worker",
             metric: str = "mape", machine_usage=None, regimes=None, every: int = 2,
             allocation_horizon: int = 1, synthetic: int = 0) -> dict:
    """Fit on training series, score on held-out ones; return metrics per forecaster.

    ``regimes``: ``{name: [workers, windows] speeds}`` to replay allocation on too
    (`predictor.regime.regime_sets`), or the path of an ``.npz`` holding them."""
    from .regime import regime_sets

    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    say = print if verbose else (lambda *a, **k: None)
    extra = training_extras(machine_usage, synthetic, seed)
    regime = regime_sets(machine_usage, load_regimes(regimes)) if metric != "mape" else {}
    folds = make_folds(load_traces(series_dir), holdout, seed, extra,
                       with_all=bool(regime) and holdout == "job")
    pooled = {"hist": [], "truth": [], "ids": [], "names": [], "values": []}
    forecasts: dict[str, list] = {}
    fit_seconds: dict[str, float] = {}
    regret: dict[str, dict] = {}
    per_fold: dict[str, dict] = {}
    for fold in folds:
        for label in ("train", "validation", "test"):
            say(f"[fold {fold.name}] {label:>10}: {len(fold.names[label])} series "
                + " ".join(fold.names[label])
                + (f" + {len(extra)} machine-usage / synthetic series"
                   if label == "train" and extra else ""), flush=True)
        test_x = [x for xs in fold.test.values() for x in xs]
        hist, truth, ids = forecast_origins(test_x, min_history=min_history, horizon=R,
                                            max_history=256)
        if fold.test and metric != "regret" and not hist:
            raise ValueError(f"test series are shorter than min_history + R = {min_history + R}")
        ids[:, 0] += len(pooled["values"])
        pooled["hist"] += hist
        pooled["truth"].append(truth)
        pooled["ids"].append(ids)
        pooled["names"] += fold.names["test"]
        pooled["values"] += test_x
        replays = {} if metric == "mape" else {
            f"{job} (held-out job)" if holdout == "job" else f"{job} (held-out workers)":
            (np.array([x[:min(map(len, xs))] for x in xs]), every) for job, xs in fold.test.items()}
        if fold is folds[-1]:
            replays.update({name: (true, 1, seen) for name, (true, seen) in regime.items()})
        for name, model in make_forecasters(gru_kwargs).items():
            start = time.perf_counter()
            model.fit(fold.train, validation=fold.val or None,
                      **({"verbose": 1} if verbose and name.startswith("GRU") else {}))
            fit_seconds[name] = fit_seconds.get(name, 0.0) + time.perf_counter() - start
            if hist and metric != "regret":
                pred = np.concatenate([model.predict(hist[i:i + 4096], horizon=R)
                                       for i in range(0, len(hist), 4096)])
                forecasts.setdefault(name, []).append(pred)
                per_fold.setdefault(fold.name, {})[name] = horizon_metrics(truth, pred,
                                                                           HORIZONS, R)
            for trace, (true, win, *seen) in replays.items():
                r = _regret(true, model, win, seen[0] if seen else None, allocation_horizon)
                regret.setdefault(trace, {})[name] = r
            say(f"[fold {fold.name}] [{name}] {repr(model)} "
                f"({time.perf_counter() - start:.1f}s)", flush=True)
    report = {"holdout": holdout, "folds": {f.name: f.names for f in folds}, "seed": seed,
              "min_history": min_history, "R": R}
    if forecasts:
        truth = np.concatenate(pooled["truth"])
        results = {name: dict(horizon_metrics(truth, np.concatenate(p), HORIZONS, R),
                              fit_seconds=round(fit_seconds[name], 2))
                   for name, p in forecasts.items()}
        report.update(origins=len(truth), metrics=results, fold_metrics=per_fold)
        if holdout == "worker":
            report["split"] = dict(folds[0].names, seed=seed)
        say(format_table(results))
        if len(per_fold) > 1:
            for name, res in per_fold.items():
                say(f"\nfold {name}:\n" + format_table(res))
    if regret:
        report.update(every=every, allocation_horizon=allocation_horizon, regret=regret)
        say(format_regret(regret))
    if out_dir is not None:
        _write(Path(out_dir), report, pooled, forecasts, say)
    return report


def training_extras(machine_usage=None, synthetic: int = 0, seed: int = 0) -> list:
    """Series every fold trains on besides the traces' own: the training half of the
    machine-usage machines and ``synthetic`` regime-switching series."""
    from .regime import split_machines
    from .synthetic import regime_switching

    extra = list(split_machines(machine_usage)[0].values()) if machine_usage else []
    return extra + (regime_switching(synthetic, seed=seed) if synthetic else [])


def _regret(true, model, every, seen, horizon) -> dict:
    from .regret import allocation_regret
    r = allocation_regret(true, model, measured=seen, every=every, horizon=horizon)
    return {k: v for k, v in r.items() if k != "regret"}


def _write(out: Path, report, pooled, forecasts, say) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2))
    tables = [format_table(report["metrics"])] if "metrics" in report else []
    folds = report.get("fold_metrics", {})
    tables += [f"fold {name}:\n\n" + format_table(res) for name, res in folds.items()
               if len(folds) > 1]
    tables += [format_regret(report["regret"])] if "regret" in report else []
    (out / "results.md").write_text("\n\n".join(tables) + "\n")
    written = [out / "results.json", out / "results.md"]
    if forecasts:
        from .plots import plot_forecasts
        names = [SimpleNamespace(name=n) for n in pooled["names"]]
        plot_forecasts(out / "forecasts.png", names, pooled["values"],
                       np.concatenate(pooled["ids"]), np.concatenate(pooled["truth"]),
                       {k: np.concatenate(v) for k, v in forecasts.items()}, step=5)
        written.append(out / "forecasts.png")
    say("wrote " + ", ".join(map(str, written)))


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
        gains, ratios = [], []
        classical = [n for n in CLASSICAL if n in results]
        for c in cols:
            base = min(r[c]["MAPE"] for n, r in results.items() if n != "GRUSmoothing")
            gains.append(f"{c}: {100 * (1 - results['GRUSmoothing'][c]['MAPE'] / base):+.1f}%")
            if classical:
                best_classical = min(results[n][c]["MAPE"] for n in classical)
                ratios.append(f"{c}: {results['GRUSmoothing'][c]['MAPE'] / best_classical:.3f}x")
        lines.append("\nGRUSmoothing MAPE reduction vs best other forecaster: " + ", ".join(gains))
        if ratios:
            lines.append("GRUSmoothing MAPE / best classical baseline's "
                         f"({', '.join(classical)}): " + ", ".join(ratios))
    return "\n".join(lines)


def format_regret(regret: dict) -> str:
    """Markdown table: mean allocation regret (%) per trace and forecaster, best in bold,
    then each forecaster's ratio to LastValue and to the best classical baseline."""
    names = list(next(iter(regret.values())))
    lines = ["| trace | windows | " + " | ".join(names) + " |", "|" + "---|" * (2 + len(names))]
    for trace, row in regret.items():
        best = min(r["mean_regret"] for r in row.values())
        cells = [f"**{100 * r['mean_regret']:.2f}%**" if r["mean_regret"] == best
                 else f"{100 * r['mean_regret']:.2f}%" for r in row.values()]
        lines.append(f"| {trace} | {next(iter(row.values()))['windows']} | "
                     + " | ".join(cells) + " |")
    classical = [n for n in CLASSICAL if n in names]
    if "GRUSmoothing" in names and classical:
        lines.append("\nGRUSmoothing regret / LastValue's, / best classical baseline's:")
        for trace, row in regret.items():
            own = row["GRUSmoothing"]["mean_regret"]
            base = min(row[n]["mean_regret"] for n in classical)
            last = row.get("LastValue", {}).get("mean_regret", np.nan)
            lines.append(f"- {trace}: {own / last:.2f}x LastValue, {own / base:.2f}x best "
                         "classical")
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
    p.add_argument("--changepoint", type=float, default=None,
                   help="override GRUSmoothing's change-point threshold (0: plain smoothing)")
    p.add_argument("--jump", type=float, default=None,
                   help="override the one-point restart of GRUSmoothing's level and of "
                        "CPSmoothing (0: wait for a second point)")
    p.add_argument("--holdout", choices=HOLDOUTS, default="worker",
                   help="hold out whole workers of every job, or whole jobs in turn")
    p.add_argument("--metric", choices=METRICS, default="mape",
                   help="forecast error, allocation regret, or both")
    p.add_argument("--machine-usage", default=None,
                   help="directory of the Alibaba 2018 machine_usage trace (train + regret)")
    p.add_argument("--regimes", default=None,
                   help="an .npz of [workers, windows] speed matrices by name (regret), "
                        "e.g. from `python -m cluster_sim speeds --scenarios "
                        "colocated,pause,churn --out regimes.npz`")
    p.add_argument("--every", type=int, default=2,
                   help="trace points per allocation window in the regret replay of test jobs")
    p.add_argument("--synthetic", type=int, default=0,
                   help="regime-switching synthetic series added to every training set")
    p.add_argument("--allocation-horizon", type=int, default=1,
                   help="windows ahead whose mean forecast sets the sizes (AllocationSchedule; "
                        "default 1, as the product)")
    args = p.parse_args(argv)
    if not sorted(Path(args.traces).glob("*.csv")):
        # Name the directory and a sample that works, not a traceback from the loader.
        problem = "is not a directory" if not Path(args.traces).is_dir() else "has no CSV files"
        p.error(f"--traces {args.traces} {problem}. Give a directory of Alibaba-PAI-format "
                "CSVs (e.g. ../shared/traces/alibaba_pai), or try the vendored sample: "
                f"--traces {Path(__file__).parent / 'data'}")
    gru = {k: v for k, v in (("epochs", args.epochs), ("units", args.units),
                             ("window", args.window)) if v is not None}
    if args.changepoint is not None:
        gru["changepoint"] = args.changepoint or None
    if args.jump is not None:
        gru["jump"] = args.jump or None
    evaluate(args.traces, args.out, min_history=args.min_history, seed=args.seed, gru_kwargs=gru,
             holdout=args.holdout, metric=args.metric, machine_usage=args.machine_usage,
             regimes=args.regimes, every=args.every,
             allocation_horizon=args.allocation_horizon, synthetic=args.synthetic)


if __name__ == "__main__":
    main()
