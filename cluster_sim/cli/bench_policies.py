"""``python -m cluster_sim bench policies``: every rule, each fixed one tuned, on the benchmark.

The matrix of issue 18: on the real 8-worker local cluster (one `LocalCluster` per
scenario, arms interleaved seed by seed so load from elsewhere hits all of them alike),
or with ``--simulate`` on the discrete-event simulator at 8, 64 and 256 workers, the
same workload (``data`` of the scenario: ``teacher``) and the same scenarios
(``cluster_sim/scenarios/bench/``).

Arms (``--arms``, comma-separated arm specs ``NAME[=VALUE][@LR[/MOMENTUM]]``
(`cluster_sim.harness.arms`), default all): the fixed rules with a grid of
their parameter, ``ssp`` (s), ``ksync`` and ``kasync`` (k), ``backup`` (b), ``rennala``
(B), ``ringmaster`` (R), the two-stage schedules ``syncswitch`` and ``ashl`` (the update
they switch at), plus ``bsp`` and ``asp``, and the rules that set themselves:
``adasync``, ``chao``, ``lb-bsp``, ``nbsgd``, ``adaptive`` (ksync's goodput rule) and
``adaptive+alloc``. Per scenario the best grid value of each fixed rule is its
"oracle-tuned" row: what a user who hand-tunes gets, flagged when it sits at an edge of
its grid. ``--lr-grid`` adds the learning rate (and, for the rules that apply every
gradient, momentum) to every grid but Adaptive's, and each rule's linear-scaling arm
(`cluster_sim.cli.arm_grid`); ``--tune-seeds`` chooses each rule's setting on seeds that
are then not reported (from 100 on) and runs only the chosen ones on ``--seeds``
(the fair race of issue 46). ``--grid-from-sim``
tunes each grid in the simulator on the same scenario (with the framework costs measured
here) and runs only the tuned value for real; ``--tuned-from DIR`` takes each rule's
tuned value from an earlier matrix (its ``--out``) of the same scenarios and worker
counts, so a screen of every grid over a few seeds can be followed by the tuned values
over many; a rule run at one value (those, or ``--arms kasync=4``) counts as tuned at
it (`bench standing` compares against it).

Step times like an accelerator's: first the framework cost per step is measured on this
machine (the probe of `cluster_sim.cli.calibrate`: 8 workers, no injected delay, ASP and
BSP runs of two lengths), then the injected compute per sample is set so the fastest
worker's injected step is at least ``--compute-ratio`` (4) times that cost; both and
the ratio are printed and saved. The same costs are the simulator's overheads.

Real runs are followed by the same arms and seeds in the simulator with the probed
costs, side by side (`cluster_sim.cli.calibrate.error_table`): the calibration of the
simulator against this benchmark.

Writes ``OUT/results.json`` (costs, injected compute, every scenario's table rows and the
oracle choices), ``OUT/bench.md`` (one table per scenario: median time to target with a
range over seeds (a 90 % interval from 5 seeds), the ratio to BSP paired by seed with its
own,
final loss and accuracy, updates, dropped gradients; BSP's coefficient of variation),
and per scenario (and worker count) a report directory with every run, curves and plots
(`cluster_sim.report.write_report`). Each finished run is kept as it ends
(``OUT/SCENARIO_runs``, simulated ``OUT/SCENARIO_simN_runs``; `cluster_sim.cli.run_store`):
a matrix stopped by ``--stop-after``, Ctrl-C or the end of a session resumes with the
same command, and ``--fresh`` starts it over.

Example:

```
python -m cluster_sim bench policies --scenario static,trace --seeds 3 --out runs/bench
python -m cluster_sim bench policies --scenario static --arms bsp,asp,ksync --grid-from-sim
python -m cluster_sim bench policies --simulate --workers 8,64,256 --seeds 10 \\
    --costs runs/bench/results.json --out runs/bench_sim
python -m cluster_sim bench policies --simulate --seeds 10 --tuned-from runs/bench_sim \\
    --costs runs/bench/results.json --out runs/bench_sim_tuned
# The race: every rule at its own best learning rate, chosen on seeds 100-102
python -m cluster_sim bench policies --simulate --workers 8 --scenario static --arms all \\
    --lr-grid auto --tune-seeds 3 --seeds 10 --costs cluster_sim/scenarios/bench/costs_25ms.json \\
    --out runs/race_sim8
```

From Python (the demo's short version): `cluster_sim.cli.bench_matrix.run_matrix` with a
few arms (`cluster_sim.cli.arm_grid.bench_arms`) and a short `RunConfig` on a
`LocalCluster`, then `cluster_sim.cli.bench_table.table_and_verdict`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

from cluster_sim.cli import (bench_config, bench_costs, bench_tables, command_line,
                             event_reference, parse_seeds, seeds_text)
from cluster_sim.cli.arm_grid import (ORDER, check_arms, matrix_specs, parse_families,
                                      parse_lr_grid, scenario_arms, tuned_from)
from cluster_sim.cli.bench_matrix import run_matrix, with_bar
from cluster_sim.cli.bench_table import grid_note, incomplete_note, write_scenario
from cluster_sim.cli.bench_tuning import tune, tune_in_sim, tuned_settings
from cluster_sim.harness.arms import SPEC_HELP
from cluster_sim.harness.config import load_data, targets

__all__ = ["add_arguments", "run"]

# This module reads the command line and wires the command's rooms, one job each (the
# module docstring is the command's --help): `arm_grid` (arms, grids, the oracle
# choice), `bench_config` (scenario, target, run and simulator settings, a store's
# conditions), `bench_costs` (framework costs: probe, load, resume; the injected compute;
# the calibration beside real runs), `bench_matrix` (the matrix runner: process pool,
# run store, resume, deadline), `bench_tuning` (choosing settings by running grids; the
# events' reference), `bench_table` (a scenario's table and report).


@dataclasses.dataclass(frozen=True)
class _Plan:
    """The command's settings, all checked before anything runs."""

    specs: list  # the arms' `ArmSpec`s (`matrix_specs`)
    lr_grid: object  # `parse_lr_grid`'s
    seeds: list  # reported
    tune_seeds: list  # chosen on, never reported
    scenarios: dict  # name -> scenario as loaded (no injected compute yet)
    workers: list  # simulated worker counts
    costs: dict | None  # None: probe them (or take the resumed store's)
    tuned: dict  # (scenario name, workers) -> `ArmSpec`s by rule: --tuned-from, or tuned


