"""The matrix runner of `bench policies`: every arm for every seed, on a real cluster or
in the simulator (in several processes with ``--jobs``), runs already in a run store
taken from it and each new one kept there as it ends, no run started after a deadline.

Example (`cluster_sim.cli.bench_config` makes the settings, `cluster_sim.cli.arm_grid`
the arms):

```python
config = bench_config.sim_config(costs, scenario, run_config, data, 8)
results = run_matrix(bench_arms(["bsp", "asp"], 8), scenario, 3, run_config,
                     sim_config=config, data=data, jobs=2,
                     store=RunStore("runs/x/static_sim8_runs", conditions))
```
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from cluster_sim.harness.config import Arm, load_data

__all__ = ["simulate_arm", "run_matrix", "with_bar"]


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


# ---- the process pool of --jobs ----------------------------------------------------------

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


def with_bar(total, desc, body):
    """``body(bar)`` under a progress bar of ``total`` runs on stderr."""
    from tqdm import tqdm
    with tqdm(total=total, desc=desc, unit="run", file=sys.stderr) as bar:
        return body(bar)
