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

From Python (the demo's short version): `run_matrix` with a few arms (`bench_arms`) and a
short `RunConfig` on a `LocalCluster`, then `table_and_verdict`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import statistics
import sys
import time

from cluster_sim.cli import command_line, event_reference, parse_seeds
from cluster_sim.cli.arm_grid import (FAMILIES, ORDER, BenchArm, baseline_label,  # noqa: F401
                                      bench_arms, check_arms, coarse_arms, grid_edges,
                                      matrix_specs, refined_arms, tuned_arms,
                                      tuning_choices,
                                      oracle_choices, oracle_settings, parse_families,
                                      parse_lr_grid, per_seed, pinned_values, tuned_from)
from cluster_sim.cli.bench_table import arm_row, bench_table, table_and_verdict  # noqa: F401
from cluster_sim.harness.arms import SPEC_HELP, ArmSpec
from cluster_sim.harness.config import Arm, RunConfig, load_data, targets
from ksync.learning_rate import LearningRate

__all__ = ["FAMILIES", "BenchArm", "parse_families", "bench_arms", "oracle_choices",
           "bench_table", "table_and_verdict", "injected_us_per_sample",
           "framework_cost_in_runs", "run_matrix", "add_arguments", "run"]


def injected_us_per_sample(framework_step_s: float, batch_size: int, fastest_speed: float,
                           ratio: float = 4.0, at_least: float = 0.0) -> float:
    """Microseconds per sample at speed 1 so the fastest worker's injected step
    (``batch_size * us / fastest_speed``) is ``ratio`` times the framework cost per
    step, rounded up to 100 us; never below ``at_least``.

    >>> injected_us_per_sample(0.05, 32, 1.0)   # 4 x 50 ms over 32 samples
    6300.0
    """
    us = ratio * framework_step_s * fastest_speed / batch_size * 1e6
    return max(float(at_least), math.ceil(us / 100.0) * 100.0)


def framework_cost_in_runs(results, speeds, batch_size: int, us_per_sample: float):
    """The framework's cost per step inside real runs: the fastest workers' (by
    ``speeds``) mean step time minus their injected compute (``batch_size *
    us_per_sample / speed``), median over runs; None without real step times. Beside
    the probe's cost (measured with no injected delay, every core busy) this is what a
    step costs while the workers mostly sleep, as in the benchmark itself.

    >>> runs = [{"worker_step_times": [0.23, 0.46, 0.21]},
    ...         {"worker_step_times": [0.22, 0.47, None]}]
    >>> round(framework_cost_in_runs(runs, [1.0, 0.5, 1.0], 32, 6000), 4)   # 192 ms injected
    0.028
    """
    fastest = max(speeds)
    injected = batch_size * us_per_sample * 1e-6 / fastest
    per_run = []
    for run in results:
        extra = [t - injected for t, v in zip(run.get("worker_step_times") or (), speeds)
                 if v == fastest and t is not None]
        if extra:
            per_run.append(statistics.median(extra))
    return statistics.median(per_run) if per_run else None


# ---- running the matrix -----------------------------------------------------------------

def _allocation(arm: Arm, config, n):
    """The simulator's batch-allocation arguments of ``arm`` (every
    ``sim_config.allocate_every`` updates, the run's: `cluster_sim.sim.mirror`)."""
    if not arm.allocation:
        return {}
    import predictor
    return dict(batch_allocation=predictor.BatchAllocator(config.batch_size * n, min_batch=4),
                allocation_mode=arm.allocation,
                forecaster=(predictor.GRUSmoothingForecaster.default()
                            if arm.allocation == "forecast" else None))


def simulate_arm(arm: Arm, sim_config, data, run_config) -> dict:
    """One simulated run of ``arm`` (labelled as the harness labels it)."""
    from cluster_sim.sim import Simulation
    started = time.perf_counter()
    sim_config = dataclasses.replace(sim_config.with_step_size(arm.step_size(sim_config)),
                                     lr_scaling=arm.lr_scaling)
    sim = Simulation(arm.make_policy(), sim_config, data,
                     **_allocation(arm, run_config, sim_config.num_workers))
    result = sim.run()
    result["policy"] = arm.label
    result["sim_run_s"] = time.perf_counter() - started
    return result


def run_matrix(arms, scenario, seeds, run_config, *, cluster=None, sim_config=None,
               data=None, progress=None, on_result=None, store=None,
               deadline=None, jobs=1) -> list[dict]:
    """Every arm for each of ``seeds`` (a list, or a count: ``0 .. seeds - 1``),
    interleaved seed by seed: on ``cluster``
    (real, `cluster_sim.harness.run.run_arm`) or, with ``sim_config``, simulated
    (in ``jobs`` processes when above 1). ``progress(label, seed)`` returns a per-run
    progress callback (or None); ``on_result(result)`` is called after each run. Runs
    ``store`` (a `cluster_sim.cli.run_store.RunStore`) already holds are taken from
    it, and each new one is added to it as it ends; no run starts after ``deadline``
    (`time.monotonic`), so the results may be fewer than ``len(arms) * seeds``. The
    results are in matrix order (seed by seed, arms in order) however they ran."""
    data = data if data is not None else load_data(scenario)
    seeds = range(seeds) if isinstance(seeds, int) else seeds
    slots = [(seed, a) for seed in seeds for a in arms]
    done = {}

    def finish(seed, a, r, new=True):
        if new:
            r["family"], r["grid_value"] = a.family, a.value
            step = a.arm.learning_rate  # None: the scenario's (the store's conditions)
            r["learning_rate"] = None if step is None else dataclasses.asdict(step)
            if store is not None:
                store.add(r)
        done[seed, a.arm.label] = r
        if on_result is not None:
            on_result(r)

    todo = []
    for seed, a in slots:
        r = store.get(a.arm.label, seed) if store is not None else None
        if r is not None:
            finish(seed, a, r, new=False)
        else:
            todo.append((seed, a))
    if sim_config is not None and jobs > 1 and len(todo) > 1:
        for (seed, a), r in _simulate_in_processes(todo, sim_config, data, run_config, jobs,
                                                   deadline):
            finish(seed, a, r)
        todo = []
    for seed, a in todo:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if sim_config is not None:
            with _one_blas_thread():
                r = simulate_arm(a.arm, dataclasses.replace(sim_config, seed=seed), data,
                                 run_config)
        else:
            from cluster_sim.harness.run import run_arm
            callback = progress(a.arm.label, seed) if progress else None
            try:
                r = run_arm(cluster, a.arm, scenario, seed=seed, config=run_config,
                            data=data, progress=callback)
                if hasattr(callback, "finish"):
                    callback.finish(r)
            finally:
                if hasattr(callback, "__exit__"):
                    callback.__exit__(None, None, None)
        finish(seed, a, r)
    return [done[seed, a.arm.label] for seed, a in slots if (seed, a.arm.label) in done]


_PROCESS_DATA = None  # the workload, once per simulating process


def _one_blas_thread():
    """One BLAS thread while it is held, as in each process of ``--jobs``: a simulation
    then gives the same bits whatever ``--jobs`` is (BLAS sums its products in another
    order on several threads, and training carries the difference on)."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(1)


def _init_sim_process(data, parent):
    # A simulation process ends with the bench that started it, however that ends (a
    # SIGTERM or SIGKILL to the bench alone would otherwise leave it running).
    from strategies.exec_shim import die_with_parent
    die_with_parent(parent)
    from cluster_sim.cli import prepare_tensorflow
    global _PROCESS_DATA
    _PROCESS_DATA = data
    prepare_tensorflow()  # without its start-up noise, as in the parent
    _one_blas_thread()  # for good in this process: the processes are the parallelism


def _simulate_in_process(arm, sim_config, run_config):
    return simulate_arm(arm, sim_config, _PROCESS_DATA, run_config)


def _simulate_in_processes(todo, sim_config, data, run_config, jobs, deadline=None):
    """``((seed, bench arm), result)`` for each of ``todo`` as its simulation ends, run
    in ``jobs`` fresh (spawned, so no TensorFlow state is inherited) processes; none
    starts after ``deadline`` (`time.monotonic`), the ones under way finish."""
    import concurrent.futures
    import multiprocessing
    pool = concurrent.futures.ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_sim_process, initargs=(data, os.getpid()))
    queue = iter(todo)
    running = {}

    def submit():
        # At most ``jobs`` under way, so a deadline stops the rest from starting.
        item = next(queue, None) if deadline is None or time.monotonic() < deadline else None
        if item is not None:
            seed, a = item
            running[pool.submit(_simulate_in_process, a.arm,
                                dataclasses.replace(sim_config, seed=seed), run_config)] = item

    try:
        for _ in range(jobs):
            submit()
        while running:
            finished, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                key = running.pop(future)
                result = future.result()  # a failed run starts no other
                submit()
                yield key, result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _incomplete(missing, total, store_dir, log) -> str:
    """The table's line saying how many of its runs are still to make ("" for none)."""
    if not missing:
        return ""
    log(f"stopped with {missing} run(s) to go; run the same command to resume")
    return (f"\n\nIncomplete: {missing} of {total} runs not made yet (--stop-after); the "
            f"same command resumes them from {store_dir}.")


def _sim_conditions(scenario, us_per_sample, run_config, costs, config) -> dict:
    """What a simulated run's result depends on besides its arm and seed: those of a
    real run, the simulator's settings, and a digest of the whole scenario (its
    summary shows the speeds at the start only, not a trace's later points)."""
    import hashlib
    # A free PS leaves its settings out: stores made before the PS had costs still open.
    free_ps = (("ps_service_s", "ps_push_s_per_byte", "ps_apply_s", "ps_apply_s_per_byte",
                "num_ps") if config.ps_costs.free else ())
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                if f.name not in ("scenario", "seed") + free_ps}
    return dict(_conditions(scenario, us_per_sample, run_config, costs), simulator=settings,
                scenario_digest=hashlib.sha256(repr(scenario).encode()).hexdigest()[:16])


