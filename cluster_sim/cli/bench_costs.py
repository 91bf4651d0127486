"""The framework costs of `bench policies`: where they come from (``--costs``: probed on
the real cluster, none, an earlier results.json, or the run store being resumed), the
injected compute they set (``--compute-ratio``), and what they predict beside real runs
(the calibration section, the time estimate).

Example:

>>> injected_us_per_sample(0.025, 32, 1.0)   # the fastest step 4 x a 25 ms cost
3200.0
>>> costs_from_option("none")["framework_step_s"]
0.0
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import statistics

from cluster_sim.cli import bench_config
from cluster_sim.cli.bench_matrix import run_matrix, with_bar

__all__ = ["NO_COSTS", "costs_from_option", "injected_us_per_sample",
           "framework_cost_in_runs", "probe_scenario", "probe_costs", "load_costs",
           "stored_sim_costs", "us_per_sample", "costs_text", "calibration", "estimate_s"]

#: ``--costs none``: a framework that costs nothing (the simulator only).
NO_COSTS = {"chunk_overhead_s": 0.0, "step_overhead_s": 0.0, "read_overhead_s": 0.0,
            "gate_latency_s": 0.0, "framework_step_s": 0.0}


def costs_from_option(text: str) -> dict | None:
    """``--costs``: a copy of `NO_COSTS` for "none", None for "probe" (measured once a
    cluster runs, or taken from the store being resumed), else those of a results.json
    (`load_costs`)."""
    if text == "none":
        return dict(NO_COSTS)
    if text == "probe":
        return None
    return load_costs(text)


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


def probe_scenario(scenario):
    """``scenario`` as the framework-cost probe runs it: every worker at full speed, no
    injected delay and no events (those placed as fractions of a run too: a probe has
    no reference run to place them in)."""
    return dataclasses.replace(scenario, name="probe", slowdowns=(), events=(),
                               relative_events=(), inject="delay")


def probe_costs(cluster, scenario, repeats, log):
    """The framework costs on ``cluster`` (`cluster_sim.cli.calibrate.probe`, on the
    scenario's workload and model with every worker at full speed and no injected
    delay)."""
    from cluster_sim.cli.calibrate import probe
    from cluster_sim.harness.run import run_arm
    home = probe_scenario(scenario)
    log(f"probing framework costs on {cluster.num_workers} workers (ASP and BSP, no "
        f"injected delay, {repeats} repeat(s))...")
    return with_bar(4 * repeats, "probe", lambda bar: probe(
        cluster, run_arm, home, repeats=repeats, us_per_sample=0.0,
        progress=lambda: bar.update(1)))


def load_costs(path) -> dict:
    """The framework costs kept in a bench's results.json (or its directory);
    ValueError names the file and the options."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        costs = json.loads(path.read_text())["costs"]
    except (OSError, KeyError, json.JSONDecodeError) as err:
        raise ValueError(f"--costs {str(path)!r}: no framework costs there ({err}); give "
                         "the results.json of a real bench run, 'probe' or 'none'") from None
    return costs


def stored_sim_costs(out) -> dict | None:
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


def us_per_sample(scenario, costs, args, log) -> float:
    """The injected compute per sample: ``--us-per-sample``, else calibrated to the
    framework cost (`injected_us_per_sample`); printed with the cost and the ratio,
    and kept in ``costs["injected"]``."""
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


def costs_text(costs) -> str:
    """bench.md's first lines: the framework cost and each scenario's injected compute."""
    step = costs.get("framework_step_s") or 0.0
    lines = [f"Framework cost per step (8 workers, no injected delay): {1e3 * step:.1f} ms."]
    for name, inj in (costs.get("injected") or {}).items():
        ratio = "-" if inj["ratio"] is None else f"{inj['ratio']:.1f}x"
        lines.append(f"{name}: injected {inj['us_per_sample']:g} us/sample, fastest "
                     f"worker's injected step {1e3 * inj['fastest_step_s']:.1f} ms, "
                     f"{ratio} the framework cost.")
    return "\n".join(lines)


def calibration(real, arms, scenario, run_config, costs, data, jobs=1) -> str:
    """The simulator beside the real runs: the same arms and seeds simulated with the
    probed costs, as `cluster_sim.cli.calibrate.error_table` (real and simulated median
    TTA, their error, and the timing error at the real run's update count). Only the
    (arm, seed) pairs ``real`` holds are compared, so an unfinished matrix is
    calibrated on the runs made so far."""
    from cluster_sim.cli.calibrate import error_table
    made = {(r["policy"], r["seed"]) for r in real}
    config = dataclasses.replace(
        bench_config.sim_config(costs, scenario, run_config, data, scenario.num_workers),
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


def estimate_s(runs, scenario, run_config, costs, data, jobs=1) -> float:
    """Seconds the real ``runs`` (bench arms, one entry per run) should take: each arm's
    simulated training time (with the probed costs) plus a fixed start-up per run."""
    arms = list({a.arm.label: a for a in runs}.values())
    config = bench_config.sim_config(costs, scenario, run_config, data, scenario.num_workers)
    sims = run_matrix(arms, scenario, 1, run_config, sim_config=config, data=data, jobs=jobs)
    wall = {r["policy"]: r["wall_s"] for r in sims}
    return sum(wall[a.arm.label] + 8.0 for a in runs)
