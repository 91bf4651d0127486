"""`python -m cluster_sim calibrate`: the simulator beside the real harness, per policy.

1. Probe: on a real `LocalCluster` (1 PS, 4 workers) run the harness on the
   `homogeneous` scenario under ASP and under BSP for runs of two lengths, each
   ``--probe-repeats`` times, and read the strategy's measured iteration time. From these
   come the simulator's framework costs (`SimConfig` fields): the fixed cost of a run of
   the harness's ``fit`` (its start, the tracing of the step and the final drain:
   ``chunk_overhead_s``, which the simulator spends once, as ``start_overhead_s``), the
   per-step cost before the parameters are read (``read_overhead_s``) and after
   (``step_overhead_s``), and the extra delay of a worker released by the k-sync gate
   (``gate_latency_s``). `probe` is also the framework-cost probe of ``python -m
   cluster_sim bench policies``.
2. Real: `cluster_sim.harness.run.run_arm` for each arm (``--arms``, as ``simulate``
   reads them: ``NAME[=VALUE][@LR[/MOMENTUM]]``) and seed on each scenario (default: the
   built-in `static` and `trace` scenarios, 4 workers).
3. Simulated: the same scenarios (`cluster_sim.sim.speeds.ScenarioSpeeds`: the same
   speeds over time), policies and training config, evaluated as the harness evaluates,
   with the probed costs; then the error table per scenario: medians over seeds on both sides, and
   the timing error alone (``t@v``: simulated over real time to the update count at which
   the real run reached the target, paired by seed). Both sides' runs are also written as
   reports (``OUT/<scenario>/real`` and ``OUT/<scenario>/simulated``), as the demo's.

The probe runs homogeneous speeds and the comparison heterogeneous ones, so the table
checks the simulator on runs it was not fitted to.

``--ps-probe COSTS.json`` measures the parameter server instead (`probe_ps`: real pushes
of several sizes through the product's PS state on a local cluster, `cluster_sim.harness.ps_probe`)
and writes the simulator's PS and network constants (`cluster_sim.sim.ps.fit_ps_costs`)
with the framework costs of ``--base-costs`` into a costs file that ``bench policies
--costs`` reads (`ps_costs_json`), with every measurement and a note of how they were made.

Example:

```
python -m cluster_sim calibrate --traces ../shared/traces/alibaba_pai --out runs/calibration
python -m cluster_sim calibrate --reuse runs/calibration   # simulate again only
python -m cluster_sim calibrate --ps-probe cluster_sim/scenarios/bench/costs_ps.json
```
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

from cluster_sim.cli import command_line, prepare_tensorflow
from cluster_sim.cli.simulate import CHOICES, run_policies
from cluster_sim.harness.arms import SPEC_HELP, parse_arm_specs
from cluster_sim.sim.mirror import sim_config
from cluster_sim.report import (format_cell, median_of, median_tta, text_table, version_to_wall,
                                write_report)
from cluster_sim.scenarios import load_scenario
from ksync.learning_rate import LearningRate

PROBE_WORKERS = 4  # the real cluster of the probe and the comparison
PROBE_EPOCHS = (20, 100)  # pushes of the two probe runs, per 4 workers



def probe_pushes(num_workers: int) -> tuple:
    """Pushes of the short and the long probe run on ``num_workers`` workers (the same
    steps per worker as `PROBE_EPOCHS` on 4).

    >>> probe_pushes(4), probe_pushes(8)
    ((20, 100), (40, 200))
    """
    return tuple(p * num_workers // PROBE_WORKERS for p in PROBE_EPOCHS)


def probe(cluster, run_arm, scenario, repeats: int = 3, us_per_sample=None,
          progress=None) -> dict:
    """Framework costs of the real strategy on ``cluster`` (seconds; see module doc),
    measured with ``run_arm`` on the homogeneous ``scenario`` (with ``us_per_sample``
    instead of its own when given: 0 measures the framework alone). Each of ASP and BSP
    runs ``repeats`` times at each length (`probe_pushes`), interleaved, with no target;
    the costs come from the median run time at each length, so one disturbed run does not
    set them. ``progress()`` is called after each run."""
    from cluster_sim.harness.run import Arm, RunConfig
    us = scenario.us_per_sample if us_per_sample is None else us_per_sample
    lengths = probe_pushes(cluster.num_workers)
    raw = {name: {"epoch_s": {p: [] for p in lengths}, "iteration_time_s": [],
                  "step_time_s": []} for name in ("asp", "bsp")}
    for _ in range(repeats):
        for name in ("asp", "bsp"):
            for pushes in lengths:
                config = RunConfig.from_scenario(
                    scenario, target_accuracy=2.0, target_loss=-1.0,  # never reached
                    time_budget_s=1e9, max_pushes=pushes, us_per_sample=us)
                r = run_arm(cluster, Arm(name, name), scenario, config=config)
                raw[name]["epoch_s"][pushes].append(r["wall_s"])
                raw[name]["iteration_time_s"] += [x for x in r["worker_compute_times"] if x]
                if pushes == max(lengths):  # the short run's steps include the tracing
                    raw[name]["step_time_s"] += [x for x in r["worker_step_times"] if x]
                if progress is not None:
                    progress()
    return costs_from_probe(raw, cluster.num_workers,
                            _injected_s(scenario.batch_size, us))


def _injected_s(batch_size, us_per_sample) -> float:
    """The injected delay of one full-speed step."""
    return batch_size * us_per_sample * 1e-6


def costs_from_probe(raw: dict, num_workers: int, input_s: float) -> dict:
    """`SimConfig` framework costs from probe measurements: ``raw[policy]["epoch_s"]``
    maps pushes per epoch to the epoch times measured, ``raw[policy]["iteration_time_s"]``
    lists workers' measured compute times; ``input_s`` is the injected delay per step.
    ``framework_step_s`` is a worker's step under ASP without the injected delay: the
    framework's cost per step.

    >>> raw = {"asp": {"epoch_s": {20: [0.3], 100: [1.1]}, "iteration_time_s": [0.02]},
    ...        "bsp": {"epoch_s": {20: [0.5], 100: [1.7]}, "iteration_time_s": [0.02]}}
    >>> {k: round(v, 4) for k, v in costs_from_probe(raw, 4, 0.01).items() if k != "raw"}
    {'chunk_overhead_s': 0.15, 'step_overhead_s': 0.01, 'read_overhead_s': 0.02, 'gate_latency_s': 0.02, 'framework_step_s': 0.03}

    With the workers' step times of the long ASP runs (``raw["asp"]["step_time_s"]``) the
    framework's cost is measured, not differenced (here the long run was the quicker):

    >>> raw["asp"].update(epoch_s={20: [0.5], 100: [0.4]}, step_time_s=[0.05])
    >>> round(costs_from_probe(raw, 4, 0.01)["framework_step_s"], 4)
    0.04
    """
    derived = {}
    for name in ("asp", "bsp"):
        epoch = {p: statistics.median(t) for p, t in raw[name]["epoch_s"].items()}
        short, long = sorted(epoch)
        per_push = (epoch[long] - epoch[short]) / (long - short)
        derived[name] = {"per_push_s": per_push,
                         "epoch_overhead_s": max(0.0, epoch[short] - short * per_push),
                         "iteration_time_s": statistics.median(raw[name]["iteration_time_s"])}
    asp, bsp = derived["asp"], derived["bsp"]
    step = num_workers * asp["per_push_s"]     # one worker's step under ASP (all in parallel)
    measured = raw["asp"].get("step_time_s") or []
    if measured and step <= input_s:
        # The difference of two runs' times is the noisier estimate: the fixed start of a
        # run (~10 s on 8 workers) can swing more than the long run's extra pushes take,
        # and a negative difference would make the framework free.
        step = statistics.median(measured)
    # The measured iteration time starts at the version read, before the injected sleep:
    # only what follows the sleep comes after the parameters are read.
    after_read = max(0.0, min(asp["iteration_time_s"] - input_s, step - input_s))
    round_s = num_workers * bsp["per_push_s"]  # one BSP round: a step plus the gate
    return {
        "chunk_overhead_s": (asp["epoch_overhead_s"] + bsp["epoch_overhead_s"]) / 2,
        "step_overhead_s": after_read,
        "read_overhead_s": max(0.0, step - input_s - after_read),
        "gate_latency_s": max(0.0, round_s - step),
        # What a worker's step costs beside the injected delay: measured directly when the
        # probe recorded step times (the long ASP runs), else from the epochs' difference.
        "framework_step_s": max(0.0, (statistics.median(measured) if measured else step)
                                - input_s),
        "raw": raw,
    }


def scenario_arms(specs, scenario) -> list:
    """The `cluster_sim.harness.arms.Arm` of each parsed arm spec on ``scenario`` (its
    learning rate, momentum and batch, `PROBE_WORKERS` workers): the same arms, and
    labels, for the real and the simulated runs.

    >>> from cluster_sim.scenarios import load_scenario
    >>> [a.label for a in scenario_arms(parse_arm_specs("bsp,kasync=2@0.01"),
    ...                                 load_scenario("static"))]
    ['BSP', 'KAsync(k=2) @lr=0.01']
    """
    from cluster_sim.harness.config import RunConfig
    config = RunConfig.from_scenario(scenario)
    base = LearningRate(config.learning_rate, momentum=config.momentum)
    return [s.arm(PROBE_WORKERS, base, config.batch_size) for s in specs]


def run_real(specs, scenarios, seeds, out, probe_repeats=3) -> tuple[dict, dict]:
    """Probe, then every (scenario, seed, arm of the parsed arm ``specs``) on the real
    cluster; also saved to ``out/real.json`` as it goes."""
    prepare_tensorflow()
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.harness.run import run_arm
    from cluster_sim.local_cluster import LocalCluster

    results = {name: [] for name in scenarios}
    with LocalCluster(num_workers=PROBE_WORKERS) as cluster:
        print("probing framework costs (homogeneous ASP and BSP)...", flush=True)
        costs = probe(cluster, run_arm, load_scenario("homogeneous"), probe_repeats)
        print(json.dumps({k: v for k, v in costs.items() if k != "raw"}), flush=True)
        for name, scenario in scenarios.items():
            for seed in range(seeds):
                for arm in scenario_arms(specs, scenario):
                    started = time.monotonic()
                    r = run_arm(cluster, arm, scenario, seed=seed)
                    results[name].append(r)
                    print(f"real {name} seed {seed} {arm.label}: TTA {r['tta_s']}, "
                          f"{time.monotonic() - started:.0f} s", flush=True)
                    (out / "real.json").write_text(json.dumps(
                        {"costs": costs, "specs": [s.text for s in specs], "seeds": seeds,
                         "results": results}, indent=1, default=list))
    return costs, results


def time_at_version(curve, version):
    """When ``curve`` (evaluations with ``wall_s`` and ``version``, in order) reached
    ``version``, interpolated between evaluations; None if it never did.

    >>> time_at_version([{"wall_s": 1.0, "version": 10}, {"wall_s": 3.0, "version": 30}], 20)
    2.0
    """
    if not curve or max(c["version"] for c in curve) < version:
        return None
    return version_to_wall({"curve": curve})(version)


def timing_error(real_run: dict, sim_run: dict):
    """Simulated over real time to the update count at which the real run reached its
    target, minus 1 (None if it never did): the timing error alone, without the noise of
    which evaluation first crosses the target."""
    if real_run["tta_s"] is None:
        return None
    version = next(c["version"] for c in real_run["curve"] if c["wall_s"] >= real_run["tta_s"])
    sim_t = time_at_version(sim_run["curve"], version)
    real_t = time_at_version(real_run["curve"], version)
    return None if sim_t is None or not real_t else sim_t / real_t - 1.0


def error_table(real: list[dict], simulated: list[dict]) -> str:
    """One row per policy: medians over seeds of the real and the simulated runs (TTA as
    the report takes it: a seed that never reached the target counts as infinite), and
    the median over seeds of `timing_error` (runs paired by seed)."""
    pct = lambda s, r: "-" if s is None or r in (None, 0) else f"{100 * (s - r) / r:+.0f}%"
    rows = []
    for policy in dict.fromkeys(r["policy"] for r in real):
        runs = lambda side: [x for x in side if x["policy"] == policy]
        med = lambda side, key: median_of([x[key] for x in runs(side)])
        rt = median_tta([x["tta_s"] for x in runs(real)])
        st = median_tta([x["tta_s"] for x in runs(simulated)])
        rs, ss = med(real, "samples_per_s"), med(simulated, "samples_per_s")
        sims = {x["seed"]: x for x in runs(simulated)}
        timing = median_of([timing_error(x, sims[x["seed"]]) for x in runs(real)
                            if x["seed"] in sims])
        rows.append((policy, format_cell(rt, ".1f"), format_cell(st, ".1f"), pct(st, rt),
                     "-" if timing is None else f"{100 * timing:+.0f}%",
                     format_cell(rs, ".0f"), format_cell(ss, ".0f"), pct(ss, rs),
                     f"{format_cell(med(real, 'staleness_p95'), '.0f')}/"
                     f"{format_cell(med(simulated, 'staleness_p95'), '.0f')}",
                     f"{format_cell(med(real, 'final_accuracy'), '.3f')}/"
                     f"{format_cell(med(simulated, 'final_accuracy'), '.3f')}"))
    header = ("policy", "real TTA s", "sim TTA s", "TTA err", "t@v err", "real smp/s", "sim smp/s",
              "thr err", "stale p95 r/s", "final acc r/s")
    return text_table(header, rows)


def simulate_like(specs, scenario, costs, seeds) -> list[dict]:
    """The simulated counterpart of the real runs of the parsed arm ``specs`` on
    ``scenario``, labelled as the harness labels them, throughput and final accuracy measured as the harness
    does (up to the target, where the harness stops)."""
    from cluster_sim.harness.config import RunConfig, load_data
    data = load_data(scenario)
    config = sim_config(costs, scenario, RunConfig.from_scenario(scenario), data)
    runs = run_policies(scenario_arms(specs, scenario), config, seeds=seeds, data=data,
                        progress=False)
    for run in runs:
        if run["tta_s"] is not None:
            upto = [c for c in run["curve"] if c["wall_s"] <= run["tta_s"]]
            run["samples_per_s"] = upto[-1]["pushes"] * config.batch_size / run["tta_s"]
            run["final_accuracy"] = upto[-1]["accuracy"]
    return runs


#: float32 numbers per push of the PS probe: 4 KB to 8 MB, around the teacher's 28 KB
#: and the click-through model's embedding tables (1 M+ parameters).
PS_PROBE_SIZES = (1_024, 65_536, 524_288, 2_097_152)
PS_PROBE_PUSHES = 200
BASE_COSTS = pathlib.Path(__file__).parents[1] / "scenarios" / "bench" / "costs_25ms.json"


def probe_ps(cluster, sizes=PS_PROBE_SIZES, pushes=PS_PROBE_PUSHES, repeats=2,
             progress=None) -> list[dict]:
    """`cluster_sim.harness.ps_probe.measure_pushes` for every size and mode, from a lone worker
    and from all of ``cluster``'s workers at once, ``repeats`` times interleaved (the
    machine's load then hits every size alike)."""
    from cluster_sim.harness.ps_probe import MODES, measure_pushes
    out = []
    for _ in range(repeats):
        for size in sizes:
            for mode in MODES:
                for workers in sorted({1, cluster.num_workers}):
                    out.append(measure_pushes(cluster, size, pushes, workers, mode))
                    if progress is not None:
                        progress(out[-1])
    return out


