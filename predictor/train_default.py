"""Rebuild the pretrained default forecaster shipped in ``predictor/data``.

Usage::

    python -m predictor.train_default --traces /work/shared/traces/alibaba_pai

Trains ``GRUSmoothingForecaster`` with its default settings on the *training*
workers of the same fixed-seed split ``predictor.evaluate`` uses (validation
workers only for early stopping; test workers never seen), then saves it to
``predictor/data/gru_smoothing_default.npz`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import os

from .checks import clean_series
from .traces import load_traces, split_by_worker

__all__ = ["train_default", "main"]


def train_default(traces, out=None, seed: int = 0, verbose: bool = True):
    """Fit the default forecaster on the training split of ``traces`` and save it."""
    from .gru import DEFAULT_MODEL_PATH, GRUSmoothingForecaster

    train, val, test = split_by_worker(load_traces(traces), seed=seed)
    if verbose:
        print("train:", " ".join(s.name for s in train))
        print("validation (early stopping):", " ".join(s.name for s in val))
        print("held out (not used):", " ".join(s.name for s in test), flush=True)
    model = GRUSmoothingForecaster()
    model.fit([clean_series(s.speed, s.name) for s in train],
              validation=[clean_series(s.speed, s.name) for s in val] or None,
              verbose=int(verbose))
    out = DEFAULT_MODEL_PATH if out is None else out
    model.save(out)
    if verbose:
        print(f"saved {model!r} (alpha_={model.alpha_}) to {out} "
              f"({os.path.getsize(out)} bytes)")
    return model


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m predictor.train_default", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", required=True, help="directory of CSV traces (long format)")
    p.add_argument("--out", default=None, help="output file (default: the packaged model)")
    p.add_argument("--seed", type=int, default=0, help="split seed (same as evaluate)")
    args = p.parse_args(argv)
    train_default(args.traces, args.out, seed=args.seed)


if __name__ == "__main__":
    main()