class _Refused(Exception):
    """A run store (or the events' reference) refuses the command: exit 2, saying why."""


def _plan(args) -> _Plan:
    """The command's settings from ``args``; ValueError (or FileNotFoundError) names
    the first problem, before any cluster starts or run is made."""
    specs = matrix_specs(args.arms)
    families = parse_families(args.arms)
    lr_grid = parse_lr_grid(args.lr_grid)
    seeds = parse_seeds(args.seeds, "--seeds")
    # Tuning seeds count from 100: a choice made on reported seeds flatters it.
    tune_text = args.tune_seeds or (str(args.sim_seeds) if args.grid_from_sim else None)
    tune_seeds = parse_seeds(tune_text, "--tune-seeds", start=100) if tune_text else []
    if set(tune_seeds) & set(seeds):
        raise ValueError(f"--tune-seeds and --seeds share seeds "
                         f"{sorted(set(tune_seeds) & set(seeds))}: a choice made on "
                         "reported seeds flatters it; e.g. --tune-seeds 100-102 --seeds 0-9")
    if tune_seeds and args.tuned_from:
        raise ValueError("--tune-seeds and --tuned-from both choose the settings; give one")
    if tune_seeds and not (args.simulate or args.grid_from_sim):
        raise ValueError("real runs tune in the simulator: add --grid-from-sim (it runs "
                         "the grids on --tune-seeds), or --simulate")
    names = [s.strip() for s in args.scenario.split(",") if s.strip()]
    workers = [int(w) for w in str(args.workers).split(",") if w.strip()]
    if not names or not workers or min(workers) < 1:
        raise ValueError("need --scenario and --workers >= 1")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.tuned_from and args.grid_from_sim:
        raise ValueError("--tuned-from and --grid-from-sim both choose the grid values; "
                         "give one")
    if args.num_ps is not None and (args.num_ps < 1 or not args.simulate):
        raise ValueError(f"--num-ps {args.num_ps}: give a count >= 1, with --simulate "
                         "(a real cluster's PS tasks are the scenario's ps)")
    if args.compute_before_read and not args.simulate:
        raise ValueError("--compute-before-read changes the simulator only (the real "
                         "harness's step reads the parameters as it starts); add "
                         "--simulate")
    _, budget_factor = event_reference.parse_budget(args.time_budget)
    if budget_factor is not None and not args.simulate and args.event_reference is None:
        raise ValueError(f"--time-budget {args.time_budget}: real runs measure no reference "
                         "run; give --event-reference SECONDS too, or the budget in seconds")
    scenarios = {n: bench_config.load_bench_scenario(n, args) for n in names}
    if not args.simulate and args.event_reference is None:
        for scenario in scenarios.values():
            scenario.check_resolved()  # real runs: the reference is the command's
    for scenario in scenarios.values():
        bench_config.target_loss(args.target, scenario)  # a bad --target before any run
    costs = bench_costs.costs_from_option(args.costs)
    tuned = {}
    for name, scenario in scenarios.items():
        for n in (workers if args.simulate else [scenario.num_workers]):
            tuned[name, n] = (_tuned_from(args.tuned_from, name, n, families,
                                          real=not args.simulate)
                              if args.tuned_from else {})
            check_arms(scenario_arms(specs, n, scenario, lr_grid, tuned[name, n]), n)
    return _Plan(specs, lr_grid, seeds, tune_seeds, scenarios, workers, costs, tuned)


