"""Exec a command so that it gets SIGTERM when the launcher that started it dies.

``ksync-launch`` runs the user's command through this file: ``python exec_shim.py
LAUNCHER_PID COMMAND [ARGS...]``. ``prctl(PR_SET_PDEATHSIG)`` must be set in the child
itself (``preexec_fn`` is unsafe once the launcher has threads), and the parent is
checked afterwards to close the race with a launcher that died first. Run by path, not
with ``-m``: importing the ``strategies`` package would load TensorFlow first.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Have this process get SIGTERM when its parent ``parent`` (a pid) dies, and exit
    at once if it already has (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        sys.exit(143)  # the parent is already gone: as if SIGTERM had come


def main(argv) -> None:
    launcher, command = int(argv[1]), argv[2:]
    die_with_parent(launcher)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
