"""Choosing each rule's setting for `bench policies` by running its grid: on tuning seeds
that are then not reported (``--tune-seeds``, pruned in stages with
``--tune-stages``), in the simulator for real runs (``--grid-from-sim``), and tuned
BSP's time to target as the reference of events placed at fractions of a run
(`cluster_sim.cli.event_reference`).

Example:

>>> spec = TunedSpec("bsp", lr=0.1, edges=("lr highest",))
>>> spec.described, tuned_settings({"bsp": spec})["bsp"]["lr"]
("bsp@0.1 (at the grid's edge: lr highest)", 0.1)
"""

from __future__ import annotations

import dataclasses

from cluster_sim.cli import bench_config, event_reference
from cluster_sim.cli.arm_grid import (best_settings, coarse_arms, grid_edges, oracle_settings,
                                      refined_arms, scenario_arms, scenario_base, tuned_arms,
                                      tuning_choices)
from cluster_sim.cli.bench_matrix import run_matrix
from cluster_sim.harness.arms import ArmSpec

__all__ = ["TunedSpec", "tune", "tune_in_sim", "tuned_settings", "events_reference"]


@dataclasses.dataclass(frozen=True)
class TunedSpec(ArmSpec):
    """A rule's chosen setting and where it sat in its grid (`grid_edges`): a choice at
    an edge may not be the best, the grid should be wider."""

    edges: tuple = ()

    @property
    def described(self) -> str:
        """``bsp@0.1 (at the grid's edge: lr highest)``."""
        return self.text + (f" (at the grid's edge: {', '.join(self.edges)})"
                            if self.edges else "")


def tuned_settings(tuned) -> dict:
    """``tuned`` (`ArmSpec`s by rule) as results.json keeps it for `tuned_from`."""
    return {name: {"value": s.value, "lr": s.lr, "momentum": s.momentum,
                   "edges": list(getattr(s, "edges", ()))} for name, s in tuned.items()}


def tune_in_sim(arms, scenario, run_config, costs, data, seeds, log, jobs=1) -> dict:
    """The best setting (an `ArmSpec`) of each rule with a grid among ``arms``,
    simulated on ``scenario`` with ``costs`` over ``seeds``."""
    config = bench_config.sim_config(costs, scenario, run_config, data, scenario.num_workers)
    return tune(arms, scenario, run_config, seeds, log, "tuned in the simulator",
                scenario.num_workers, sim_config=config, data=data, jobs=jobs)


def tune(arms, scenario, run_config, seeds, log, what, num_workers, staged=False,
         **matrix) -> dict:
    """Each rule's chosen setting among ``arms`` (`ArmSpec`s by rule) after running
    them over the tuning ``seeds`` (`run_matrix` with ``matrix``) on ``num_workers``
    workers. ``staged`` prunes the grid: a coarse pass on the first seed (`coarse_arms`:
    each parameter value at the base momentum, learning rates a factor 4 apart), then
    each rule's refinement around its coarse choice (`refined_arms`) on every tuning
    seed, then steps past the grid's edge where a choice sits at one
    (`past_edge_arms`), chosen there."""
    chosen = tuned_arms(arms)
    if not chosen:
        return {}
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)  # as run_matrix
    run = lambda some, on=seeds: run_matrix(some, scenario, on, run_config, **matrix)
    base = scenario_base(scenario) if staged else None
    if staged:
        coarse = coarse_arms(chosen, base)
        first = run(coarse, seeds[:1])
        picked = best_settings(first, coarse)
        log(f"{what}, coarse pass on seed {seeds[0]} ({len(coarse)} arms): "
            + ", ".join(picked.values()))
        chosen = refined_arms(chosen, picked, base)
        results = first + run(chosen)
    else:
        results = run(chosen)

    def past_edges(new):
        log(f"{what}, past the grid's edge: " + ", ".join(a.arm.label for a in new))
        return run(new)

    oracle, pool = tuning_choices(results, arms, seeds, base, num_workers, run=past_edges)
    tuned = {name: ArmSpec(name, s["value"], s["lr"], s["momentum"])
             for name, s in oracle_settings(oracle, pool).items()}
    # The reported matrix runs one setting per rule: say here where a grid was too narrow.
    edges = {name: grid_edges(pool, label) for name, label in oracle.items()}
    tuned = {name: TunedSpec(*dataclasses.astuple(spec), edges=tuple(edges[name]))
             for name, spec in tuned.items()}
    log(f"{what}: " + ", ".join(spec.described for spec in tuned.values()))
    return tuned


def events_reference(scenario, n, store_dir, conditions, config, run_config, data, lr_grid,
                     tune_seeds, args, log):
    """``(seconds, how)``: the reference run of events at fractions of a run and of a
    time budget in multiples of it (`cluster_sim.cli.event_reference`): tuned BSP's
    median time to target on ``scenario`` (without those events) on ``n`` simulated
    workers, over the tuning seeds (100-102 without), its runs kept in ``store_dir``
    under ``conditions(scenario, config)``."""
    from cluster_sim.cli.run_store import RunStore
    seeds = list(tune_seeds) or list(event_reference.DEFAULT_SEEDS)
    config = dataclasses.replace(config, scenario=scenario)
    matrix = dict(sim_config=config, data=data, jobs=args.jobs,
                  store=RunStore(store_dir, conditions(scenario, config), fresh=args.fresh))
    specs = [ArmSpec("bsp")]
    tuned = tune(scenario_arms(specs, n, scenario, lr_grid), scenario, run_config, seeds, log,
                 f"the reference run: BSP on {n} workers without fraction events", n,
                 staged=args.tune_stages, **matrix)
    (arm,) = [a for a in scenario_arms(specs, n, scenario, lr_grid, tuned) if not a.linear]
    seconds = event_reference.reference_seconds(
        run_matrix([arm], scenario, seeds, run_config, **matrix), seeds)
    how = (f"{arm.arm.label}'s median time to target without fraction events on {n} "
           f"simulated workers, seeds {', '.join(map(str, seeds))}")
    log(f"{scenario.name}: reference run {seconds:.1f} s ({how})")
    return seconds, how
