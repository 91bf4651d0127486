"""Soak run: long trace-driven training with a fault every few minutes, against the same
training undisturbed.

A worker is frozen (SIGSTOP for ``--pause-s``) or killed (and restarted
``--down-s`` later) every ``--fault-every-s`` seconds, round robin over the workers, for
``--minutes`` of the `trace` scenario under one policy. Then the same scenario runs
without faults for the same number of pushes. It prints and writes (``--out``/soak.json)
the faults injected, the counters of both runs and their accuracies, and exits 1 when the
counters are inconsistent or the accuracy of the faulted run is more than ``--tolerance``
below the undisturbed one. Accuracy is the mean of each run's last ``--last-evals``
evaluations: one evaluation is on 360 test images, where a single image is 0.28 points
and two evaluations of the same plateau differ by a point or more.

```
python -m cluster_sim soak --minutes 30 --traces ../shared/traces/alibaba_pai --out runs/soak
```
"""

import argparse
import gc
import json
import os
import pathlib
import sys

from cluster_sim.cli import command_line, prepare_tensorflow


def fault_events(num_workers: int, duration_s: float, every_s: float, pause_s: float,
                 down_s: float, kinds: str = "both") -> list[dict]:
    """Scenario events, one every ``every_s``, none running past ``duration_s``: a pause
    of each worker in turn, then a kill-and-restart of each, and so on (``kinds``
    "both"); only kills ("kill", preemptions) or only pauses ("pause").

    >>> [(e["action"], e["worker"], e["at_s"]) for e in fault_events(2, 600, 120, 20, 30)]
    [('pause', 0, 120.0), ('pause', 1, 240.0), ('kill', 0, 360.0), ('kill', 1, 480.0)]
    >>> [e["action"] for e in fault_events(2, 600, 120, 20, 30, kinds="kill")]
    ['kill', 'kill', 'kill', 'kill']

    Only the faults that run are checked: kills alone need no pause length.

    >>> len(fault_events(2, 600, 20, 30, 6, kinds="kill"))
    29
    >>> fault_events(2, 600, 20, 30, 6)
    Traceback (most recent call last):
    ...
    ValueError: a fault every 20 s cannot last 30 s; raise --fault-every-s or shorten --pause-s / --down-s
    """
    if kinds not in ("both", "kill", "pause"):
        raise ValueError(f"--faults must be both, kill or pause, got {kinds!r}")
    lengths = {"--pause-s": pause_s, "--down-s": down_s}
    if kinds != "both":  # only the faults that run are checked and spaced
        lengths = {k: v for k, v in lengths.items() if (k == "--pause-s") == (kinds == "pause")}
    if every_s <= 0 or min(lengths.values()) <= 0:
        raise ValueError(f"--fault-every-s and {' and '.join(lengths)} must be > 0")
    longest = max(lengths.values())
    if longest >= every_s:
        raise ValueError(f"a fault every {every_s:g} s cannot last {longest:g} s; "
                         f"raise --fault-every-s or shorten {' / '.join(lengths)}")
    events = []
    at = float(every_s)
    while at + longest < duration_s:
        worker = len(events) % num_workers
        pause = (len(events) // num_workers) % 2 == 0 if kinds == "both" else kinds == "pause"
        if pause:
            events.append({"action": "pause", "worker": worker, "at_s": at,
                           "duration_s": pause_s})
        else:
            events.append({"action": "kill", "worker": worker, "at_s": at,
                           "restart_at_s": at + down_s})
        at += every_s
    return events


def consistent(result: dict) -> bool:
    return result["applied"] + result["dropped"] + result["pending"] == result["pushed"]


def plateau_accuracy(result: dict, last: int) -> float:
    """Mean test accuracy of a run's last ``last`` evaluations.

    >>> plateau_accuracy({"curve": [{"accuracy": a} for a in (0.5, 0.9, 0.96, 0.98)]}, 2)
    0.97
    """
    points = [c["accuracy"] for c in result["curve"][-last:]]
    return round(sum(points) / len(points), 6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="length of the faulted run (default 30)")
    parser.add_argument("--fault-every-s", type=float, default=180.0,
                        help="seconds between faults (default 180)")
    parser.add_argument("--pause-s", type=float, default=30.0,
                        help="how long a paused worker stays stopped (default 30)")
    parser.add_argument("--down-s", type=float, default=30.0,
                        help="how long a killed worker stays down before its restart "
                             "(default 30)")
    parser.add_argument("--faults", default="both", choices=("both", "kill", "pause"),
                        help="pauses and kills in turn (default), or only kills "
                             "(preemptions: kill -9, restart --down-s later), or only pauses")
    parser.add_argument("--coordination-service", action="store_true",
                        help="the chief detects failures through TensorFlow's coordination "
                             "service (TF_PSS_ENABLE_COORDINATION_SERVICE=1), as in "
                             "TensorFlow's own fault-tolerance tests")
    parser.add_argument("--policy", default="adaptive", help="policy spec for ksync.parse")
    parser.add_argument("--scenario", default="trace",
                        help="scenario giving the workload and slowdowns, as in the demo "
                             "(default trace)")
    parser.add_argument("--traces", help="trace directory (default: the vendored sample)")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="accuracy the faulted run may lose (default 0.01: 1 point)")
    parser.add_argument("--last-evals", type=int, default=5,
                        help="evaluations averaged for each run's accuracy (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of both runs (default 0)")
    parser.add_argument("--out", default="runs/soak",
                        help="output directory (default runs/soak)")