def _stored_sim_costs(out) -> dict | None:
    """The framework costs of the simulated runs kept under ``out`` (None: none kept)."""
    from cluster_sim.cli.run_store import saved_conditions
    for store_dir in sorted(pathlib.Path(out).glob("*_sim*_runs")):
        try:
            conditions = saved_conditions(store_dir)
        except ValueError:
            continue  # RunStore names the problem when the matrix reaches this store
        if conditions is not None:
            return dict(conditions["costs"])
    return None


def _grid_note(args, values, tune_seeds=()) -> str:
    """The table's line saying where its tuned settings came from ("" for none)."""
    if not values:
        return ""
    seeds = f" on seeds {_seed_text(tune_seeds)}" if tune_seeds else ""
    how = ("tuned in the simulator" + seeds if args.grid_from_sim else
           f"tuned{seeds}, not among the reported seeds" if tune_seeds else
           f"tuned in {args.tuned_from}" if args.tuned_from else "pinned by --arms")
    return f"\n\nSettings {how}: " + ", ".join(
        getattr(spec, "described", spec.text) for spec in values.values())


def _settings(tuned) -> dict:
    """``tuned`` (`ArmSpec`s by rule) as results.json keeps it for `tuned_from`."""
    return {name: {"value": s.value, "lr": s.lr, "momentum": s.momentum,
                   "edges": list(getattr(s, "edges", ()))} for name, s in tuned.items()}