def _tuned_from(directory, name, n, families, real) -> dict:
    """``--tuned-from``: an earlier matrix's ``--out`` directory (`tuned_from`), or a
    compact store of `bench tables` (``cluster_sim/results/race_sim8``: the settings its
    tables report, `bench_tables.store_tuned`)."""
    directory = pathlib.Path(directory)
    if _is_store(directory):
        return bench_tables.store_tuned(directory, name, n, families)
    return tuned_from(directory, name, n, families, real=real)


def _is_store(directory: pathlib.Path) -> bool:
    """A compact store of `bench tables` (meta.json), not a bench's ``--out`` directory
    (results.json)."""
    return (directory / "meta.json").exists() and not (directory / "results.json").exists()


def _source_reference(directory, name, n):
    """``--tuned-from``'s reference run of ``name`` on ``n`` workers, ``(seconds, how)``
    (`bench_tables.store_reference`), or None where it places no events. ValueError
    for a runs directory: measured again here, at the scenario's rate, it would place
    the events elsewhere than the runs the settings were tuned on."""
    directory = pathlib.Path(directory)
    if _is_store(directory):
        return bench_tables.store_reference(directory, name, n)
    if (directory / f"{bench_tables.store_key(name, n)}_reference_runs").exists():
        raise ValueError(f"--tuned-from {str(directory)!r} placed {name}'s events by its own "
                         "reference run: give --event-reference SECONDS (its table says "
                         "\"Events at fractions of a reference run of S s\"), or --tuned-from "
                         "its compact store (bench tables --from-runs)")
    return None