def ps_costs_json(measurements, base: dict, push_bytes: int, note: str = "") -> dict:
    """A costs file (``{"note", "costs", "measurements"}``) with the PS and network
    constants fitted on ``measurements`` (`cluster_sim.sim.ps.fit_ps_costs`) beside the
    framework costs of ``base`` (a costs file's ``costs``). The framework's cost after
    the parameter read (``step_overhead_s``) was measured in real runs whose steps
    already paid the network and the PS's service of a ``push_bytes`` push: that much
    is taken out of it (at least 0), so a step of the calibrated workload costs what it
    did when the PS is not saturated, and more when it is.

    >>> ms = [{"mode": m, "workers": 1, "bytes": b, "pushes": 10, "wall_s": 0.05,
    ...        "ps_cpu_s": 0.01 + (m == "apply") * 0.002} for m in ("accumulate", "apply")
    ...       for b in (4_000, 8_000)]
    >>> out = ps_costs_json(ms, {"step_overhead_s": 0.013, "read_overhead_s": 0.012}, 4_000)
    >>> {k: round(v, 4) for k, v in out["costs"].items() if v is not None}
    {'step_overhead_s': 0.008, 'read_overhead_s': 0.012, 'ps_push_s': 0.001, 'ps_push_s_per_byte': 0.0, 'ps_apply_s': 0.0002, 'ps_apply_s_per_byte': 0.0, 'network_latency_s': 0.004}
    """
    from cluster_sim.sim.ps import PSCosts, fit_ps_costs
    from cluster_sim.sim.speeds import Network
    fitted = fit_ps_costs(measurements)
    ps = PSCosts(fitted["ps_push_s"], fitted["ps_push_s_per_byte"])
    paid = (ps.push_service(push_bytes)
            + Network(push_bytes, fitted["network_gbps"], fitted["network_latency_s"]).step_s)
    costs = dict(base)
    if "step_overhead_s" in costs:
        costs["step_overhead_s"] = max(0.0, costs["step_overhead_s"] - paid)
    costs.update(fitted)
    return {"note": note, "costs": costs, "measurements": measurements}


