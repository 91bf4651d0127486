"""Quiet TensorFlow start-up for ksync's entry points (``ksync-launch``, the task server,
``python -m cluster_sim``): our own lines, not TensorFlow's, on stderr.

TensorFlow writes a screenful before anything of ours: oneDNN and cudart_stub notices
and "All log messages before absl::InitializeLog()" while it is imported (written before
its log level applies, so no variable silences them), "failed call to cuInit" on a
machine without a GPU, and "Failed to remove function remotely" errors whenever a
function on a server is released. `quiet_tensorflow` sets the C++ log level before the
import, filters the import's stderr and keeps Python's absl and TensorFlow loggers to
errors. ``KSYNC_VERBOSE=1`` (``--verbose`` of our commands) keeps all of it; it is in
the environment, so the processes a command starts inherit the choice.

Example: ``quiet_tensorflow(verbose=args.verbose)`` before anything imports TensorFlow.
"""

import contextlib
import os
import re
import sys
import tempfile

VERBOSE_ENV = "KSYNC_VERBOSE"

# Lines TensorFlow writes to stderr while it is imported: glog-style INFO and WARNING
# lines ("I0000 00:00:17.. 123 port.cc:153] ..."), absl's notice before its log is set
# up, and the continuation line of cpu_feature_guard's notice.
_IMPORT_NOISE = re.compile(r"^([IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]|"
                           r"WARNING: All log messages before absl::InitializeLog|"
                           r"To enable the following instructions:)")


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def quiet_environment(verbose_flag: bool = False) -> bool:
    """Set the variables that quiet TensorFlow in this process and the processes it
    starts (a launcher's training script, servers); False when ``verbose_flag`` or
    ``KSYNC_VERBOSE`` asks for everything."""
    if verbose_flag:
        os.environ[VERBOSE_ENV] = "1"
    if verbose():
        return False
    # Level 3 keeps FATAL only: the C++ ERROR lines we meet are cuInit without a GPU and
    # functions released on servers already gone; a real failure surfaces as a Python
    # exception with its message.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return True


def quiet_tensorflow(verbose_flag: bool = False) -> None:
    """Import TensorFlow without its start-up noise (see the module docstring), unless
    ``verbose_flag`` or ``KSYNC_VERBOSE`` asks for everything. Call it before anything
    imports TensorFlow; once TensorFlow is imported only the loggers can still be set."""
    if not quiet_environment(verbose_flag):
        return
    if "tensorflow" not in sys.modules:
        with _filtered_stderr(_IMPORT_NOISE):
            import tensorflow  # noqa: F401  (imported here, under the filter)
    import absl.logging
    import tensorflow as tf

    absl.logging.set_verbosity(absl.logging.ERROR)
    tf.get_logger().setLevel("ERROR")
    if not isinstance(sys.unraisablehook, _QuietTeardownHook):
        sys.unraisablehook = _QuietTeardownHook(sys.unraisablehook)


class _QuietTeardownHook:
    """Drops one message that is never a problem of the run: TensorFlow's eager
    executors wait for their pending remote operations when garbage-collected, and
    when that happens after a run's servers have stopped (a finished `fit`'s
    coordinator collected later, or at interpreter exit) the wait fails with
    UnavailableError or CancelledError, printed as an "Exception ignored in
    Executor.__del__" traceback. Everything else goes to the previous hook."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable):
        where = getattr(unraisable.object, "__qualname__", "")
        if where == "Executor.__del__" and unraisable.exc_type.__name__ in (
                "UnavailableError", "CancelledError"):
            return
        self.previous(unraisable)


@contextlib.contextmanager
def _filtered_stderr(noise: re.Pattern):
    """Collect what is written to file descriptor 2 (C++ and Python alike) in a file,
    then write back the lines that ``noise`` does not match."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode(errors="replace").splitlines(True)
                    if not noise.match(line)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
