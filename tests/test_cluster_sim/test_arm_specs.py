"""Arm specs with their own learning rate (issue 46): the one parser, its errors, the
labels, and the rate reaching the simulator's update (tiny simulated runs)."""

import pytest

from cluster_sim.harness.arms import ArmSpec, parse_arm_specs
from ksync.learning_rate import LearningRate

BASE = LearningRate(0.02, momentum=0.9)


def label(text, n=8):
    return parse_arm_specs(text)[0].arm(n, BASE, batch_size=32)


def test_a_spec_names_the_rule_its_value_learning_rate_and_momentum():
    assert parse_arm_specs("bsp, kasync=2@0.01, asp@0.007/0.5, ksync=4@linear") == [
        ArmSpec("bsp"), ArmSpec("kasync", 2, 0.01), ArmSpec("asp", None, 0.007, 0.5),
        ArmSpec("ksync", 4, "linear")]
    # Rows say the step size they were given; an arm at the scenario's keeps its label.
    assert label("bsp").label == "BSP" and label("bsp").learning_rate is None
    assert label("bsp@0.4").label == "BSP @lr=0.4"
    arm = label("kasync=2@0.01/0")
    assert arm.label == "KAsync(k=2) @lr=0.01 m=0" and arm.policy == "kasync:k=2"
    assert arm.learning_rate == LearningRate(0.01, momentum=0.0)


def test_linear_scaling_multiplies_the_base_rate_by_the_gradients_of_an_update():
    bsp = label("bsp@linear", n=8)   # 8 gradients of 32 samples an update
    assert bsp.label == "BSP @linear=0.16"
    assert bsp.learning_rate == LearningRate(0.16, 0.9, start=0.02, warmup_pushes=512)
    assert label("kasync=4@linear").learning_rate.rate == pytest.approx(0.08)
    assert label("asp@linear").learning_rate == LearningRate(0.02, 0.9)  # one gradient
    assert label("bsp@linear", n=256).label == "BSP @linear=5.12"


@pytest.mark.parametrize("bad, problem, fix", [
    ("bsp@x", "learning rate after '@' must be a number > 0 or 'linear', got 'x'", "bsp@0.05"),
    ("bsp@-1", "got '-1'", "bsp@linear"),
    ("bsp@0", "got '0'", "bsp@0.05"),
    ("asp=2@0.1", "asp takes no value", "e.g. asp@0.1"),
    ("bsp@0.1/1.5", "momentum after '/' must be a number in [0, 1)", "bsp@0.1/0.5"),
    ("kasync=0@0.1", "integer >= 1", "kasync=4"),
    ("bsq@0.1", "unknown name 'bsq'", "choose from bsp"),
])
def test_a_malformed_spec_names_the_problem_and_the_fix(bad, problem, fix):
    with pytest.raises(ValueError) as err:
        parse_arm_specs(bad)
    assert f"arm {bad!r}" in str(err.value)
    assert problem in str(err.value) and fix in str(err.value)


def test_the_learning_rate_reaches_the_simulators_update():
    from cluster_sim.cli.bench_matrix import simulate_arm
    from cluster_sim.harness.config import RunConfig
    from cluster_sim.sim import SimConfig
    from cluster_sim.workloads import digits
    config = SimConfig(num_workers=4, max_pushes=40, eval_every=20, stop_at_target=False,
                       learning_rate=0.05)
    data = digits(seed=0)
    runs = {text: simulate_arm(label(text, 4), config, data, RunConfig())
            for text in ("bsp", "bsp@0.05", "bsp@0.5", "bsp@0.05/0")}
    loss = {text: r["curve"][-1]["loss"] for text, r in runs.items()}
    assert runs["bsp@0.5"]["policy"] == "BSP @lr=0.5"
    assert loss["bsp"] == loss["bsp@0.05"]  # the config's own rate, said or not
    assert loss["bsp@0.5"] != loss["bsp@0.05"] != loss["bsp@0.05/0"]
    # Same timing: only the step size differs.
    assert runs["bsp@0.5"]["wall_s"] == runs["bsp@0.05"]["wall_s"]


def test_the_warm_up_counts_pushes_in_the_simulator_as_in_the_harness():
    from cluster_sim.sim import SimConfig, Simulation
    lr = LearningRate(0.4, momentum=0.0, start=0.1, warmup_pushes=8)
    config = SimConfig(num_workers=4, max_pushes=8).with_step_size(lr)
    sim = Simulation("bsp", config)
    assert sim.step_size == lr and config.step_size == lr
    assert [lr.at(p) for p in (0, 4, 8, 100)] == [0.1, 0.25, 0.4, 0.4]
    with pytest.raises(ValueError, match="momentum must be in"):
        SimConfig(momentum=1.0).check()


def test_simulate_takes_arm_specs_and_labels_the_rows(tmp_path, capsys):
    import json

    from cluster_sim.__main__ import main
    assert main(["simulate", "--workers", "4", "--arms", "bsp@0.2,bsp@0.02", "--max-pushes",
                 "40", "--eval-every", "20", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "results.json").read_text())
    assert [p["policy"] for p in out["policies"]] == ["BSP @lr=0.2", "BSP @lr=0.02"]
    assert main(["simulate", "--arms", "bsp@x", "--out", str(tmp_path)]) == 2
    assert "the learning rate after '@'" in capsys.readouterr().err