def run_ps_probe(args) -> int:
    """``--ps-probe``: measure the PS on a local cluster, write the costs file."""
    prepare_tensorflow()
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    from cluster_sim.harness.config import RunConfig, load_data
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.workloads import numpy_model
    base_path = pathlib.Path(args.base_costs)
    base = json.loads(base_path.read_text())["costs"]
    bench = load_scenario("bench/homogeneous")
    push_bytes = numpy_model(load_data(bench), tuple(RunConfig.from_scenario(bench).hidden)
                             ).nbytes
    log = lambda m: print(f"{m['bytes']:>9,d} B {m['mode']:10s} {m['workers']} worker(s): "
                          f"{1e3 * m['wall_s'] / m['pushes']:6.2f} ms/push wall, "
                          f"{1e3 * m['ps_cpu_s'] / m['pushes']:6.2f} ms PS CPU", flush=True)
    with LocalCluster(num_workers=args.ps_probe_workers) as cluster:
        ms = probe_ps(cluster, repeats=args.probe_repeats, progress=log)
    note = (f"Measured by `python -m cluster_sim calibrate --ps-probe` "
            f"({time.strftime('%Y-%m-%d', time.gmtime())}, this project's 2-core machine, "
            f"{args.ps_probe_workers} workers and 1 PS on loopback): {len(ms)} runs of "
            f"{PS_PROBE_PUSHES} steps, each a pull of a variable and a real push through "
            f"strategies.ps_state.PSUpdateState, of {', '.join(f'{4 * s:,d}' for s in PS_PROBE_SIZES)} "
            "bytes, accumulate-only and apply-every-push, from 1 worker and from all at "
            "once, sizes interleaved (`cluster_sim.harness.ps_probe`), the machine shared "
            f"with other jobs (load average {os.getloadavg()[0]:.1f} at the end). PS costs: "
            "the PS process's CPU seconds per push (and the apply runs' extra), lines in "
            "the bytes; network: a lone worker's wall time per step minus the PS's CPU "
            "(`cluster_sim.sim.ps.fit_ps_costs`). "
            f"Framework costs from {base_path.name}, step_overhead_s less the network and "
            f"PS service of the teacher's {push_bytes:,d}-byte push it already held "
            "(`ps_costs_json`).")
    out = ps_costs_json(ms, base, push_bytes, note)
    path = pathlib.Path(args.ps_probe)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out["costs"].items()}, indent=1))
    print(f"written to {path}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arms", "--policies", dest="arms", default="bsp,asp,adaptive",
                        help=f"comma-separated arms ({', '.join(CHOICES)}); {SPEC_HELP}; "
                             "default bsp,asp,adaptive (--policies: the old name)")
    parser.add_argument("--scenarios", default="static,trace",
                        help="comma-separated scenarios, as in the demo (default "
                             "static,trace)")
    parser.add_argument("--traces", help="trace directory for the trace scenario "
                                         "(default: the vendored sample)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per policy, real and "
                                                             "simulated (default 3)")
    parser.add_argument("--probe-repeats", type=int, default=3,
                        help="runs of each probe, interleaved (default 3)")
    parser.add_argument("--reuse", help="directory with a real.json of an earlier run: "
                                        "skip the real cluster")
    parser.add_argument("--out", default="runs/calibration",
                        help="output directory (default runs/calibration)")
    parser.add_argument("--ps-probe", metavar="COSTS_JSON",
                        help="measure the PS instead (real pushes of several sizes on a "
                             "local cluster) and write the simulator's PS and network "
                             "costs with the --base-costs framework costs to this file")
    parser.add_argument("--base-costs", default=str(BASE_COSTS),
                        help="framework costs for --ps-probe's file (default "
                             "costs_25ms.json)")
    parser.add_argument("--ps-probe-workers", type=int, default=3,
                        help="workers of --ps-probe's cluster (default 3)")


