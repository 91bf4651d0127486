"""Old path of `cluster_sim.harness.signals.Signaller`, kept only while tests/test_faults.py
imports it from here (that file belongs to another change); remove it with that import."""

from cluster_sim.harness.signals import Signaller

__all__ = ["Signaller"]
