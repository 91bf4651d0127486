"""One simulated run of the benchmark with a DoG step (Ivgi, Hinder and Carmon, ICML 2023)
in place of the rate the PS applies: an experiment of issue 47 (README.md), not product
code. It patches the simulator's SGD step and `ksync.state.UpdateState` in this process.

    PYTHONPATH=. python cluster_sim/results/dog_step/dog_run.py static 64 adaptive@0.08 100 --variant dog

Arguments as `../simspeed/time_run.py` (scenario, workers, arm spec, seed), then:

- ``--variant off``: the rate as the product applies it (DoG computed alongside, not used);
  ``dog``: DoG's rate at every commit; ``fresh``: DoG's where the commit's gain is above 1
  (fresh samples of more than one worker's batch), else the product's; ``stale``: DoG's
  over ``(1 + s)**2``, ``s`` the commit's mean staleness; ``weighted``: DoG with each
  commit's squared gradient norm weighted by ``(1 + s)**2``.
- ``--scale``: a multiple of DoG's step (default 1).
- ``--costs``: the cost file (default the 64-worker race's ``costs_ps.json``; the 8-worker
  race used ``costs_25ms.json``).

DoG's step is the effective one: the largest distance from the initial parameters over the
root of the summed squared norms of the updates' gradients, applied as the Keras rate
``(1 - momentum)`` times it; its first step is the rate the product would apply there (the
user's base rate times the commit's gain). Prints the run (as time_run.py) and a line of
quantiles (10/50/90 %) over the commits: the product's rate, DoG's, the one used, the gain
and the staleness.
"""

import argparse
import json
import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "simspeed"))
import time_run  # noqa: E402

from cluster_sim import numpy_mlp  # noqa: E402
from ksync import state as update_state  # noqa: E402


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("run", nargs=4)
    parser.add_argument("--variant", default="dog",
                        choices=("off", "dog", "fresh", "stale", "weighted"))
    parser.add_argument("--costs", default="cluster_sim/scenarios/bench/costs_ps.json")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="a multiple of DoG's step (its distance grows with it)")
    args = parser.parse_args(argv)
    time_run.COSTS = args.costs
    commit = {"gain": 1.0, "staleness": []}
    rates = []

    learning_rate = update_state.UpdateState.learning_rate

    def noted_learning_rate(self, base_lr, result=None):
        commit["gain"] = self.last_gain if result is None else result.gain
        return learning_rate(self, base_lr, result)

    push = update_state.UpdateState.push

    def noted_push(self, *a, **k):
        result = push(self, *a, **k)
        if result.accepted:
            commit["staleness"].append(max(int(result.staleness), 0))
        return result

    apply = numpy_mlp.MLP.apply

    def dog_apply(self, gradient, rate, momentum):
        g2 = float(gradient.astype(np.float64) @ gradient)
        s = float(np.mean(commit["staleness"])) if commit["staleness"] else 0.0
        commit["staleness"].clear()
        if args.variant == "weighted":
            g2 *= (1 + s) ** 2
        dog = self.__dict__.setdefault("_dog", {
            "x0": self.params.copy(), "g2": 0.0,
            "rbar": rate * math.sqrt(g2) / (1 - momentum)})  # first step: the product's
        dog["g2"] += g2
        dog["rbar"] = max(dog["rbar"], float(np.linalg.norm(self.params - dog["x0"])))
        step = args.scale * dog["rbar"] / math.sqrt(dog["g2"]) * (1 - momentum)
        used = {"off": rate, "dog": step, "weighted": step,
                "fresh": step if commit["gain"] > 1 else rate,
                "stale": step / (1 + s) ** 2}[args.variant]
        rates.append((rate, step, used, commit["gain"], s))
        apply(self, gradient, used, momentum)

    update_state.UpdateState.learning_rate = noted_learning_rate
    update_state.UpdateState.push = noted_push
    numpy_mlp.MLP.apply = dog_apply
    time_run.main(args.run)
    q = np.quantile(np.asarray(rates), [0.1, 0.5, 0.9], axis=0).round(4).T.tolist()
    variant = args.variant + (f" x{args.scale:g}" if args.scale != 1 else "")
    print(json.dumps({"variant": variant, "commits": len(rates),
                      **dict(zip(("product_rate", "dog_rate", "used", "gain", "staleness"), q))}))


if __name__ == "__main__":
    main(sys.argv[1:])
