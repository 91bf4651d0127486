"""Serve one parameter-server or worker task of a TensorFlow cluster.

TensorFlow servers block forever once started; this module wraps one in a process that
stops cleanly on SIGTERM/SIGINT, when its parent dies (Linux), or when the file named
by ``--stop-file`` appears, so launchers and test fixtures never leave a server behind.

Example:

```
TF_CONFIG='{"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
            "task": {"type": "ps", "index": 0}}' python -m strategies.server
```
"""

import argparse
import os
import signal
import sys
import threading
import time

from strategies.launch_env import quiet_tensorflow
from strategies.launch_net import check_port_free
from strategies.tf_config import SERVER_JOBS, TFConfig


def die_with_parent(poll_s: float = 0.2):
    """Exit at once when the process that started this one exits, however it ends.

    A watcher thread, not Linux's parent-death signal: that signal fires when the
    *thread* that started the process exits, so a task restarted from a helper thread
    (a harness, a test) would die with that thread."""
    # A launcher names itself, in case it were gone before this line runs.
    parent = int(os.environ.get("KSYNC_PARENT_PID") or os.getppid())

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        exit_now(0)

    threading.Thread(target=watch, name="ksync-parent-watch", daemon=True).start()


def serve(config: TFConfig, stop_file: str | None = None, poll_s: float = 0.2,
          should_stop=None, check_port: bool = True) -> tuple[int, str]:
    """Start the TensorFlow server for ``config``'s task and block until told to stop.

    Stops on SIGTERM/SIGINT, when ``stop_file`` exists, or when ``should_stop()`` (called
    every ``poll_s``) returns ``(exit_code, message)`` instead of None. Returns the exit
    code and the reason. Raises ValueError before starting TensorFlow when the task does
    not run a server or its port is taken (TensorFlow would die with an obscure gRPC
    error instead).

    Example:

    ```python
    code, why = serve(TFConfig.from_env(), stop_file="/tmp/stop-ps0")
    ```
    """
    if config.task_type not in SERVER_JOBS:
        raise ValueError(
            f"task type {config.task_type!r} does not run a server; only {SERVER_JOBS} do. "
            "Run the chief with your training script instead.")
    label = f"{config.task_type}:{config.task_index}"
    if check_port:
        check_port_free(label, config.address)
    quiet_tensorflow()  # after the checks above, which need no TensorFlow
    import tensorflow as tf

    stop = threading.Event()
    reason = [(0, "stopped by a signal")]

    def on_signal(signum, _frame):
        reason[0] = (0, f"stopped by {signal.Signals(signum).name}")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = tf.distribute.Server(
            tf.train.ClusterSpec(config.cluster), job_name=config.task_type,
            task_index=config.task_index, protocol="grpc", start=True)
    except Exception as err:  # TF raises UnknownError with a bare gRPC message
        raise ValueError(f"TensorFlow could not start the server of {label} on "
                         f"{config.address}: {err}. Is the port taken (another task or "
                         "process on this machine)?") from None
    print(f"ksync server {label} listening on {config.address}", flush=True)
    while not stop.wait(poll_s):
        if stop_file and os.path.exists(stop_file):
            reason[0] = (0, f"stop file {stop_file} appeared")
            break
        if should_stop is not None:
            verdict = should_stop()
            if verdict is not None:
                reason[0] = verdict
                break
    del server  # the process exit tears the gRPC server down
    return reason[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop-file", help="stop serving when this file exists")
    args = parser.parse_args(argv)
    die_with_parent()
    try:
        config = TFConfig.from_env()
        code, _ = serve(config, stop_file=args.stop_file)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    exit_now(code)


def exit_now(code: int) -> None:
    """Leave at once: TensorFlow's gRPC threads can keep a clean interpreter exit
    waiting, and a server holds no state worth flushing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
