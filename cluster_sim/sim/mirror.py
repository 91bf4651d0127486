"""The simulator's twin of a harness run: `sim_config` maps a real run's settings and the
measured framework costs onto a `SimConfig`, the one mapping every command that
simulates a harness run uses (``calibrate``, ``bench policies --simulate``,
``bench ps-scaling``).

The training settings pass over whole (`cluster_sim.scenarios.training.TrainingConfig`:
both configs extend it); the rest of the twin says how the harness's framework, PS and
evaluator behave.

Example:

>>> from cluster_sim.scenarios import load_scenario
>>> from cluster_sim.scenarios.training import TrainingConfig
>>> costs = {"chunk_overhead_s": 1.0, "step_overhead_s": 0.01, "read_overhead_s": 0.01,
...          "gate_latency_s": 0.0}
>>> twin = sim_config(costs, load_scenario("static"), TrainingConfig(allocate_every=5))
>>> twin.allocate_every, twin.start_overhead_s, twin.step_jitter, twin.eval_relative_gap
(5, 1.0, 0.1, 0.0)
"""

from cluster_sim.scenarios.training import targets
from cluster_sim.sim.engine import SimConfig

__all__ = ["HARNESS_STEP_JITTER", "sim_config"]

#: sigma of the lognormal spread of a simulated step's compute that stands for the real
#: harness's: with it the simulated K-async K = 2 runs of the 8-worker `static` benchmark
#: have the real runs' staleness (mean 3.3 against 3.0 real, no lockstep at 0) and time
#: to target (-4 % against the real median; 0 spread gave -27 %).
HARNESS_STEP_JITTER = 0.1


def sim_config(costs: dict, scenario, run_config, data=None) -> SimConfig:
    """The harness's run of ``scenario`` with settings ``run_config`` (a
    `cluster_sim.harness.config.RunConfig`, or any `TrainingConfig`: its training
    settings pass over whole, its ``eval_relative_gap`` when it has one) on workload
    ``data`` (whose target the harness would take: `targets`), with the probed framework
    ``costs`` (``cluster_sim.cli.calibrate.probe``, and the PS costs of ``calibrate
    --ps-probe`` when measured), as a `SimConfig`."""
    goal = targets(run_config, data)
    return SimConfig(
        **dict(run_config.training(), hidden=tuple(run_config.hidden),
               target_accuracy=goal["target_accuracy"], target_loss=goal["target_loss"]),
        num_workers=scenario.num_workers, scenario=scenario, num_ps=scenario.num_ps,
        # The PS's queue and the network (`cluster_sim.sim.ps`; free unless the costs
        # were measured by --ps-probe).
        ps_service_s=costs.get("ps_push_s", 0.0),
        ps_push_s_per_byte=costs.get("ps_push_s_per_byte", 0.0),
        ps_apply_s=costs.get("ps_apply_s", 0.0),
        ps_apply_s_per_byte=costs.get("ps_apply_s_per_byte", 0.0),
        bandwidth_gbps=costs.get("network_gbps"), latency_s=costs.get("network_latency_s", 0.0),
        # The harness evaluates beside training, at most this much of the run apart.
        eval_every=scenario.num_workers,
        eval_relative_gap=getattr(run_config, "eval_relative_gap", 0.0),
        start_overhead_s=costs["chunk_overhead_s"], step_overhead_s=costs["step_overhead_s"],
        read_overhead_s=costs["read_overhead_s"], gate_latency_s=costs["gate_latency_s"],
        # The harness's sleep is a layer inside the step, and nothing orders the step's
        # reads of the parameters after it: TensorFlow runs them as the step starts, so
        # the whole step is exposed to staleness (measured: the real K-async runs' mean
        # staleness is 0.84 of the whole-step prediction), as on an accelerator.
        input_before_read=False, step_jitter=HARNESS_STEP_JITTER,
        # Simulate on past the target so the time to each real run's update count is known.
        stop_at_target=False)
