"""``ksync-launch`` (or ``python -m strategies.launch``): run this machine's task of a
TF_CONFIG cluster.

Every machine gets the same cluster in ``TF_CONFIG`` and its own ``task``; then:

```
ksync-launch                                  # on each ps / worker machine: serve the task
ksync-launch -- python train.py --epochs 5    # on the chief: run the training script
ksync-launch --module mypkg.train -- --epochs 5
ksync-launch --check                          # print the cluster, check every task answers
```

In the training script, build the strategy from the same variable
(`ksync.strategy_from_tf_config` is `strategy_from_tf_config`):

```python
import ksync
strategy = ksync.strategy_from_tf_config(policy="adaptive")
```

Shutdown: the chief's launcher serves a small status endpoint on the control port (the
chief's port + 1000, or ``KSYNC_CONTROL_PORT``); ps and worker launchers poll it and exit
when the chief's script has ended, or when the chief's launcher has been gone for
``--chief-grace`` seconds (see `strategies.launch_control`). SIGTERM / Ctrl-C stop any
task at once; on the chief they reach the script first, and the servers are still told.

Before anything can block, the launcher checks TF_CONFIG, that this task's ports are free,
and (on the chief) that every ps and worker answers within ``--timeout``, naming each one
that does not. Exit codes: 0 done; 1 a server whose chief's script failed; 2 invalid
TF_CONFIG, arguments or port; 3 a task unreachable or the chief lost; otherwise the
chief's script's own exit code.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

from strategies.launch_control import (EXIT_SERVER_CHIEF_FAILED, EXIT_UNREACHABLE, EXIT_USAGE,
                                        ChiefWatch, ControlServer, control_address)
from strategies.launch_env import quiet_environment
from strategies.launch_net import check_port_free, probe, wait_reachable
from strategies.tf_config import SERVER_JOBS, TFConfig, split_address

DEFAULT_CHIEF_TIMEOUT_S = 120.0
DEFAULT_CHECK_TIMEOUT_S = 10.0
# A ps or worker whose chief script was started without ksync-launch would otherwise
# serve forever: nothing tells it training is over.
DEFAULT_SERVER_TIMEOUT_S = 600.0
_SILENT_AFTER_S = 5.0  # ten poll intervals of a server at the default --poll

# The user's command runs through this file so it gets SIGTERM if the launcher dies
# (even by SIGKILL); see its docstring.
_EXEC_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exec_shim.py")


class _Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


class _Log:
    """Progress lines on stderr, prefixed with the task and the time since start."""

    def __init__(self, label: str):
        self.label = label
        self.t0 = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[ksync-launch {self.label} +{time.monotonic() - self.t0:.2f}s] {message}",
              file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def strategy_from_tf_config(policy=None, env=None, wait_s: float = DEFAULT_CHIEF_TIMEOUT_S,
                            **strategy_kwargs):
    """The `KSyncStrategy` for the cluster in ``TF_CONFIG`` (this process must be the chief).

    Waits up to ``wait_s`` for every ps and worker to answer and raises TimeoutError
    naming those that do not (TensorFlow itself would wait silently). ``env`` defaults
    to ``os.environ``; other keyword arguments go to `KSyncStrategy`.

    Example:

    ```python
    strategy = ksync.strategy_from_tf_config(policy=ksync.Adaptive())
    with strategy.scope():
        model = ...
    ```
    """
    config = TFConfig.from_env(env)
    if config.task_type != "chief":
        raise ValueError(
            f"TF_CONFIG makes this process {config.task_type}:{config.task_index}, but only "
            "the chief builds the strategy and runs the training script. Start this task "
            "with `ksync-launch` (no script) and the script on the chief with "
            "`ksync-launch -- python SCRIPT`.")
    unreachable = wait_reachable(_server_targets(config), wait_s)
    if unreachable:
        raise TimeoutError(_unreachable_message(unreachable, config, wait_s))
    import tensorflow as tf

    from strategies.ksync_strategy import KSyncStrategy
    # The evaluator is a side-car reading checkpoints, not part of the training cluster.
    cluster = {job: list(addrs) for job, addrs in config.cluster.items() if job != "evaluator"}
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
    return KSyncStrategy(resolver, policy=policy, **strategy_kwargs)


def _server_targets(config: TFConfig) -> dict:
    return {f"{job}:{i}": address for job, i, address in config.tasks() if job in SERVER_JOBS}


def _unreachable_message(unreachable: dict, config: TFConfig, timeout_s: float) -> str:
    lines = [f"{len(unreachable)} task(s) not reachable within {timeout_s:g} s:"]
    for label, reason in unreachable.items():
        job, _, index = label.partition(":")
        address = config.cluster[job][int(index)]
        lines.append(f"  {label} at {address}: {reason}")
    lines.append("Start each with `ksync-launch` and its own TF_CONFIG on its machine, check "
                 "the addresses in TF_CONFIG and that the ports are open between machines, "
                 "or wait longer with --timeout SECONDS.")
    return "\n".join(lines)


def describe_cluster(config: TFConfig, control: str | None) -> str:
    """The resolved cluster as a table, this task marked."""
    rows = [("job", "index", "address", "")]
    for job, i, address in config.tasks():
        note = "<- this task" if (job, i) == (config.task_type, config.task_index) else ""
        if job == "chief" and control:
            note = f"control {control} {note}".strip()
        rows.append((job, str(i), address, note))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths + [0])).rstrip()
                     for r in rows)


# -- the three roles ------------------------------------------------------------------------

def run_check(config: TFConfig, control: str | None, timeout_s: float, log: _Log) -> int:
    print(describe_cluster(config, control), flush=True)
    me = (config.task_type, config.task_index)
    targets = {}
    for job, i, address in config.tasks():
        if (job, i) == me:
            continue
        # The chief's TensorFlow port opens only while its script trains; its launcher's
        # control port answers all along, so either one shows the chief is there.
        targets[f"{job}:{i}"] = (address, control) if job == "chief" and control else address
    problems = {}
    if config.task_type != "evaluator":
        try:
            check_port_free(f"{me[0]}:{me[1]}", config.address)
            print(f"{me[0]}:{me[1]} (this task): port {split_address(config.address)[1]} "
                  "is free here", flush=True)
        except ValueError as err:
            problems[f"{me[0]}:{me[1]}"] = str(err)
    unreachable = wait_reachable(
        targets, timeout_s, progress=lambda label: print(f"{label}: reachable", flush=True))
    for label, reason in unreachable.items():
        print(f"{label}: NOT reachable within {timeout_s:g} s: {reason}", flush=True)
    for label, reason in problems.items():
        print(f"{label} (this task): {reason}", flush=True)
    if unreachable or problems:
        log(f"check failed: {', '.join([*unreachable, *problems])}")
        return EXIT_UNREACHABLE if unreachable else EXIT_USAGE
    log(f"check passed: all {len(targets)} other task(s) reachable")
    return 0


def run_server(config: TFConfig, control: str, args, log: _Log) -> int:
    from strategies.server import die_with_parent, serve

    die_with_parent()
    label = f"{config.task_type}:{config.task_index}"
    watch = ChiefWatch(control, label, timeout_s=args.timeout, grace_s=args.chief_grace)
    state = {"seen": False, "next_note": 0.0}

    def should_stop():
        verdict = watch.check()
        if watch.last_seen is not None and not state["seen"]:
            state["seen"] = True
            log(f"connected to the chief's launcher at {control}")
        elif not state["seen"] and log.elapsed() >= state["next_note"]:
            state["next_note"] = log.elapsed() + 30.0
            log(f"waiting for the chief's launcher at {control} (up to {args.timeout:g} s "
                "in all; a chief script started without ksync-launch cannot tell this task "
                "when training ends; --timeout inf waits without limit)")
        return verdict

    log(f"starting TensorFlow server on {config.address}")
    code, why = serve(config, should_stop=should_stop, poll_s=args.poll)
    log(f"stopping after {log.elapsed():.1f} s: {why}")
    return code


def run_chief(config: TFConfig, control: str, command: list[str], args, log: _Log) -> int:
    label = "chief:0"
    check_port_free(label, config.address)  # the script's TensorFlow will listen there
    targets = _server_targets(config)
    server = ControlServer(split_address(control)[1], expected=list(targets)).start()
    child = None
    state = {"interrupt": None}

    def on_signal(signum, _frame):
        if child is None:
            raise _Interrupted(signum)
        state["interrupt"] = signum
        # Ctrl-C in a terminal already reached the script (same foreground process group).
        from_terminal = (signum == signal.SIGINT and os.isatty(0)
                         and os.tcgetpgrp(0) == os.getpgrp())
        if not from_terminal and child.poll() is None:
            child.send_signal(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    rc, reason = EXIT_UNREACHABLE, "the chief's launcher stopped"
    try:
        log(f"control endpoint on {control}; waiting up to {args.timeout:g} s for "
            f"{len(targets)} task(s)")
        unreachable = wait_reachable(targets, args.timeout,
                                     progress=lambda t: log(f"{t} is reachable"))
        if unreachable:
            log("error: " + _unreachable_message(unreachable, config, args.timeout))
            rc, reason = EXIT_UNREACHABLE, "not every task was reachable"
            return rc
        log(f"all tasks reachable after {log.elapsed():.2f} s; running {' '.join(command)}")
        server.set_running()
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, _EXEC_SHIM, str(os.getpid()),
                                  *command], stdin=None)
        rc = _wait_interruptibly(child)
        if rc < 0:
            rc = 128 - rc  # killed by a signal: report it as a shell would
        reason = ("the training script ended" if rc == 0 else
                  f"the training script failed (exit code {rc})")
        if state["interrupt"]:
            reason += f" after {signal.Signals(state['interrupt']).name}"
        log(f"{reason} after {time.monotonic() - started:.1f} s")
        return rc
    except _Interrupted as err:
        rc, reason = err.exit_code, f"the chief's launcher got {err}"
        log(reason)
        return rc
    except FileNotFoundError as err:
        rc, reason = 127, f"cannot run {command[0]!r}: {err.strerror}"
        log(f"error: {reason}")
        return rc
    finally:
        # Whatever happened, tell the servers, so no task is left serving a dead job.
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        # Every task that is up (even one that has not polled yet, if the script was
        # quick) must fetch "done" before we leave; one never up cannot be waited for.
        expected = [t for t, a in targets.items() if t in server.seen() or probe(a, 0.5) is None]
        _shut_down(server, targets, expected, rc, reason, args.shutdown_timeout, log)


def _wait_interruptibly(child: subprocess.Popen, poll_s: float = 0.1) -> int:
    """``child.wait()`` in slices, so that a signal handler runs while the script runs.

    Python runs signal handlers on the main thread only; a SIGTERM the kernel hands to
    another thread (the control server's) would wait until a bare ``waitpid`` returned,
    i.e. until the script ended by itself, and never be forwarded to it.
    """
    while True:
        try:
            return child.wait(poll_s)
        except subprocess.TimeoutExpired:
            pass


def _shut_down(server: ControlServer, targets: dict, expected: list, rc: int, reason: str,
               timeout_s: float, log: _Log) -> None:
    started = time.monotonic()
    server.finish(rc, reason)
    # A task up but silent a few poll intervals after its port opened was not started
    # through ksync-launch (e.g. a bare tf.distribute.Server): nobody to wait for.
    silent = server.wait_seen(expected, min(timeout_s, _SILENT_AFTER_S))
    if silent:
        log(f"note: {', '.join(silent)} never polled the control endpoint (not started with "
            "ksync-launch?); stop them yourself")
    server.expected = [t for t in expected if t not in silent]
    missing = server.wait_acknowledged(max(0.0, timeout_s - (time.monotonic() - started)))
    still_up = {}
    deadline = started + timeout_s
    pending = {t: targets[t] for t in server.expected if t not in missing}
    while pending and time.monotonic() < deadline:
        pending = {t: a for t, a in pending.items() if probe(a, 0.5) is None}
        if pending:
            time.sleep(0.05)
    still_up.update(pending)
    server.close()
    if missing or still_up:
        log(f"warning: not stopped within {timeout_s:g} s: "
            f"{', '.join(sorted({*missing, *still_up}))} (they stop by themselves once the "
            "chief has been gone for their --chief-grace)")
    else:
        log(f"shut down {len(server.expected)} task(s) in {time.monotonic() - started:.2f} s")


# -- command line ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ksync-launch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run this machine's task of the TF_CONFIG cluster: ps and worker "
                    "tasks serve until the chief's script ends; the chief runs the script.",
        epilog="examples:\n  ksync-launch                            # ps / worker\n"
               "  ksync-launch -- python train.py --epochs 5   # chief\n"
               "  ksync-launch --module pkg.train -- --epochs 5\n"
               "  ksync-launch --check --timeout 30\n\n"
               f"exit codes: 0 done; {EXIT_SERVER_CHIEF_FAILED} a server whose chief's script "
               f"failed;\n  {EXIT_USAGE} invalid TF_CONFIG, arguments or port; "
               f"{EXIT_UNREACHABLE} a task unreachable or the chief lost;\n"
               "  otherwise the chief's script's own")
    parser.add_argument("--check", action="store_true",
                        help="print the resolved cluster, check every other task answers "
                             "and this task's port is free, then exit")
    parser.add_argument("--module", "-m", help="on the chief: run `python -m MODULE ARGS`")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="how long to wait for the other tasks: the chief for every ps "
                             f"and worker (default {DEFAULT_CHIEF_TIMEOUT_S:g}), --check for "
                             f"every task (default {DEFAULT_CHECK_TIMEOUT_S:g}), a ps or "
                             "worker for the chief's launcher (default "
                             f"{DEFAULT_SERVER_TIMEOUT_S:g}; 'inf' for no limit)")
    parser.add_argument("--control-port", type=int, default=None, metavar="PORT",
                        help="the chief launcher's control port (default: $KSYNC_CONTROL_PORT "
                             "or the chief's port + 1000); the same on every task")
    parser.add_argument("--chief-grace", type=float, default=30.0, metavar="SECONDS",
                        help="a ps or worker exits when the chief's launcher, once seen, "
                             "stays unreachable this long (default 30)")
    parser.add_argument("--shutdown-timeout", type=float, default=15.0, metavar="SECONDS",
                        help="how long the chief waits for every task to stop (default 15)")
    parser.add_argument("--poll", type=float, default=0.5, metavar="SECONDS",
                        help="how often a ps or worker asks the chief (default 0.5)")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's start-up and C++ log lines, here and in the "
                             "training script (hidden by default; same as KSYNC_VERBOSE=1)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="on the chief, after `--`: the training command (or, with "
                             "--module, its arguments)")
    return parser


def main(argv=None) -> int:
    """Entry point of ``ksync-launch``; returns the exit code (see the module doc)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_environment(args.verbose)  # inherited by the training script and the server
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.module:
        command = [sys.executable, "-m", args.module, *command]
    try:
        config = TFConfig.from_env()
        label = f"{config.task_type}:{config.task_index}"
        log = _Log(label)
        control = None
        if config.task_type != "evaluator":
            control = control_address(config, args.control_port)
        if args.check:
            timeout = DEFAULT_CHECK_TIMEOUT_S if args.timeout is None else args.timeout
            return run_check(config, control, timeout, log)
        if config.task_type in SERVER_JOBS:
            if command:
                raise ValueError(
                    f"this task is {label}, which serves and runs no script, but a command "
                    f"was given ({' '.join(command)}). Give the command to the chief's "
                    "launcher only.")
            if args.timeout is None:
                args.timeout = DEFAULT_SERVER_TIMEOUT_S
            return _exit_server(run_server(config, control, args, log))
        if not command:
            raise ValueError(
                f"this task is {label}: give the training command after `--`, e.g. "
                "`ksync-launch -- python train.py`, or `--module pkg.train`.")
        if config.task_type == "evaluator":
            # A side-car evaluator only reads checkpoints: nothing to coordinate.
            os.execvp(command[0], command)
        if args.timeout is None:
            args.timeout = DEFAULT_CHIEF_TIMEOUT_S
        return run_chief(config, control, command, args, log)
    except ValueError as err:
        print(f"ksync-launch: error: {err}", file=sys.stderr, flush=True)
        return EXIT_USAGE


def _exit_server(code: int) -> int:
    from strategies.server import exit_now
    exit_now(code)  # TensorFlow's gRPC threads would hold a normal exit
    return code


if __name__ == "__main__":
    sys.exit(main())