def _seed_text(seeds) -> str:
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ",".join(map(str, seeds))


def _scenario_name(name: str) -> str:
    """``static`` means the benchmark's ``bench/static`` when there is one."""
    from cluster_sim.scenarios import bench_names
    return f"bench/{name}" if f"bench/{name}" in bench_names() else name


def load_bench_scenario(name, args, us_per_sample=None):
    from cluster_sim.scenarios import load_scenario
    overrides = {}
    if us_per_sample is not None:
        overrides["us_per_sample"] = float(us_per_sample)
    if args.max_pushes:
        overrides["max_pushes"] = int(args.max_pushes)
    if args.time_budget:
        overrides["time_budget_s"] = float(args.time_budget)
    return load_scenario(_scenario_name(name), traces_dir=args.traces,
                         machine_usage=args.machine_usage, overrides=overrides)


#: The late target of each workload (issue 46, item 5): near convergence, where the
#: early one (the workload's own, e.g. `cluster_sim.workloads.TEACHER_TARGET`, loss 0.98)
#: sits where the curve still falls steeply. Teacher, measured with the simulator: BSP on
#: ``bench/homogeneous``, 8 workers, costs ``costs_25ms.json``, 10,000 updates (80,000
#: pushes, no target), tuning seeds 100-101. At lr 0.1 (its best to the early target) the
#: trailing loss after 10,000 updates is 0.763 / 0.773, at lr 0.05 0.692 / 0.686 (0.689,
#: the long-run loss of tuned BSP). 80 % of the improvement from the initial loss (2.43 -
#: 2.49) lies above the early target (the curve is front-loaded: 0.98 is already ~85 % of
#: it), so the late target is 80 % of the way from the early target to the long-run loss:
#: 0.98 - 0.8 x (0.98 - 0.689) = 0.747, rounded to 0.75. BSP at lr 0.05 first holds the
#: trailing loss under 0.76 after ~5,450 updates (8x its early-target updates). The
#: runs and the arithmetic: ``cluster_sim/results/race_sim8/late_target.py``.
LATE_TARGETS = {"teacher": 0.75}