def run(args) -> int:
    prepare_tensorflow()

    import dataclasses

    from tqdm import tqdm

    from cluster_sim.harness.run import Arm, RunConfig, run_arm
    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.netns import isolate_loopback
    from cluster_sim.scenarios import load_scenario, parse_scenario

    try:
        base = load_scenario(args.scenario, traces_dir=args.traces)
        duration = args.minutes * 60.0
        if args.last_evals < 1:
            raise ValueError("--last-evals must be >= 1")
        events = fault_events(base.num_workers, duration, args.fault_every_s, args.pause_s,
                              args.down_s, args.faults)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    faulted = parse_scenario({"name": f"{base.name}+faults", "workers": base.num_workers,
                              "events": events}, source="soak")
    # The scenario's workload and slowdowns, run for the whole duration: no target stops it.
    soak = dataclasses.replace(base, name=faulted.name, events=faulted.events,
                               target_accuracy=2.0, time_budget_s=duration,
                               max_pushes=10**9)
    arm = Arm(args.policy, args.policy)
    if args.coordination_service:
        # Read by TensorFlow when the strategy connects (the chief's side only).
        os.environ["TF_PSS_ENABLE_COORDINATION_SERVICE"] = "1"
    isolate_loopback()
    results = {}
    with LocalCluster(num_workers=base.num_workers) as cluster:
        def train(label, scenario, total):
            with tqdm(total=total, desc=f"{label:>12}", unit="push") as bar:
                def progress(pushes, accuracy):
                    bar.update(pushes - bar.n)
                    bar.set_postfix(accuracy=f"{accuracy:.3f}")
                # A target loss below any loss: a workload's own target (teacher's)
                # does not stop the soak either.
                config = RunConfig.from_scenario(scenario, target_loss=float("-inf"))
                results[label] = run_arm(cluster, arm, scenario, seed=args.seed,
                                         config=config, progress=progress)

        # The faulted run lasts its minutes; the undisturbed one makes as many pushes.
        train("faulted", soak, None)
        pushes = results["faulted"]["pushed"]
        train("undisturbed", dataclasses.replace(soak, name=base.name, events=(),
                                               time_budget_s=10 * duration,
                                               max_pushes=pushes), pushes)
        gc.collect()  # release remote functions while the servers still answer
    faults = results["faulted"]["events"]
    ok_counters = all(consistent(r) for r in results.values())
    accuracy = {label: plateau_accuracy(r, args.last_evals) for label, r in results.items()}
    loss = accuracy["undisturbed"] - accuracy["faulted"]
    report = {
        "argv": command_line(), "policy": args.policy, "minutes": args.minutes,
        "coordination_service": args.coordination_service,
        "faults_scheduled": events, "faults_applied": faults,
        "counters_consistent": ok_counters, "accuracy_loss": loss,
        "last_evals": args.last_evals,
        **{label: {"accuracy": accuracy[label],
                   **{k: r[k] for k in ("final_accuracy", "wall_s", "pushed", "applied",
                                        "dropped", "pending", "version", "retried",
                                        "worker_pushes", "k_history", "fit_errors",
                                        "lost_logs")}}
           for label, r in results.items()},
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report, indent=1, default=str))
    for label in ("faulted", "undisturbed"):
        r = report[label]
        print(f"{label:>12}: accuracy {r['accuracy']:.4f} (mean of last {args.last_evals} "
              f"evaluations; final {r['final_accuracy']:.4f}), {r['pushed']} pushed = "
              f"{r['applied']} applied + {r['dropped']} dropped + {r['pending']} pending, "
              f"{r['version']} updates, {r['retried']} retried, {r['wall_s']:.0f} s, "
              f"{len(r['fit_errors'])} fit restarts, {r['lost_logs']} steps' logs lost "
              "with their worker")
    print(f"faults applied: {len(faults)} ({', '.join(f'{a}@{t:.0f}s:w{w}' for t, w, a in faults)})")
    print(f"accuracy loss {loss * 100:+.2f} points (tolerance {args.tolerance * 100:.1f}); "
          f"counters {'consistent' if ok_counters else 'INCONSISTENT'}; {out / 'soak.json'}")
    return 0 if ok_counters and loss <= args.tolerance else 1

