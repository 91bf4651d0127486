"""Exit a command that ran local clusters without TensorFlow's exit-time noise."""

import os
import sys


def quiet_exit(code: int) -> None:
    """Exit without the hundreds of "Failed to remove function remotely" lines that
    TensorFlow's eager context logs at interpreter exit, when it tries to free functions
    on servers already stopped, and that would bury the printed table.

    Example: ``if __name__ == "__main__": quiet_exit(main())``
    """
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.exit(code)