def target_loss(text, scenario) -> float | None:
    """``--target``: None for "early" (the workload's own), the workload's late target
    (`LATE_TARGETS`) for "late", or a loss.

    >>> class S: data = "teacher"
    >>> target_loss("early", S), target_loss("late", S), target_loss("0.9", S)
    (None, 0.75, 0.9)
    """
    if text in (None, "early"):
        return None
    if text == "late":
        if scenario.data not in LATE_TARGETS:
            raise ValueError(f"--target late: no late target measured for the "
                             f"{scenario.data!r} workload (LATE_TARGETS); give a loss")
        return LATE_TARGETS[scenario.data]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--target {text!r}: give early, late or a validation loss") from None


def _run_config(scenario, args):
    loss = target_loss(getattr(args, "target", None), scenario)
    extra = {} if loss is None else {"target_loss": loss}
    return RunConfig.from_scenario(scenario, max_updates=args.max_updates, **extra)


def probe_scenario(scenario):
    """``scenario`` as the framework-cost probe runs it: every worker at full speed, no
    injected delay and no events (those placed as fractions of a run too: a probe has
    no reference run to place them in)."""
    return dataclasses.replace(scenario, name="probe", slowdowns=(), events=(),
                               relative_events=(), inject="delay")


def _probe_costs(cluster, scenario, repeats, log):
    """The framework costs on ``cluster`` (`cluster_sim.cli.calibrate.probe`, on the
    scenario's workload and model with every worker at full speed and no injected
    delay)."""
    from cluster_sim.cli.calibrate import probe
    from cluster_sim.harness.run import run_arm
    home = probe_scenario(scenario)
    log(f"probing framework costs on {cluster.num_workers} workers (ASP and BSP, no "
        f"injected delay, {repeats} repeat(s))...")
    return _with_bar(4 * repeats, "probe", lambda bar: probe(
        cluster, run_arm, home, repeats=repeats, us_per_sample=0.0,
        progress=lambda: bar.update(1)))


def _load_costs(path) -> dict:
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        costs = json.loads(path.read_text())["costs"]
    except (OSError, KeyError, json.JSONDecodeError) as err:
        raise ValueError(f"--costs {str(path)!r}: no framework costs there ({err}); give "
                         "the results.json of a real bench run, 'probe' or 'none'") from None
    return costs


def _sim_config(costs, scenario, run_config, data, workers):
    from cluster_sim.sim.mirror import sim_config
    config = sim_config(costs, scenario, run_config, data)
    scale = workers / scenario.num_workers
    return dataclasses.replace(config, num_workers=workers, eval_every=workers,
                               max_pushes=int(run_config.max_pushes * scale),
                               stop_at_target=True)


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


def _tune_in_sim(arms, scenario, run_config, costs, data, seeds, log, jobs=1) -> dict:
    """The best setting (an `ArmSpec`) of each rule with a grid among ``arms``,
    simulated on ``scenario`` with ``costs`` over ``seeds``."""
    config = _sim_config(costs, scenario, run_config, data, scenario.num_workers)
    return _tune(arms, scenario, run_config, seeds, log, "tuned in the simulator",
                 sim_config=config, data=data, jobs=jobs)


def _tune(arms, scenario, run_config, seeds, log, what, staged=False, **matrix) -> dict:
    """Each rule's chosen setting among ``arms`` (`ArmSpec`s by rule) after running
    them over the tuning ``seeds`` (`run_matrix` with ``matrix``). ``staged`` prunes
    the grid: a coarse pass on the first seed (`coarse_arms`: each parameter value at
    the base momentum, learning rates a factor 4 apart), then each rule's refinement
    around its coarse choice (`refined_arms`) on every tuning seed, chosen there."""
    chosen = tuned_arms(arms)
    if not chosen:
        return {}
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)  # as run_matrix
    base = scenario_base(scenario) if staged else None
    if staged:
        coarse = coarse_arms(chosen, base)
        first = run_matrix(coarse, scenario, seeds[:1], run_config, **matrix)
        picked = oracle_choices(first, coarse)
        log(f"{what}, coarse pass on seed {seeds[0]} ({len(coarse)} arms): "
            + ", ".join(picked.values()))
        chosen = refined_arms(chosen, picked, base)
        results = first + run_matrix(chosen, scenario, seeds, run_config, **matrix)
    else:
        results = run_matrix(chosen, scenario, seeds, run_config, **matrix)
    oracle = tuning_choices(results, arms, seeds, base)
    tuned = {name: ArmSpec(name, s["value"], s["lr"], s["momentum"])
             for name, s in oracle_settings(oracle, chosen).items()}
    # The reported matrix runs one setting per rule: say here where a grid was too narrow.
    edges = {name: grid_edges(arms, label) for name, label in oracle.items()}
    tuned = {name: TunedSpec(*dataclasses.astuple(spec), edges=tuple(edges[name]))
             for name, spec in tuned.items()}
    log(f"{what}: " + ", ".join(spec.described for spec in tuned.values()))
    return tuned


