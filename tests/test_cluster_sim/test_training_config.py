"""One training configuration for the harness and the simulator (issue 48): one set of
defaults, the strategy's allocation period, and one mapping of a harness run onto the
simulator."""

import dataclasses
import inspect

from cluster_sim.harness.config import RunConfig
from cluster_sim.scenarios import Scenario, load_scenario
from cluster_sim.scenarios.training import TrainingConfig
from cluster_sim.sim import SimConfig
from cluster_sim.sim.mirror import sim_config

COSTS = {"chunk_overhead_s": 2.0, "step_overhead_s": 0.01, "read_overhead_s": 0.02,
         "gate_latency_s": 0.003, "ps_push_s": 1e-3, "network_gbps": 5.0}


def test_the_harness_and_the_simulator_share_every_training_default():
    shared = TrainingConfig.training_fields()
    assert {"batch_size", "learning_rate", "momentum", "hidden", "target_accuracy",
            "target_loss", "max_pushes", "max_updates", "allocate_every", "seed"} <= set(shared)
    assert RunConfig().training() == SimConfig().training() == TrainingConfig().training()
    # Neither side declares a training field of its own again (a second default).
    for side in (RunConfig, SimConfig):
        assert not set(shared) & set(side.__dict__.get("__annotations__", {})), side
    # A scenario file that leaves them out gets the same defaults.
    bare = Scenario("bare")
    assert {f: getattr(bare, f) for f in shared if hasattr(bare, f)} == {
        f: v for f, v in TrainingConfig().training().items() if hasattr(bare, f)}


def test_allocate_every_is_the_strategys_own_default():
    import ksync
    from strategies.ksync_strategy import KSyncStrategy
    for product in (KSyncStrategy.__init__, ksync.RuleController.__init__):
        assert inspect.signature(product).parameters["allocate_every"].default == \
            TrainingConfig.allocate_every == 20


def test_a_harness_run_maps_onto_the_simulator_whole():
    scenario = load_scenario("bench/static")
    run = RunConfig.from_scenario(scenario, allocate_every=7, seed=5, max_updates=90,
                                  target_loss=0.4, learning_rate=0.3, momentum=0.5)
    twin = sim_config(COSTS, scenario, run)
    assert twin.training() == run.training()
    assert (twin.num_workers, twin.eval_relative_gap, twin.start_overhead_s,
            twin.ps_service_s, twin.bandwidth_gbps) == (8, run.eval_relative_gap, 2.0, 1e-3, 5.0)
    # The workload's target when the run names none (teacher's loss and accuracy), as
    # the harness takes it (`targets`).
    from cluster_sim.harness.config import load_data, targets
    plain = RunConfig.from_scenario(scenario)
    data = load_data(scenario)
    goal = sim_config(COSTS, scenario, plain, data)
    assert plain.target_loss is None and goal.target_loss is not None
    assert dataclasses.replace(plain, **targets(plain, data)).training() == goal.training()
