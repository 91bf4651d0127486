"""Network checks the launcher makes before anything blocks: free ports, reachable tasks.

TensorFlow fails late and obscurely on both problems: a server whose port is taken dies
with "Could not start gRPC server", and a chief whose worker is unreachable waits
without saying which. These checks run first, in plain Python, and name the task.

Example:

>>> from strategies.launch_net import port_in_use, wait_reachable
>>> port_in_use(0) is None          # port 0 asks the kernel for any free port
True
>>> wait_reachable({}, timeout_s=1.0)
{}
"""

import concurrent.futures
import errno
import socket
import time

from strategies.tf_config import split_address


def port_in_use(port: int) -> str | None:
    """Why ``port`` cannot be listened on by a server on this machine, or None if it can.

    Binds the wildcard address as gRPC does (SO_REUSEADDR set, so a port in TIME_WAIT
    counts as free, as it does for gRPC), on IPv4 and, where the system has it, IPv6.
    """
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return "another process is listening on it"
            if err.errno in (errno.EACCES, errno.EPERM):
                return "binding it is not permitted (ports below 1024 need root)"
            if err.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                return f"it cannot be bound: {err.strerror}"
        finally:
            sock.close()
    return None


def check_port_free(label: str, address: str) -> None:
    """Raise ValueError naming the task and the fix if ``address``'s port is taken here."""
    port = split_address(address)[1]
    reason = port_in_use(port)
    if reason:
        raise ValueError(
            f"port {port} of {label} ({address}) is not free on this machine: {reason}. "
            f"Find the process with `ss -ltnp 'sport = :{port}'` and stop it, or give "
            f"{label} another port in TF_CONFIG (on every machine).")


def probe(address, timeout_s: float = 1.0) -> str | None:
    """None if a TCP connection to ``address`` succeeds, else why it did not.

    ``address`` may be a tuple of alternatives: reachable if any one answers.
    """
    if isinstance(address, (tuple, list)):
        reasons = [probe(a, timeout_s) for a in address]
        return None if None in reasons else "; ".join(
            f"{a}: {r}" for a, r in zip(address, reasons))
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except socket.gaierror as err:
        return f"host {host!r} does not resolve ({err.strerror})"
    except ConnectionRefusedError:
        return "connection refused (nothing listens there yet)"
    except (TimeoutError, socket.timeout):
        return "no answer (host down, wrong address or a firewall)"
    except OSError as err:
        return err.strerror or str(err)


def wait_reachable(targets: dict, timeout_s: float, interval_s: float = 0.25,
                   progress=None) -> dict:
    """Probe every ``label -> address`` until all answer or ``timeout_s`` passes.

    An address may be a tuple of alternatives (see `probe`).

    Returns ``{label: reason}`` for the targets still unreachable (empty when all are
    up). ``progress(label)`` is called once per target when it first answers.
    """
    pending = dict(targets)
    reasons = {}
    deadline = time.monotonic() + timeout_s
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(pending) or 1)) as pool:
        while pending:
            left = deadline - time.monotonic()
            # Probes run in parallel so one black-holed host does not eat everyone's time.
            futures = {label: pool.submit(probe, address, max(0.2, min(1.0, left)))
                       for label, address in pending.items()}
            for label, future in futures.items():
                reasons[label] = future.result()
                if reasons[label] is None:
                    del pending[label]
                    if progress:
                        progress(label)
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    return {label: reasons[label] for label in pending}