def _event_reference(scenario, n, store_dir, conditions, config, run_config, data, lr_grid,
                     tune_seeds, args, log):
    """``(seconds, how)``: the reference of events at fractions of a run
    (`cluster_sim.cli.event_reference`): tuned BSP's median time to target on
    ``scenario`` (without those events) on ``n`` simulated workers, over the tuning seeds
    (100-102 without), its runs kept in ``store_dir``."""
    from cluster_sim.cli.run_store import RunStore
    seeds = list(tune_seeds) or list(event_reference.DEFAULT_SEEDS)
    config = dataclasses.replace(config, scenario=scenario)
    matrix = dict(sim_config=config, data=data, jobs=args.jobs,
                  store=RunStore(store_dir, conditions(scenario, config), fresh=args.fresh))
    specs = [ArmSpec("bsp")]
    tuned = _tune(_arms(specs, n, scenario, lr_grid), scenario, run_config, seeds, log,
                  f"the events' reference: BSP on {n} workers without them",
                  staged=args.tune_stages, **matrix)
    (arm,) = [a for a in _arms(specs, n, scenario, lr_grid, tuned) if not a.linear]
    seconds = event_reference.reference_seconds(
        run_matrix([arm], scenario, seeds, run_config, **matrix), seeds)
    how = (f"{arm.arm.label}'s median time to target without them on {n} simulated "
           f"workers, seeds {', '.join(map(str, seeds))}")
    log(f"{scenario.name}: events' reference {seconds:.1f} s ({how})")
    return seconds, how


def _calibration(real, arms, scenario, run_config, costs, data, jobs=1) -> str:
    """The simulator beside the real runs: the same arms and seeds simulated with the
    probed costs, as `cluster_sim.cli.calibrate.error_table` (real and simulated median
    TTA, their error, and the timing error at the real run's update count). Only the
    (arm, seed) pairs ``real`` holds are compared, so an unfinished matrix is
    calibrated on the runs made so far."""
    from cluster_sim.cli.calibrate import error_table
    made = {(r["policy"], r["seed"]) for r in real}
    config = dataclasses.replace(
        _sim_config(costs, scenario, run_config, data, scenario.num_workers),
        stop_at_target=False)  # on past the target: the time to each real run's version
    simulated = run_matrix([a for a in arms if any(a.arm.label == p for p, _ in made)],
                           scenario, sorted({s for _, s in made}), run_config,
                           sim_config=config, data=data, jobs=jobs)
    simulated = [r for r in simulated if (r["policy"], r["seed"]) in made]
    for run in simulated:  # the harness stops at the target: measure the same stretch
        if run["tta_s"] is not None:
            run["final_accuracy"] = next(c["accuracy"] for c in run["curve"]
                                         if c["wall_s"] >= run["tta_s"])
    return (f"Calibration against {len(made)} real run(s): real and simulated (probed costs) "
            "side by side; 'TTA err' compares the medians, 't@v err' the time to the "
            "update count where each real run reached the target.\n\n```\n" +
            error_table(real, simulated) + "\n```")


def _conditions(scenario, us_per_sample, run_config, costs) -> dict:
    """What a real run's result depends on besides its arm and seed: a `RunStore`
    resumes only runs made under the same."""
    from cluster_sim.report.results import TTA_WINDOW
    return {"scenario": scenario.summary(), "us_per_sample": us_per_sample,
            "tta_window": TTA_WINDOW, "run_config": dataclasses.asdict(run_config),
            "costs": {k: v for k, v in costs.items() if k not in ("raw", "injected")}}


