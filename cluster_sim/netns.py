"""Keep a local cluster reachable from this machine only.

TensorFlow's gRPC servers listen on every interface whatever address the cluster spec
names. Moving the process that starts the cluster into a fresh network namespace that
has nothing but loopback makes those listeners reachable from 127.0.0.1 alone; every
server started afterwards inherits the namespace.
"""

import ctypes
import os
import subprocess
import warnings

_CLONE_NEWNET = 0x40000000
_isolated = False


def isolate_loopback() -> bool:
    """Move this process into a private network namespace with only ``lo`` up.

    Returns True when isolated (also when already done), False with a warning when the
    system does not allow it (not root, no ``unshare``), in which case local TensorFlow
    servers stay reachable on all interfaces of this machine. Call it before any thread
    or server starts.

    Example (first thing in a program that starts local servers; not run as a
    doctest, since as root it moves the calling process into a namespace of its own):

    ```python
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()
    ```
    """
    global _isolated
    if _isolated:
        return True
    reason = None
    if os.geteuid() != 0:
        reason = "not running as root"
    else:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNET) != 0:
            reason = f"unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
        else:
            done = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True)
            if done.returncode != 0:
                reason = f"could not bring loopback up: {done.stderr.decode().strip()}"
    if reason:
        warnings.warn(f"local cluster not isolated to loopback ({reason}); TensorFlow "
                      "servers will listen on all interfaces.", RuntimeWarning, stacklevel=2)
        return False
    _isolated = True
    return True
