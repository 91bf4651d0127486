"""Inference latency and online refit cost of the forecasters.

Usage::

    python -m predictor.bench                 # shipped default GRUSmoothingForecaster
    python -m predictor.bench --repeats 500 --workers 8 64 512

Latency is the wall time of one ``predict(histories, horizon=10)`` call for all
workers at once (input checks, smoothing, GRU), median over ``--repeats`` calls
after warm-up. Refit cost is one ``refit()`` (``refit_epochs`` of fine-tuning)
on ``--refit-points`` buffered points per worker, as ``OnlineForecaster`` does.

Example:

>>> from predictor.bench import latency_ms
>>> from predictor.baselines import LastValue
>>> stats = latency_ms(LastValue(), n_workers=8, repeats=5)
>>> sorted(stats)
['median_ms', 'p90_ms']
"""

from __future__ import annotations

import argparse
import time

import numpy as np

__all__ = ["latency_ms", "refit_seconds", "main"]


def _histories(n_workers: int, length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    level = rng.uniform(1.0, 20.0, size=(n_workers, 1))
    return level * np.exp(0.05 * rng.standard_normal((n_workers, length)))


def latency_ms(forecaster, n_workers: int, repeats: int = 200, horizon: int = 10,
               length: int = 256) -> dict:
    """Median and 90th-percentile milliseconds of one batched ``predict`` call."""
    hist = _histories(n_workers, length)
    for _ in range(5):  # warm-up: tf.function tracing, caches
        forecaster.predict(hist, horizon=horizon)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forecaster.predict(hist, horizon=horizon)
        times.append(1000.0 * (time.perf_counter() - start))
    return {"median_ms": float(np.median(times)), "p90_ms": float(np.percentile(times, 90))}


def refit_seconds(forecaster, n_workers: int, points: int = 500, repeats: int = 3) -> float:
    """Median seconds of ``refit()`` on ``points`` buffered speeds per worker."""
    forecaster.reset_buffers()
    forecaster.update(_histories(n_workers, points, seed=1))
    times = [forecaster.refit() for _ in range(repeats)]
    forecaster.reset_buffers()
    return float(np.median(times))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m predictor.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="forecaster file (default: the shipped one)")
    p.add_argument("--workers", type=int, nargs="+", default=[8, 64, 512])
    p.add_argument("--repeats", type=int, default=300)
    p.add_argument("--refit-workers", type=int, nargs="+", default=[8, 64])
    p.add_argument("--refit-points", type=int, default=500)
    args = p.parse_args(argv)

    from .loading import load
    from .gru import GRUSmoothingForecaster
    model = GRUSmoothingForecaster.default() if args.model is None else load(args.model)
    print(f"model: {model!r}")
    print("| workers | median ms | p90 ms |\n|---|---|---|")
    for n in args.workers:
        s = latency_ms(model, n, repeats=args.repeats)
        print(f"| {n} | {s['median_ms']:.2f} | {s['p90_ms']:.2f} |", flush=True)
    print(f"\nrefit cost ({args.refit_points} points/worker, "
          f"{getattr(model, 'refit_epochs', '-')} epoch(s) of fine-tuning):")
    print("| workers | median s |\n|---|---|")
    for n in args.refit_workers:
        print(f"| {n} | {refit_seconds(model, n, args.refit_points):.2f} |", flush=True)


if __name__ == "__main__":
    main()
