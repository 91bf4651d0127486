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
import ctypes
import os
import signal
import sys
import threading

from strategies.tf_config import SERVER_JOBS, TFConfig


def _die_with_parent():
    """Ask Linux to SIGTERM this process when its parent exits (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def serve(config: TFConfig, stop_file: str | None = None, poll_s: float = 0.2) -> None:
    """Start the TensorFlow server for ``config``'s task and block until told to stop."""
    if config.task_type not in SERVER_JOBS:
        raise ValueError(
            f"task type {config.task_type!r} does not run a server; only {SERVER_JOBS} do. "
            "Run the chief with your training script instead.")
    import tensorflow as tf

    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config.cluster), job_name=config.task_type,
        task_index=config.task_index, protocol="grpc", start=True)
    print(f"ksync server {config.task_type}:{config.task_index} listening on "
          f"{config.address}", flush=True)
    while not stop.wait(poll_s):
        if stop_file and os.path.exists(stop_file):
            break
    del server  # the process exit tears the gRPC server down


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stop-file", help="stop serving when this file exists")
    args = parser.parse_args(argv)
    _die_with_parent()
    try:
        config = TFConfig.from_env()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    serve(config, stop_file=args.stop_file)
    # TensorFlow's gRPC threads can keep a clean interpreter exit waiting; the server
    # holds no state worth flushing, so leave at once.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
