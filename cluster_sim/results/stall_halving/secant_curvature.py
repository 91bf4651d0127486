"""The curvature along Adaptive's updates as the PS could measure it, with the gradient
noise taken out: a measurement for issue 47's robustness target (README.md), not product
code. It patches the simulator's SGD step and `ksync.state.UpdateState` in this process.

    PYTHONPATH=. python cluster_sim/results/stall_halving/secant_curvature.py \
        homogeneous 8 adaptive@0.08 100

Arguments as `../simspeed/time_run.py` (scenario, workers, arm spec, seed; the 8-worker
race's costs), then optionally ``--same-batch``. At each commit ``t`` the secant
``|g_t - g_{t-1}|^2 / |w_t - w_{t-1}|^2`` of the round-averaged gradients over the update
between them estimates ``L^2`` along the update, once the noise of two averages,
``tr(S) (1 / M_t + 1 / M_{t-1})`` (``tr(S)`` the
per-sample covariance trace the PS's AdaScale estimate keeps, ``M`` a round's samples), is
taken out: ``L^2 = (sum |dg|^2 - sum noise) / sum |dw|^2`` over each quarter-of-run
window. Prints the run and, for the first quarter, the second, and the second half:
the Keras rate (median), ``L``, the uncorrected ``L``, the noise's share of ``|dg|^2``,
``q = lr L / (2 (1 + mu))`` (heavy-ball momentum is stable along that direction for
``q < 1``) and, with the measured noise scale ``B``, the step over the noise-limited
optimum ``1 / (L (1 + B / M))`` of McCandlish et al. (2018), ``lr / (1 - mu) L (1 + B / M)``.

``--same-batch``: what the PS cannot measure, for comparison: at every fifth commit the
gradient of the last scheduled steps' batches before and after the update (no sampling
noise: ``L = |dg| / |dw|`` on one batch), medians of ``L``, ``q`` and the ratio over the
optimum per window.
"""

import json
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "simspeed"))
import time_run  # noqa: E402

from cluster_sim import numpy_mlp  # noqa: E402
from ksync import state as update_state  # noqa: E402


def same_batch(latest, rows):
    """Patches `numpy_mlp.MLP` to measure ``L`` on one batch at every fifth commit."""
    gradients, apply = numpy_mlp.MLP.gradients, numpy_mlp.MLP.apply
    commits = [0]

    def noted_gradients(self, params, x, y, weights):
        latest["batch"] = (x.copy(), y.copy(), weights.copy())
        return gradients(self, params, x, y, weights)

    def measured_apply(self, gradient, rate, momentum):
        commits[0] += 1
        if commits[0] % 5 or latest.get("batch") is None or latest["noise_scale"] is None:
            return apply(self, gradient, rate, momentum)
        before = self.params.copy()
        g0 = gradients(self, before, *latest["batch"]).astype(np.float64).mean(0)
        apply(self, gradient, rate, momentum)
        g1 = gradients(self, self.params, *latest["batch"]).astype(np.float64).mean(0)
        step = self.params.astype(np.float64) - before.astype(np.float64)
        curvature = math.sqrt(float(np.sum((g1 - g0) ** 2)) / float(np.sum(step ** 2)))
        rows.append((curvature, rate, momentum, latest["noise_scale"], latest["samples"]))

    numpy_mlp.MLP.gradients = noted_gradients
    numpy_mlp.MLP.apply = measured_apply


def windows(rows):
    """``(name, rows)`` of the run's first quarter, second quarter and second half."""
    table = np.asarray(rows)
    n = len(table)
    return [("first quarter", table[:n // 4]), ("second quarter", table[n // 4:n // 2]),
            ("second half", table[n // 2:])]


def summary(rows):
    """Medians per window of `same_batch`'s rows."""
    out = {"measured commits": len(rows)}
    for name, window in windows(rows):
        curvature, rate, mu, noise_scale, samples = window.T
        out[name] = {"lr": round(float(np.median(rate)), 4),
                     "L": round(float(np.median(curvature)), 2),
                     "q": round(float(np.median(rate * curvature / (2 * (1 + mu)))), 3),
                     "over_optimum": round(float(np.median(
                         rate / (1 - mu) * curvature * (1 + noise_scale / samples))), 2)}
    return out


def main(argv):
    latest = {"trace": None, "noise_scale": None, "samples": None}
    observe_noise = update_state.UpdateState.observe_noise

    def noted_observe_noise(self, signal, trace):
        scaling = self.scaling
        if scaling is not None and scaling.rounds > 0 and scaling.signal > 0:
            latest["trace"] = scaling.trace / scaling.rounds
            latest["noise_scale"] = scaling.trace / scaling.signal
        return observe_noise(self, signal, trace)

    commit = update_state.UpdateState._commit

    def noted_commit(self):
        latest["samples"] = self.pending_samples
        return commit(self)

    rows = []
    if argv[-1:] == ["--same-batch"]:
        same_batch(latest, rows)
        update_state.UpdateState.observe_noise = noted_observe_noise
        update_state.UpdateState._commit = noted_commit
        time_run.main(argv[:-1])
        print(json.dumps(summary(rows)))
        return
    apply = numpy_mlp.MLP.apply

    def measured_apply(self, gradient, rate, momentum):
        last = self.__dict__.setdefault("_secant", {})
        g = gradient.astype(np.float64)
        before = self.params.astype(np.float64)
        apply(self, gradient, rate, momentum)
        step = self.params.astype(np.float64) - before
        if last and latest["trace"] is not None and latest["samples"]:
            noise = latest["trace"] * (1 / latest["samples"] + 1 / last["samples"])
            rows.append((float(np.sum((g - last["g"]) ** 2)), noise,
                         float(np.sum(last["step"] ** 2)), rate, momentum,
                         latest["noise_scale"], latest["samples"]))
        last.update(g=g, samples=latest["samples"], step=step)

    update_state.UpdateState.observe_noise = noted_observe_noise
    update_state.UpdateState._commit = noted_commit
    numpy_mlp.MLP.apply = measured_apply
    time_run.main(argv)
    out = {"commits": len(rows)}
    for name, window in windows(rows):
        dg2, noise, dw2, rate, mu, noise_scale, samples = window.T
        curvature = math.sqrt(max(dg2.sum() - noise.sum(), 0.0) / dw2.sum())
        lr, mu = float(np.median(rate)), float(np.median(mu))
        b, m = float(np.median(noise_scale)), float(np.median(samples))
        out[name] = {"lr": round(lr, 4), "L": round(curvature, 3),
                     "L_uncorrected": round(math.sqrt(dg2.sum() / dw2.sum()), 3),
                     "noise_share": round(float(noise.sum() / dg2.sum()), 3),
                     "q": round(lr * curvature / (2 * (1 + mu)), 3),
                     "over_optimum": round(lr / (1 - mu) * curvature * (1 + b / m), 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