def run(args) -> int:
    if args.ps_probe:
        if args.probe_repeats < 1 or args.ps_probe_workers < 1:
            print("error: --probe-repeats and --ps-probe-workers must be >= 1",
                  file=sys.stderr)
            return 2
        return run_ps_probe(args)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        if args.seeds < 1 or args.probe_repeats < 1:
            raise ValueError("--seeds and --probe-repeats must be >= 1")
        scenarios = {name: load_scenario(name, traces_dir=args.traces)
                     for name in args.scenarios.split(",") if name}
        saved = None
        if args.reuse:
            saved = json.loads((pathlib.Path(args.reuse) / "real.json").read_text())
        specs = parse_arm_specs(",".join(saved["specs"]) if saved else args.arms, CHOICES)
        for arm in scenario_arms(specs, load_scenario("homogeneous")):
            arm.make_policy().rule(PROBE_WORKERS)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if saved:
        real = saved["results"]
        # From the raw probe, so a corrected derivation applies to saved measurements.
        raw = {name: dict(probe, epoch_s={int(p): t for p, t in probe["epoch_s"].items()})
               for name, probe in saved["costs"]["raw"].items()}  # JSON keys are strings
        home = load_scenario("homogeneous")
        costs = costs_from_probe(raw, PROBE_WORKERS, _injected_s(home.batch_size,
                                                                 home.us_per_sample))
    else:
        costs, real = run_real(specs, scenarios, args.seeds, out, args.probe_repeats)
    print("\nframework costs: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in costs.items()
                                              if k != "raw"))
    tables = []
    for name, scenario in scenarios.items():
        simulated = simulate_like(specs, scenario, costs, args.seeds)
        tables.append(f"{scenario.summary()}\n{error_table(real[name], simulated)}")
        for side, runs in (("real", real[name]), ("simulated", simulated)):
            write_report(out / name / side, runs, title=f"calibration, {side}: {name}",
                         scenario=scenario, meta={"argv": command_line(), "costs": costs})
    text = (f"real and simulated: medians of {args.seeds} seed(s) per policy\n\n"
            + "\n\n".join(tables))
    (out / "calibration.txt").write_text(text + "\n")
    print(text)
    return 0