def _estimate_s(runs, scenario, run_config, costs, data, jobs=1) -> float:
    """Seconds the real ``runs`` (bench arms, one entry per run) should take: each arm's
    simulated training time (with the probed costs) plus a fixed start-up per run."""
    arms = list({a.arm.label: a for a in runs}.values())
    config = _sim_config(costs, scenario, run_config, data, scenario.num_workers)
    sims = run_matrix(arms, scenario, 1, run_config, sim_config=config, data=data, jobs=jobs)
    wall = {r["policy"]: r["wall_s"] for r in sims}
    return sum(wall[a.arm.label] + 8.0 for a in runs)


def _write(out, scenario_key, results, arms, scenario, meta, extra, title):
    from cluster_sim.report import write_report
    if not results:  # stopped (--stop-after) before this scenario's first run
        import shutil  # an earlier report there would be read as this matrix's
        shutil.rmtree(out / scenario_key.replace("/", "_"), ignore_errors=True)
        return f"### {title}\n\nNo run made yet.", {}
    text, data = bench_table(results, arms, title=title)
    write_report(out / scenario_key.replace("/", "_"), results, title=title,
                 scenario=scenario, meta=meta, extra={"bench": data}, sections=[text])
    return text, data


def run(args) -> int:
    from cluster_sim.cli import prepare_tensorflow
    log = lambda text: print(text, flush=True)
    try:
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
        scenarios = {n: load_bench_scenario(n, args) for n in names}
        if not args.simulate and args.event_reference is None:
            for scenario in scenarios.values():
                scenario.check_resolved()  # real runs: the reference is the command's
        for scenario in scenarios.values():
            target_loss(args.target, scenario)  # a bad --target before any run
        if args.costs not in ("probe", "none"):
            costs = _load_costs(args.costs)
        elif args.costs == "none":
            costs = {"chunk_overhead_s": 0.0, "step_overhead_s": 0.0, "read_overhead_s": 0.0,
                     "gate_latency_s": 0.0, "framework_step_s": 0.0}
        else:
            costs = None
        tuned = {}  # (scenario, workers): ArmSpecs by rule, from --tuned-from
        for name, scenario in scenarios.items():
            for n in (workers if args.simulate else [scenario.num_workers]):
                tuned[name, n] = (tuned_from(args.tuned_from, name, n, families,
                                             real=not args.simulate)
                                  if args.tuned_from else {})
                check_arms(_arms(specs, n, scenario, lr_grid, tuned[name, n]), n)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"argv": command_line(), "seeds": seeds, "tune_seeds": tune_seeds,
            "arms": [s.text for s in specs], "lr_grid": lr_grid,
            "simulate": bool(args.simulate), "tune_stages": bool(args.tune_stages),
            "target": args.target}
    summary = {"meta": meta, "scenarios": {}}
    sections = []
    prepare_tensorflow()  # also for simulations: a forecaster's GRU imports TensorFlow
    if not args.simulate or costs is None:
        from cluster_sim.netns import isolate_loopback
        isolate_loopback()
    from cluster_sim.cli.run_store import RunStore, saved_conditions
    first = next(iter(scenarios.values()))
    if costs is None and args.simulate:
        kept = None if args.fresh else _stored_sim_costs(out)
        if kept is not None:
            costs = kept  # the costs its runs were made with, as a real matrix resumes
            log(f"resuming the simulated runs in {out} (with their framework costs)")
        else:
            from cluster_sim.local_cluster import LocalCluster
            with LocalCluster(num_workers=first.num_workers, num_ps=first.num_ps) as cluster:
                costs = _probe_costs(cluster, first, args.probe_repeats, log)
    deadline = (time.monotonic() + 60.0 * args.stop_after
                if args.stop_after is not None else None)
    if args.simulate:
        summary["costs"] = costs
        plan = []
        # Every store is opened before the first run: a store made under other settings
        # is refused before hours of the other scenarios, not after.
        for name, scenario in scenarios.items():
            us = _us_per_sample(scenario, costs, args, log)
            scenario = load_bench_scenario(name, args, us)
            run_config = _run_config(scenario, args)
            data = load_data(scenario)
            for n in workers:
                config = _sim_config(costs, scenario, run_config, data, n)
                if args.compute_before_read:
                    # An input-bound step: the parameters are read after the compute.
                    config = dataclasses.replace(config, input_before_read=True)
                if args.num_ps:
                    config = dataclasses.replace(config, num_ps=args.num_ps)
                store_dir = out / f"{name.replace('/', '_')}_sim{n}_runs"
                conditions = lambda s, c: _sim_conditions(s, us, run_config, costs, c)
                try:
                    placed, events = event_reference.resolve(
                        scenario, args.event_reference, lambda bare: _event_reference(
                            bare, n, out / f"{store_dir.name[:-5]}_reference_runs",
                            conditions, config, run_config, data, lr_grid, tune_seeds, args,
                            log))
                    config = dataclasses.replace(config, scenario=placed)
                    store = RunStore(store_dir, conditions(placed, config), fresh=args.fresh)
                except ValueError as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 2
                plan.append((name, n, placed, us, run_config, data, config, store, events))
        for name, n, scenario, us, run_config, data, config, store, events in plan:
            if tune_seeds:
                tuned[name, n] = _tune(
                    _arms(specs, n, scenario, lr_grid), scenario, run_config, tune_seeds,
                    log, f"{name} on {n} workers, tuned on seeds {_seed_text(tune_seeds)}",
                    sim_config=config, data=data, jobs=args.jobs, store=store,
                    deadline=deadline, staged=args.tune_stages)
            arms = _arms(specs, n, scenario, lr_grid, tuned[name, n])
            total = len(arms) * len(seeds)
            held = sum(store.get(a.arm.label, s) is not None for s in seeds for a in arms)
            log(f"simulating {scenario.name} on {n} workers: {len(arms)} arms x "
                f"{len(seeds)} seed(s)"
                + (", compute before the read" if args.compute_before_read else "")
                + (f"; {held} run(s) already in {store.directory}" if held else ""))
            results = _with_bar(total, f"{name} n={n}",
                                lambda bar: run_matrix(
                                    arms, scenario, seeds, run_config,
                                    sim_config=config, data=data, jobs=args.jobs,
                                    on_result=lambda r: bar.update(1), store=store,
                                    deadline=deadline))
            title = f"simulated {scenario.name}, {n} workers"
            text, data_ = _write(out, f"{name}_sim{n}", results, arms, scenario,
                                 meta, {"costs": costs, "us_per_sample": us}, title)
            missing = total - len(results)
            text += _grid_note(args, tuned[name, n], tune_seeds)
            text += f"\n\n{events}" if events else ""
            text += _incomplete(missing, total, store.directory, log)
            sections.append(text)
            summary["scenarios"][f"{name}@{n}"] = dict(
                data_, us_per_sample=us, missing_runs=missing, events=scenario.summary(),
                tuned_settings=_settings(tuned[name, n]))
            log("\n" + text + "\n")
    else:
        from cluster_sim.local_cluster import LocalCluster
        from cluster_sim.harness.progress import TargetBar
        for name, scenario in scenarios.items():
            store_dir = out / f"{name.replace('/', '_')}_runs"
            try:
                before = None if args.fresh else saved_conditions(store_dir)
            except ValueError as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
            with LocalCluster(num_workers=scenario.num_workers,
                              num_ps=scenario.num_ps) as cluster:
                if before is not None and args.costs == "probe":
                    costs = dict(before["costs"])  # the costs its runs were made with
                    log(f"resuming the runs in {store_dir} (with their framework costs)")
                elif costs is None:
                    costs = _probe_costs(cluster, scenario, args.probe_repeats, log)
                summary["costs"] = costs
                us = _us_per_sample(scenario, costs, args, log)
                scenario, events = event_reference.resolve(
                    load_bench_scenario(name, args, us), args.event_reference, None)
                run_config = _run_config(scenario, args)
                data = load_data(scenario)
                try:
                    store = RunStore(store_dir, _conditions(scenario, us, run_config, costs),
                                     fresh=args.fresh)
                except ValueError as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 2
                n = scenario.num_workers
                chosen = (_tune_in_sim(_arms(specs, n, scenario, lr_grid), scenario,
                                       run_config, costs, data, tune_seeds, log, args.jobs)
                          if args.grid_from_sim else tuned[name, n])
                arms = _arms(specs, n, scenario, lr_grid, chosen)
                todo = [a for s in seeds for a in arms if store.get(a.arm.label, s) is None]
                estimate = _estimate_s(todo, scenario, run_config, costs, data, args.jobs)
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
            text, data_ = _write(out, name, results, arms, scenario, meta,
                                 {"costs": costs, "us_per_sample": us,
                                  "tuned_in_sim": {k: s.text for k, s in chosen.items()}},
                                 title)
            # Where speeds move, step time minus the compute at the t=0 speeds would
            # count the slowdowns as framework cost.
            in_runs = scenario.steady() and framework_cost_in_runs(
                results, scenario.speeds_at(0.0), scenario.batch_size, us)
            if in_runs:
                injected = scenario.batch_size * us * 1e-6 / max(scenario.speeds_at(0.0))
                text += (f"\n\nFramework cost per step inside these runs (the fastest "
                         f"workers' step time minus their injected compute, speeds at "
                         f"t=0): {1e3 * in_runs:.1f} ms; the injected "
                         f"{1e3 * injected:.1f} ms is {injected / in_runs:.1f}x that.")
            text += _grid_note(args, chosen, tune_seeds)
            text += f"\n\n{events}" if events else ""
            text += _incomplete(missing, len(arms) * len(seeds), store_dir, log)
            if results and not args.no_calibration:
                calibration = _calibration(results, arms, scenario, run_config, costs, data,
                                           args.jobs)
                text += "\n\n" + calibration
                (out / f"{name.replace('/', '_')}_calibration.txt").write_text(calibration)
            sections.append(text)
            summary["scenarios"][name] = dict(data_, us_per_sample=us,
                                              tuned_settings=_settings(chosen),
                                              tuned_in_sim={k: s.text for k, s in chosen.items()},
                                              missing_runs=missing)
            log("\n" + text + "\n")
    from cluster_sim.report.writer import json_safe
    (out / "results.json").write_text(json.dumps(json_safe(summary), indent=2, default=str))
    (out / "bench.md").write_text("# ksync policy benchmark\n\n" + _costs_text(costs) +
                                  "\n\n" + "\n\n".join(sections) + "\n")
    log(f"results: {out / 'results.json'}, table: {out / 'bench.md'}")
    return 0


