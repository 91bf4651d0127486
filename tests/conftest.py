"""Shared fixtures: one real local TensorFlow cluster for the whole session."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

NUM_WORKERS = 3


def pytest_configure(config):
    # Before any thread or server starts: keep every TF server of the session reachable
    # from loopback only (TensorFlow binds all interfaces).
    from cluster_sim.netns import isolate_loopback
    isolate_loopback()


@pytest.fixture(scope="session")
def cluster():
    """PS and workers as separate processes on 127.0.0.1, stopped at session end."""
    from cluster_sim.local_cluster import LocalCluster
    with LocalCluster(num_workers=NUM_WORKERS, num_ps=1) as local:
        yield local