def run(args) -> int:
    from cluster_sim.cli import prepare_tensorflow
    log = lambda text: print(text, flush=True)
    try:
        plan = _plan(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"argv": command_line(), "seeds": plan.seeds, "tune_seeds": plan.tune_seeds,
            "arms": [s.text for s in plan.specs], "asked": args.arms, "lr_grid": plan.lr_grid,
            "simulate": bool(args.simulate), "tune_stages": bool(args.tune_stages),
            "target": args.target}
    summary = {"meta": meta, "scenarios": {}}
    prepare_tensorflow()  # also for simulations: a forecaster's GRU imports TensorFlow
    if not args.simulate or plan.costs is None:
        from cluster_sim.netns import isolate_loopback
        isolate_loopback()
    try:
        sections = (_run_simulated if args.simulate else _run_real)(args, plan, out, meta,
                                                                    summary, log)
    except _Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from cluster_sim.report.writer import json_safe
    (out / "results.json").write_text(json.dumps(json_safe(summary), indent=2, default=str))
    (out / "bench.md").write_text("# ksync policy benchmark\n\n" +
                                  bench_costs.costs_text(summary["costs"]) +
                                  "\n\n" + "\n\n".join(sections) + "\n")
    log(f"results: {out / 'results.json'}, table: {out / 'bench.md'}")
    return 0


def _deadline(args):
    """When no run may start any more (`time.monotonic`; None: never), from now."""
    return (time.monotonic() + 60.0 * args.stop_after
            if args.stop_after is not None else None)


# ---- simulated: every scenario on every worker count --------------------------------------

@dataclasses.dataclass(frozen=True)
class _Cell:
    """One scenario on one simulated worker count, its store open."""

    name: str
    n: int
    scenario: object  # its events placed (`cluster_sim.cli.event_reference`)
    us: float
    run_config: object
    data: object
    config: object  # the `SimConfig`
    store: object  # the `RunStore`
    events: str  # where the events were placed, and the time budget ("" for neither)


def _run_simulated(args, plan, out, meta, summary, log) -> list[str]:
    """Every scenario on every worker count in the simulator; the sections of bench.md."""
    costs = plan.costs
    if costs is None:
        kept = None if args.fresh else bench_costs.stored_sim_costs(out)
        if kept is not None:
            costs = kept  # the costs its runs were made with, as a real matrix resumes
            log(f"resuming the simulated runs in {out} (with their framework costs)")
        else:
            from cluster_sim.local_cluster import LocalCluster
            first = next(iter(plan.scenarios.values()))
            with LocalCluster(num_workers=first.num_workers, num_ps=first.num_ps) as cluster:
                costs = bench_costs.probe_costs(cluster, first, args.probe_repeats, log)
    deadline = _deadline(args)
    summary["costs"] = costs
    cells = _open_sim_stores(args, plan, costs, out, log)
    return [_simulated_section(args, plan, cell, costs, out, meta, summary, deadline, log)
            for cell in cells]


def _open_sim_stores(args, plan, costs, out, log) -> list[_Cell]:
    """Every (scenario, workers) cell with its store open, before the first run: a
    store made under other settings is refused before hours of the other scenarios,
    not after (`_Refused`)."""
    from cluster_sim.cli.bench_tuning import events_reference
    from cluster_sim.cli.run_store import RunStore
    cells = []
    for name, scenario in plan.scenarios.items():
        us = bench_costs.us_per_sample(scenario, costs, args, log)
        scenario = bench_config.load_bench_scenario(name, args, us)
        run_config = bench_config.run_config(scenario, args)
        data = load_data(scenario)
        for n in plan.workers:
            config = bench_config.sim_config(costs, scenario, run_config, data, n)
            if args.compute_before_read:
                # An input-bound step: the parameters are read after the compute.
                config = dataclasses.replace(config, input_before_read=True)
            if args.num_ps:
                config = dataclasses.replace(config, num_ps=args.num_ps)
            store_dir = out / f"{bench_tables.store_key(name, n)}_runs"
            conditions = lambda s, c: bench_config.sim_conditions(
                s, us, run_config, costs, c, bench_config.allocates(plan.specs))
            measured = {}

            def reference(bare):
                # Events and the budget share one reference: measured once per cell
                # (both calls below come before the loop moves on); --tuned-from a
                # store: the store's own, so its cluster is the one raced there.
                if not measured:
                    measured["it"] = (_source_reference(args.tuned_from, name, n)
                                      if args.tuned_from else None) or events_reference(
                        bare, n, out / f"{store_dir.name[:-5]}_reference_runs", conditions,
                        config, run_config, data, plan.lr_grid, plan.tune_seeds, args, log)
                return measured["it"]

            try:
                placed, events = event_reference.resolve(scenario, args.event_reference,
                                                         reference)
                seconds, budget = event_reference.budget(args.time_budget, scenario,
                                                         args.event_reference, reference)
                config = dataclasses.replace(config, scenario=placed)
                if seconds is not None:
                    config = dataclasses.replace(config, max_time_s=seconds)
                events = " ".join(filter(None, (events, budget)))
                store = RunStore(store_dir, conditions(placed, config), fresh=args.fresh)
            except ValueError as err:
                raise _Refused(err) from None
            cells.append(_Cell(name, n, placed, us, run_config, data, config, store, events))
    return cells


