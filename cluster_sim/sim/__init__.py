"""The discrete-event simulator: the product's policies on hundreds of simulated workers.

* `cluster_sim.sim.engine`: `Simulation` and `SimConfig` (the event loop, the PS through
  `ksync.UpdateState`, real gradients in event order);
* `cluster_sim.sim.speeds`: speed models (`SpeedModel`: how long a simulated step takes)
  and the network;
* `cluster_sim.sim.clock`: the event queue;
* `cluster_sim.sim.mirror`: `sim_config`, a harness run and its measured framework costs
  as a `SimConfig` (the one mapping; both configs extend
  `cluster_sim.scenarios.training.TrainingConfig`).

Its model is `cluster_sim.numpy_mlp.MLP` (a layer below: the harness evaluates with it too).

Imports nothing of the real-cluster harness (`cluster_sim.harness`); results have the
`cluster_sim.report.RunResult` shape, so one report renders both.
"""

from cluster_sim.sim.engine import SimConfig, Simulation, simulate

__all__ = ["SimConfig", "Simulation", "simulate"]
