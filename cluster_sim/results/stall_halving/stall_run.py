"""One simulated run of the benchmark with `ksync.Adaptive`'s loss-stall halving changed:
an experiment of issue 47 (README.md), not product code. It patches
`Adaptive.step_factor` and `Adaptive.floor` in this process.

    PYTHONPATH=. python cluster_sim/results/stall_halving/stall_run.py \
        static 8 adaptive@0.08 100 --variant A

Arguments as `../simspeed/time_run.py` (scenario, workers, arm spec, seed), then:

- ``--variant off``: the product as it is (the factor halves at a stall only when no
  larger update is left); ``A``: every stall halves the factor (once per new best, not
  below `ksync.policies.adaptive.MIN_STALL_FACTOR`), the floor still moving to larger
  updates; ``G``: as A, the stall window doubling after each such halving (so that late
  in training, where the loss falls slowly, halvings come ever more rarely); ``T``: a
  trial: every stall halves the factor, kept if the smoothed loss makes a new best
  (falls by the stall margin below its stalled best) within one stall window, else
  doubled back, and not tried again until a new best.
- ``--costs``: the cost file (default the 8-worker race's ``costs_25ms.json``);
  ``--target early|late``.

Prints the run (as time_run.py) and a line with the variant, the halvings made, the
factor at the end, and under T the trials kept and reverted.
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "simspeed"))
import time_run  # noqa: E402

from ksync.policies import adaptive  # noqa: E402


def trial_step_factor(step_factor, stats):
    """Variant T's `Adaptive.step_factor`, over the product's (its rise and non-finite
    backoffs kept, its own stall halving off)."""
    def patched(self, observation, context, largest):
        factor, why = step_factor(self, observation, context, False)
        memory = context.memory
        if why or not (self.loss_step and context.lr_scaling):
            memory.pop("trial", None)
            return factor, why
        trial = memory.get("trial")
        if trial is not None:
            if memory["best"] < trial["best"]:
                del memory["trial"]
                stats["kept"] += 1
            elif observation.version - trial["version"] >= self.stall_updates:
                del memory["trial"]
                memory["declined"] = trial["best"]
                stats["reverted"] += 1
                return factor * 2.0, "a trial halving did not help: reverted"
            return factor, ""
        if (memory.get("floor_version") == observation.version
                and factor * adaptive.STALL_DECAY >= adaptive.MIN_STALL_FACTOR
                and memory["best"] < memory.get("declined", float("inf"))):
            memory["trial"] = {"best": memory["best"], "version": int(observation.version)}
            stats["halvings"] += 1
            return factor * adaptive.STALL_DECAY, "the loss stalled: a trial halving"
        return factor, ""
    return patched


#: updates of each of the probe's four windows (variant P).
PROBE_WINDOW = 100


def probe_step_factor(step_factor, stats, settle=0.0):
    """Variant P's `Adaptive.step_factor`: at a stall (once per new best), four windows of
    `PROBE_WINDOW` updates at half the factor, the factor, the factor, half (ABBA: a
    loss falling at a steady rate gives both halves the same mean); the factor whose
    windows' mean loss is lower is kept. The product's rise and non-finite backoffs end
    a probe at the factor it started from. ``settle``: the fraction of each window
    whose losses are left out (the level moving to the new step's); variant P2 leaves
    out the first half."""
    def patched(self, observation, context, largest):
        memory = context.memory
        probe = memory.get("probe")
        if probe is not None:  # the rule's factor is the window's, not the probe's base
            context = _with_factor(context, probe["base"])
        factor, why = step_factor(self, observation, context, False)
        if why or not (self.loss_step and context.lr_scaling):
            memory.pop("probe", None)
            return factor, why
        loss = observation.loss
        if probe is not None:
            phase = min(3, (observation.version - probe["start"]) // PROBE_WINDOW)
            into = observation.version - probe["start"] - phase * PROBE_WINDOW
            if (loss is not None and loss != probe.get("last")
                    and into >= settle * PROBE_WINDOW):
                probe["levels"][phase].append(float(loss))
                probe["last"] = loss
            if observation.version - probe["start"] < 4 * PROBE_WINDOW:
                return probe["base"] * (0.5 if phase in (0, 3) else 1.0), ""
            del memory["probe"]
            means = [sum(v) / len(v) if v else float("nan") for v in probe["levels"]]
            half, full = (means[0] + means[3]) / 2, (means[1] + means[2]) / 2
            memory["probed"] = memory["best"]
            if half < full:
                stats["kept"] += 1
                return probe["base"] * 0.5, f"probe: half the step {half:.4g} < {full:.4g}"
            stats["reverted"] += 1
            return probe["base"], f"probe: the step {full:.4g} <= half {half:.4g}"
        if (memory.get("floor_version") == observation.version
                and factor * adaptive.STALL_DECAY >= adaptive.MIN_STALL_FACTOR
                and memory["best"] < memory.get("probed", float("inf"))):
            memory["probe"] = {"base": factor, "start": int(observation.version),
                               "levels": [[], [], [], []]}
            stats["halvings"] += 1
            return factor * 0.5, "the loss stalled: probing half the step"
        return factor, ""
    return patched


def _with_factor(context, factor):
    import dataclasses
    return dataclasses.replace(context, rule=dataclasses.replace(context.rule,
                                                                 lr_factor=factor))


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("run", nargs=4)
    parser.add_argument("--variant", default="off", choices=("off", "A", "G", "T", "P", "P2"))
    parser.add_argument("--costs", default="cluster_sim/scenarios/bench/costs_25ms.json")
    parser.add_argument("--target", default="early", choices=("early", "late"))
    args = parser.parse_args(argv)
    time_run.COSTS = args.costs
    stats = {"halvings": 0, "factor": None, "kept": 0, "reverted": 0}
    step_factor, floor = adaptive.Adaptive.step_factor, adaptive.Adaptive.floor
    trial = {"T": trial_step_factor, "P": probe_step_factor,
             "P2": lambda *a: probe_step_factor(*a, settle=0.5)}.get(
                 args.variant, lambda *a: None)(step_factor, stats)

    def patched_step_factor(self, observation, context, largest):
        if args.variant in ("T", "P", "P2"):
            factor, why = trial(self, observation, context, largest)
        else:
            factor, why = step_factor(self, observation, context,
                                      largest if args.variant == "off" else True)
            if "stalled" in why:
                context.memory["halvings"] = context.memory.get("halvings", 0) + 1
                stats["halvings"] += 1
        stats["factor"] = factor
        return factor, why

    def patched_floor(self, observation, context, samples):
        base = self.__dict__.setdefault("_base_stall", self.stall_updates)
        if args.variant == "G" and base is not None:
            self.stall_updates = base * 2 ** context.memory.get("halvings", 0)
        return floor(self, observation, context, samples)

    adaptive.Adaptive.step_factor = patched_step_factor
    adaptive.Adaptive.floor = patched_floor
    time_run.main(args.run, target=args.target)
    print(json.dumps({"variant": args.variant, **stats}))


if __name__ == "__main__":
    main(sys.argv[1:])
