"""The lab: evaluates the product (`ksync`, `strategies`, `predictor`) on real local
clusters and in a discrete-event simulator, under the same scenarios, and reports both
the same way. ``python -m cluster_sim --help`` lists the commands.

Layers, each importing only those below it (tests/test_import_graph.py checks):

1. `cluster_sim.scenarios` (what slows whom, when) and `cluster_sim.report` (the
   `RunResult` schema, tables, the report); `cluster_sim.workloads`, `cluster_sim.netns`.
2. `cluster_sim.sim` (the discrete-event simulator) and `cluster_sim.harness` (runs on a
   real `cluster_sim.local_cluster.LocalCluster` with `cluster_sim.slowdown`), which
   never import each other.
3. `cluster_sim.cli`: the commands.

This file imports nothing, so helper programs such as
``python -m cluster_sim.harness.signal_helper`` start without loading TensorFlow.
"""
