"""The real-cluster harness: policies on local TensorFlow processes under a scenario.

* `cluster_sim.harness.run`: `run_arm` (one arm of a comparison on a `LocalCluster`),
  `window_metrics`;
* `cluster_sim.harness.config`: `RunConfig` (the shared
  `cluster_sim.scenarios.training.TrainingConfig` and the harness's own settings), `Arm`,
  `ARMS`, `parse_arms`, `targets`, `load_data` (no TensorFlow: what a run is);
* `cluster_sim.harness.evaluator`: `BackgroundEvaluator`, validation beside training;
* `cluster_sim.harness.player`: `ScenarioPlayer`, which plays a scenario's speeds and
  events during a run;
* `cluster_sim.harness.signals`: `DutyCycler` and `Signaller`, which stop and continue
  worker processes through the helper program `cluster_sim.harness.signal_helper`.

The cluster itself, the in-graph slowdown and the workloads keep their stable paths
`cluster_sim.local_cluster`, `cluster_sim.slowdown` and `cluster_sim.workloads`. This
file imports nothing, so the helper program starts without loading TensorFlow.
"""
