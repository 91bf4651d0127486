"""Shared fixtures: one real local TensorFlow cluster for the whole session."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# As our entry points run (strategies.launch_env): the C++ ERROR lines left are TensorFlow
# releasing functions on the session cluster's servers after they stopped, a thousand
# lines after the summary; a real failure is a Python exception.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

#: an executable run outside pytest (it reads its settings from the environment at
#: import): `tests/test_strategies/upstream_runner.py`.
collect_ignore = ["test_strategies/upstream_runner.py"]

NUM_WORKERS = 3


def proc_state(pid):
    """A process's state letter from ``/proc`` ("R", "S", "T", "Z", ...), None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except OSError:
        return None


def processes_with(token):
    """Pids of live processes whose environment carries ``KSYNC_TEST_RUN=token``: what a
    test started (its children inherit the variable), and nothing another program on the
    machine runs."""
    found = []
    needle = f"KSYNC_TEST_RUN={token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0") and proc_state(entry) not in (None, "Z"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def pytest_configure(config):
    # Before any thread or server starts: keep every TF server of the session reachable
    # from loopback only (TensorFlow binds all interfaces).
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()


def _slow(item) -> bool:
    return item.get_closest_marker("cluster") is not None


def pytest_collection_modifyitems(items):
    # A test that uses a local cluster (or the launcher's `job` of real TF servers)
    # belongs to the slow tier, whatever its file.
    for item in items:
        if {"cluster", "cluster_2ps", "job"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
    # The fast tier runs first (a stable sort keeps each tier's file order), so a broken
    # edit shows in minutes and the cluster tier is not started on it (below).
    items.sort(key=_slow)


_fast_failures = []


def pytest_runtest_logreport(report):
    if report.failed and "cluster" not in report.keywords:
        _fast_failures.append(report.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # Stop before the first cluster test when the fast tier failed: its ten minutes of
    # real clusters would only repeat what is already red.
    if _fast_failures and _slow(item):
        item.session.shouldstop = (f"{len(_fast_failures)} fast-tier test(s) failed; the "
                                   f"cluster tier was not run (first: {_fast_failures[0]})")
        return True
    return None


@pytest.fixture(scope="session")
def cluster():
    """PS and workers as separate processes on 127.0.0.1, stopped at session end."""
    from cluster_sim.local_cluster import LocalCluster
    with LocalCluster(num_workers=NUM_WORKERS, num_ps=1) as local:
        yield local


@pytest.fixture(scope="session")
def cluster_2ps():
    """Two PS tasks and two workers, the shape TensorFlow's own parameter-server tests
    build: variables are placed round-robin over the PS tasks and may be sharded.

    A process is the chief of one cluster for its whole life (TensorFlow cannot start a
    second server in it), so tests on this cluster run in a process of their own:
    ``tests/test_strategies/two_ps_suite.py``, run by ``tests/test_strategies/test_two_ps.py``."""
    from cluster_sim.local_cluster import LocalCluster
    with LocalCluster(num_workers=2, num_ps=2) as local:
        yield local
