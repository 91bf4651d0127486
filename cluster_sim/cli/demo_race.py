"""What the demo's first run compares, read from the fair race's committed store.

The default demo compares what a user would choose between on its scenario: BSP and ASP
each at the learning rate (and momentum) the fair race tuned for that scenario on seeds
it does not report, and Adaptive at the scenario's base rate. Those settings, the target
they were tuned for and the race's own verdict on its reported seeds all come from the
compact store ``cluster_sim/results/race_demo`` (`cluster_sim.cli.bench_tables`), the
store that generates ``docs/benchmarks/race_demo.md``; nothing is copied by hand.

Example:

>>> race = load_demo_race()
>>> [spec.name for spec in race.specs], race.target_loss > 1.0
(['bsp', 'asp', 'adaptive'], True)
>>> load_demo_race(RESULTS / "no_such_store")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
cluster_sim.cli.demo_race.DemoRaceError: the demo's tuned learning rates: .../no_such_store/meta.json: no such file; regenerate the store with:
...
"""

from __future__ import annotations

import dataclasses
import pathlib

from cluster_sim.cli.bench_tables import RESULTS, read_store, store_arms, tuned_specs
from cluster_sim.harness.arms import ArmSpec

__all__ = ["STORE", "STORE_KEY", "PAGE", "REGENERATE", "DemoRace", "DemoRaceError",
           "load_demo_race"]

#: The committed store of the demo scenario's fair race, and its entry.
STORE = RESULTS / "race_demo"
STORE_KEY = "demo_sim4"
#: The page its tables are generated into.
PAGE = "docs/benchmarks/race_demo.md"
#: The commands that make the store again (cluster_sim/results/race_demo/README.md).
REGENERATE = (
    "python -m cluster_sim bench policies --simulate --workers 4 --scenario demo "
    "--arms bsp,asp,adaptive --lr-grid 0.0025,0.005,0.01,0.02,0.04,0.08,0.16,0.32 "
    "--tune-seeds 100-101 --seeds 0-9 --target 1.5 --us-per-sample 1500 "
    "--costs cluster_sim/scenarios/bench/costs_25ms.json --out runs/race_demo --jobs 2\n"
    f"python -m cluster_sim bench tables cluster_sim/results/race_demo "
    f"--from-runs runs/race_demo > {PAGE}")


class DemoRaceError(ValueError):
    """The store is missing or is not what the demo needs; the message names the file
    and the commands that regenerate it."""


@dataclasses.dataclass(frozen=True)
class DemoRace:
    """The demo's arms (BSP and ASP at their tuned settings, Adaptive at the base rate),
    the target loss they were tuned for, and the race's verdict on its reported seeds
    (simulated), to print beside the demo's own."""

    specs: tuple
    target_loss: float
    verdict: str
    reported_seeds: tuple
    tune_seeds: tuple


def _fail(problem: str) -> DemoRaceError:
    return DemoRaceError(f"the demo's tuned learning rates: {problem}; regenerate the "
                         f"store with:\n{REGENERATE}\n(or run the longer comparison, which needs "
                         "no store: --full)")


def load_demo_race(store: pathlib.Path | str = STORE) -> DemoRace:
    """The demo's `DemoRace` from the compact ``store``; `DemoRaceError` (naming the
    file and the commands that regenerate it) when it is missing or malformed."""
    store = pathlib.Path(store)
    try:
        meta, rows = read_store(store)
    except ValueError as err:
        raise _fail(str(err)) from None
    entry = meta["stores"].get(STORE_KEY)
    if entry is None or STORE_KEY not in rows:
        raise _fail(f"{store / 'meta.json'} has no {STORE_KEY!r} entry (it has "
                    f"{', '.join(meta['stores']) or 'none'})")
    try:
        tuned = tuned_specs(meta, STORE_KEY, rows[STORE_KEY])
        target = float(entry["own"])
    except (KeyError, ValueError, TypeError) as err:
        raise _fail(f"{store / (STORE_KEY + '.jsonl')}: {type(err).__name__}: {err}") from None
    missing = [f for f in ("bsp", "asp") if f not in tuned]
    if missing:
        raise _fail(f"{store / (STORE_KEY + '.jsonl')} holds no tuning runs of "
                    f"{', '.join(missing)}")
    tune = tuple(meta.get("tune_seeds") or ())
    reported = tuple(sorted({r["seed"] for r in rows[STORE_KEY]} - set(tune)))
    specs = (tuned["bsp"], tuned["asp"], ArmSpec("adaptive"))
    return DemoRace(specs, target, _race_verdict(meta, rows[STORE_KEY], specs, entry,
                                                 reported),
                    reported, tune)


def _race_verdict(meta, rows, specs, entry, reported) -> str:
    """The report's verdict (`cluster_sim.report.verdict`) on the race's reported runs
    of the demo's arms: the same sentence the demo prints under its own table."""
    from cluster_sim.report import verdict
    from cluster_sim.report.results import median_tta
    arms = store_arms(meta, STORE_KEY)
    summaries = []
    for spec in specs:
        label = next((a.arm.label for a in arms if a.spec == spec), None)
        runs = [{"seed": r["seed"], "tta_s": r["tta"].get(entry["own"])}
                for r in rows if r["policy"] == label and r["seed"] in reported]
        if runs:
            summaries.append({"policy": label, "per_seed": runs,
                              "tta_s": median_tta([r["tta_s"] for r in runs])})
    if not summaries:
        raise _fail("no reported run of the demo's arms in the store")
    return verdict(summaries)