def _simulated_section(args, plan, cell, costs, out, meta, summary, deadline, log) -> str:
    """One cell's matrix (tuned first on the tuning seeds), its table and report."""
    name, n, scenario, store = cell.name, cell.n, cell.scenario, cell.store
    if plan.tune_seeds:
        plan.tuned[name, n] = tune(
            scenario_arms(plan.specs, n, scenario, plan.lr_grid), scenario, cell.run_config,
            plan.tune_seeds, log,
            f"{name} on {n} workers, tuned on seeds {seeds_text(plan.tune_seeds)}", n,
            sim_config=cell.config, data=cell.data, jobs=args.jobs, store=store,
            deadline=deadline, staged=args.tune_stages)
    arms = scenario_arms(plan.specs, n, scenario, plan.lr_grid, plan.tuned[name, n])
    seeds = plan.seeds
    total = len(arms) * len(seeds)
    held = sum(store.get(a.arm.label, s) is not None for s in seeds for a in arms)
    log(f"simulating {scenario.name} on {n} workers: {len(arms)} arms x "
        f"{len(seeds)} seed(s)"
        + (", compute before the read" if args.compute_before_read else "")
        + (f"; {held} run(s) already in {store.directory}" if held else ""))
    results = with_bar(total, f"{name} n={n}",
                       lambda bar: run_matrix(
                           arms, scenario, seeds, cell.run_config,
                           sim_config=cell.config, data=cell.data, jobs=args.jobs,
                           on_result=lambda r: bar.update(1), store=store,
                           deadline=deadline))
    title = f"simulated {scenario.name}, {n} workers"
    text, data_ = write_scenario(out, f"{name}_sim{n}", results, arms, scenario, meta, title)
    missing = total - len(results)
    text += grid_note(args, plan.tuned[name, n], plan.tune_seeds)
    text += f"\n\n{cell.events}" if cell.events else ""
    text += incomplete_note(missing, total, store.directory, log)
    summary["scenarios"][f"{name}@{n}"] = dict(
        data_, us_per_sample=cell.us, missing_runs=missing, events=scenario.summary(),
        time_budget_s=cell.config.max_time_s,
        tuned_settings=tuned_settings(plan.tuned[name, n]))
    log("\n" + text + "\n")
    return text


# ---- real: every scenario on its own local cluster ----------------------------------------

def _run_real(args, plan, out, meta, summary, log) -> list[str]:
    """Every scenario on a real local cluster of its own; the sections of bench.md."""
    deadline = _deadline(args)
    costs, sections = plan.costs, []
    for name, scenario in plan.scenarios.items():
        text, costs = _real_section(args, plan, name, scenario, costs, out, meta, summary,
                                    deadline, log)
        sections.append(text)
    return sections


def resumed_costs(saved: dict) -> dict:
    """The framework costs a probed real matrix's runs were made with (from its store's
    saved conditions): a resumed matrix keeps them instead of probing again."""
    return dict(saved["costs"])