def scenario_base(scenario) -> LearningRate:
    """The scenario's step size: the base of every arm's learning rate."""
    return LearningRate(scenario.learning_rate, momentum=scenario.momentum)


def _arms(specs, n, scenario, lr_grid, tuned=None):
    """The matrix's arms on ``n`` workers of ``scenario`` (its learning rate the base)."""
    return bench_arms(specs, n, tuned, lr_grid=lr_grid, batch_size=scenario.batch_size,
                      base=scenario_base(scenario))


def _us_per_sample(scenario, costs, args, log) -> float:
    """The injected compute per sample: ``--us-per-sample``, else calibrated to the
    framework cost (`injected_us_per_sample`); printed with the cost and the ratio."""
    fastest = max(scenario.speeds_at(0.0))
    step = costs.get("framework_step_s") or 0.0
    if args.us_per_sample is not None:
        us = float(args.us_per_sample)
    elif step > 0:
        us = injected_us_per_sample(step, scenario.batch_size, fastest, args.compute_ratio)
    else:
        us = scenario.us_per_sample
    injected = scenario.batch_size * us * 1e-6 / fastest
    ratio = f"{injected / step:.1f}x" if step > 0 else "unmeasured"
    log(f"framework cost per step {1e3 * step:.1f} ms; injected compute of the fastest "
        f"worker's step {1e3 * injected:.1f} ms ({us:g} us/sample); ratio {ratio}")
    costs.setdefault("injected", {})[scenario.name] = {
        "us_per_sample": us, "fastest_step_s": injected,
        "ratio": injected / step if step > 0 else None}
    return us


def _costs_text(costs) -> str:
    step = costs.get("framework_step_s") or 0.0
    lines = [f"Framework cost per step (8 workers, no injected delay): {1e3 * step:.1f} ms."]
    for name, inj in (costs.get("injected") or {}).items():
        ratio = "-" if inj["ratio"] is None else f"{inj['ratio']:.1f}x"
        lines.append(f"{name}: injected {inj['us_per_sample']:g} us/sample, fastest "
                     f"worker's injected step {1e3 * inj['fastest_step_s']:.1f} ms, "
                     f"{ratio} the framework cost.")
    return "\n".join(lines)


def _with_bar(total, desc, body):
    from tqdm import tqdm
    with tqdm(total=total, desc=desc, unit="run", file=sys.stderr) as bar:
        return body(bar)


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
                             "('late': teacher 0.75, ~8x the early target's BSP updates: "
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
                        help="with --tune-seeds and --lr-grid: prune the grid in two "
                             "stages: every parameter value at the base momentum and "
                             "learning rates a factor 4 apart on the first tuning seed, "
                             "then around each rule's choice (its rate and the two a "
                             "factor 2 either side; each other momentum at the same "
                             "effective step) on every tuning seed")
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
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds of training per run at most (default: the scenario's)")
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
