"""Rebuild the pretrained default forecaster shipped in ``predictor/data``.

Usage::

    python -m predictor.train_default --traces ../shared/traces/alibaba_pai \\
        --machine-usage ../shared/traces/alibaba2018_machine_usage

Trains ``GRUSmoothingForecaster`` with its default settings, then saves it to
``predictor/data/gru_smoothing_default.npz`` (or ``--out``). The data are the
``"all"`` fold of ``predictor.evaluate --holdout job`` (``predictor.heldout``):
every PAI job's workers except one validation worker per job (early stopping
only), plus, with ``--machine-usage``, the training half of the 2018
machine-usage machines; the other half stays held out for the regret evaluation.
``--holdout worker`` trains on the training workers of the worker split instead
(its test workers never seen).
"""

from __future__ import annotations

import argparse
import os

from .heldout import HOLDOUTS, make_folds
from .traces import load_traces

__all__ = ["train_default", "main"]


def train_default(traces, out=None, seed: int = 0, verbose: bool = True,
                  machine_usage=None, holdout: str = "job", synthetic: int = 0):
    """Fit the default forecaster on the training series of ``traces`` and save it."""
    from .gru import DEFAULT_MODEL_PATH, GRUSmoothingForecaster
    from .evaluate import training_extras

    extra = training_extras(machine_usage, synthetic, seed)
    fold = make_folds(load_traces(traces), holdout, seed, extra, with_all=holdout == "job")[-1]
    if verbose:
        print("train:", " ".join(fold.names["train"]),
              f"+ {len(extra)} machine-usage / synthetic series")
        print("validation (early stopping):", " ".join(fold.names["validation"]))
        print("held out (not used):", " ".join(fold.names["test"]) or "-", flush=True)
    model = GRUSmoothingForecaster()
    model.fit(fold.train, validation=fold.val or None, verbose=int(verbose))
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
    p.add_argument("--machine-usage", default=None,
                   help="directory of the Alibaba 2018 machine_usage trace (training half)")
    p.add_argument("--synthetic", type=int, default=0,
                   help="regime-switching synthetic series added to the training set")
    p.add_argument("--holdout", choices=HOLDOUTS, default="job",
                   help="job: train on every job; worker: keep the worker split's test out")
    args = p.parse_args(argv)
    train_default(args.traces, args.out, seed=args.seed, machine_usage=args.machine_usage,
                  holdout=args.holdout, synthetic=args.synthetic)


if __name__ == "__main__":
    main()