def real_conditions(args, name, costs, specs, log):
    """A real matrix's scenario (its events placed), events note, injected compute per
    sample, run config and the conditions its run store is keyed on.

    Example:

    ```python
    scenario, events, us, run_config, conditions = real_conditions(
        args, "static", costs, matrix_specs("bsp,adaptive"), print)
    ```
    """
    us = bench_costs.us_per_sample(bench_config.load_bench_scenario(name, args), costs,
                                   args, log)
    scenario, events = event_reference.resolve(
        bench_config.load_bench_scenario(name, args, us), args.event_reference, None)
    run_config = bench_config.run_config(scenario, args)
    return scenario, events, us, run_config, bench_config.conditions(
        scenario, us, run_config, costs, bench_config.allocates(specs))


def _real_section(args, plan, name, scenario, costs, out, meta, summary, deadline, log):
    """One scenario's matrix on a local cluster (its costs probed there unless known or
    resumed, its fixed rules tuned in the simulator with --grid-from-sim), its table
    with the simulator's calibration beside it; returns the section and the costs."""
    from cluster_sim.cli.run_store import RunStore, saved_conditions
    from cluster_sim.harness.progress import TargetBar
    from cluster_sim.local_cluster import LocalCluster
    store_dir = out / f"{name.replace('/', '_')}_runs"
    try:
        before = None if args.fresh else saved_conditions(store_dir)
    except ValueError as err:
        raise _Refused(err) from None
    with LocalCluster(num_workers=scenario.num_workers, num_ps=scenario.num_ps) as cluster:
        if before is not None and args.costs == "probe":
            costs = resumed_costs(before)
            log(f"resuming the runs in {store_dir} (with their framework costs)")
        elif costs is None:
            costs = bench_costs.probe_costs(cluster, scenario, args.probe_repeats, log)
        summary["costs"] = costs
        scenario, events, us, run_config, conditions = real_conditions(
            args, name, costs, plan.specs, log)
        data = load_data(scenario)
        try:
            store = RunStore(store_dir, conditions, fresh=args.fresh)
        except ValueError as err:
            raise _Refused(err) from None
        n = scenario.num_workers
        chosen = (tune_in_sim(scenario_arms(plan.specs, n, scenario, plan.lr_grid), scenario,
                              run_config, costs, data, plan.tune_seeds, log, args.jobs)
                  if args.grid_from_sim else plan.tuned[name, n])
        arms = scenario_arms(plan.specs, n, scenario, plan.lr_grid, chosen)
        seeds = plan.seeds
        todo = [a for s in seeds for a in arms if store.get(a.arm.label, s) is None]
        estimate = bench_costs.estimate_s(todo, scenario, run_config, costs, data, args.jobs)
        log(f"{scenario.summary()}\n{len(arms)} arms x {len(seeds)} seed(s), "
            f"{len(arms) * len(seeds) - len(todo)} run(s) already in {store_dir}; "
            f"the other {len(todo)} estimated {estimate / 60:.0f} min (simulated "
            "with the probed costs)")
        results = run_matrix(
            arms, scenario, seeds, run_config, cluster=cluster, data=data,
            progress=lambda label, seed: TargetBar(f"{label:>18} s{seed}", run_config,
                                                   targets(run_config, data)["target_loss"]),
            store=store, deadline=deadline)
        import gc
        gc.collect()  # free the strategies' functions while the servers answer
    missing = len(arms) * len(seeds) - len(results)
    title = f"{scenario.name}, real, {scenario.num_workers} workers"
    text, data_ = write_scenario(out, name, results, arms, scenario, meta, title)
    # Where speeds move, step time minus the compute at the t=0 speeds would
    # count the slowdowns as framework cost.
    in_runs = scenario.steady() and bench_costs.framework_cost_in_runs(
        results, scenario.speeds_at(0.0), scenario.batch_size, us)
    if in_runs:
        injected = scenario.batch_size * us * 1e-6 / max(scenario.speeds_at(0.0))
        text += (f"\n\nFramework cost per step inside these runs (the fastest "
                 f"workers' step time minus their injected compute, speeds at "
                 f"t=0): {1e3 * in_runs:.1f} ms; the injected "
                 f"{1e3 * injected:.1f} ms is {injected / in_runs:.1f}x that.")
    text += grid_note(args, chosen, plan.tune_seeds)
    text += f"\n\n{events}" if events else ""
    text += incomplete_note(missing, len(arms) * len(seeds), store_dir, log)
    if results and not args.no_calibration:
        calibration = bench_costs.calibration(results, arms, scenario, run_config, costs,
                                              data, args.jobs)
        text += "\n\n" + calibration
        (out / f"{name.replace('/', '_')}_calibration.txt").write_text(calibration)
    summary["scenarios"][name] = dict(data_, us_per_sample=us,
                                      tuned_settings=tuned_settings(chosen),
                                      tuned_in_sim={k: s.text for k, s in chosen.items()},
                                      missing_runs=missing)
    log("\n" + text + "\n")
    return text, costs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="static,trace",
                        help="comma-separated scenarios (bench/NAME when it exists: "
                             "homogeneous, static, slow3x, trace, colocated, "
                             "colocated_usage, pause, churn) or TOML files")
    parser.add_argument("--arms", default="all",
                        help=f"comma-separated arms or 'all': {', '.join(ORDER)}; "
                             f"{SPEC_HELP}. A rule with a parameter given none runs its "
                             "grid (ssp, ksync, kasync, backup, rennala, ringmaster, "
                             "syncswitch, ashl); BSP always runs (every ratio is to it)")
    parser.add_argument("--lr-grid", default=None, metavar="auto|LR,LR,...",
                        help="also tune each rule's learning rate (all but Adaptive, which "
                             "gets the scenario's): 'auto' (a factor-2 grid from the "
                             "scenario's rate / 8 to twice its linear scaling) or the "
                             "rates; momentum 0.9, 0.5 and 0 for the rules that apply every "
                             "gradient; and each rule's linear-scaling arm (NAME@linear). "
                             "The table flags a choice at an edge of its grid")
    parser.add_argument("--target", default="early", metavar="early|late|LOSS",
                        help="the validation loss that ends a run: the workload's own "
                             "('early', default), its late target near convergence "
                             "('late': teacher 0.75, ~8x the early target's BSP updates, "
                             "ctr 0.465: "
                             "raise --max-pushes) or a loss. A run to a lower target also "
                             "holds the time to every higher one (`bench tables`)")
    parser.add_argument("--seeds", default="3",
                        help="reported seeds: a count (3: seeds 0-2, the default), a range "
                             "(0-9) or a list (0,5,7)")
    parser.add_argument("--tune-seeds", default=None, metavar="SEEDS",
                        help="choose each rule's setting (grid value, learning rate, "
                             "momentum) on these seeds (a count from 100 on: 3 is 100-102; "
                             "a range; a list), then run only the "
                             "chosen ones on --seeds, which must not share any; with "
                             "--grid-from-sim the simulator's tuning seeds")
    parser.add_argument("--tune-stages", action="store_true",
                        help="with --tune-seeds and --lr-grid: prune the grid in "
                             "stages: every parameter value at the base momentum and "
                             "learning rates a factor 4 apart on the first tuning seed; "
                             "then around each rule's choice (its rate and the two a "
                             "factor 2 either side; each other momentum at the same "
                             "effective step) on every tuning seed; then, where a choice "
                             "sits at an edge of its grid, up to 3 steps past it")
    parser.add_argument("--jobs", type=int, default=1,
                        help="simulations in this many processes at once (--simulate, the "
                             "--grid-from-sim tuning and the calibration; default 1). Not "
                             "while real runs are under way: they need the cores quiet")
    parser.add_argument("--simulate", action="store_true",
                        help="run the matrix in the simulator instead of the real cluster")
    parser.add_argument("--workers", default="8",
                        help="with --simulate: comma-separated worker counts (e.g. 8,64,256)")
    parser.add_argument("--grid-from-sim", action="store_true",
                        help="tune each fixed rule's grid in the simulator on the same "
                             "scenario, then run only the tuned value for real")
    parser.add_argument("--tuned-from", default=None, metavar="DIR",
                        help="run each fixed rule only at the grid value an earlier "
                             "matrix (its --out DIR, e.g. a 3-seed screen of every grid) "
                             "found best on the same scenario and worker count")
    parser.add_argument("--sim-seeds", type=int, default=3,
                        help="without --tune-seeds: --grid-from-sim tunes on this many "
                             "seeds from 100 on, none of them reported (default 3)")
    parser.add_argument("--costs", default="probe",
                        help="framework costs: 'probe' (measure on the real cluster, "
                             "default), 'none' (zero; simulator only) or a results.json "
                             "of an earlier bench run")
    parser.add_argument("--num-ps", type=int, default=None,
                        help="simulated PS tasks sharing the variables (default: the "
                             "scenario's ps); matters with PS costs, e.g. --costs "
                             "cluster_sim/scenarios/bench/costs_ps.json")
    parser.add_argument("--probe-repeats", type=int, default=2,
                        help="repeats of each probe run (default 2)")
    parser.add_argument("--compute-ratio", type=float, default=4.0,
                        help="injected compute of the fastest worker's step over the "
                             "framework cost per step (default 4)")
    parser.add_argument("--compute-before-read", action="store_true",
                        help="with --simulate: the injected compute runs before the step "
                             "reads the parameters (an input-bound step), so only the "
                             "framework's cost after the read makes a gradient stale "
                             "(default: after the read, as in the real harness and on an "
                             "accelerator: a gradient is as stale as the whole step)")
    parser.add_argument("--us-per-sample", type=float, default=None,
                        help="injected microseconds per sample at speed 1 (default: "
                             "calibrated with --compute-ratio)")
    parser.add_argument("--max-pushes", type=int, default=None,
                        help="pushes per run at most (default: the scenario's)")
    parser.add_argument("--max-updates", type=int, default=None,
                        help="updates per run at most (default: no limit)")
    parser.add_argument("--time-budget", default=None, metavar="SECONDS|FACTORx",
                        help="seconds of training per run at most (default: the scenario's "
                             "for real runs, none simulated), or a multiple of the reference "
                             "run (e.g. 5x: five times tuned BSP's time to target on the "
                             "tuning seeds, measured as for --event-reference, which gives "
                             "it instead); a run stopped by it never reached the target")
    parser.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                        help="start no run after this many minutes; finished runs are kept "
                             "in OUT/SCENARIO_runs (simulated: OUT/SCENARIO_simN_runs) and "
                             "the same command resumes the matrix (also after Ctrl-C)")
    parser.add_argument("--fresh", action="store_true",
                        help="discard the runs an earlier command left in OUT (e.g. after "
                             "changing the simulator: a stored run is taken as it is)")
    parser.add_argument("--no-calibration", action="store_true",
                        help="real runs: skip simulating the same arms beside them")
    parser.add_argument("--event-reference", type=float, default=None, metavar="SECONDS",
                        help="the reference run's seconds of scenarios placing events at "
                             "fractions of a run (at_fraction; every scenario and worker "
                             "count of the command). Real runs need it; --simulate measures "
                             "it otherwise: tuned BSP's time to the target without those "
                             "events, on the tuning seeds (cluster_sim.cli.event_reference)")
    parser.add_argument("--traces", default=None, help="trace directory for trace scenarios")
    parser.add_argument("--machine-usage", default=None,
                        help="machine-usage CSV (or directory) for colocated_usage")
    parser.add_argument("--out", default="runs/bench_policies", help="output directory")
