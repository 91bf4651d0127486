"""What a newcomer meets first: a quiet start, every command listed, errors that say what
to do (issue 22)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ksync
from cluster_sim.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
IMPORT_TF = ("from strategies.launch_env import quiet_tensorflow; quiet_tensorflow(); "
             "import tensorflow as tf; print(int(tf.constant(1) + 1))")


def run(args, **env):
    """``python ARGS`` in the repository; ``env`` entries set to None are removed."""
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def test_tensorflow_starts_without_a_line_on_stderr_unless_verbose():
    quiet = run(["-c", IMPORT_TF], TF_CPP_MIN_LOG_LEVEL=None, KSYNC_VERBOSE=None)
    assert quiet.returncode == 0 and quiet.stdout == "2\n", quiet.stderr
    assert quiet.stderr == ""
    # --verbose / KSYNC_VERBOSE=1 keeps what TensorFlow says (on this machine, at least
    # its CUDA and oneDNN notices).
    loud = run(["-c", IMPORT_TF], TF_CPP_MIN_LOG_LEVEL=None, KSYNC_VERBOSE="1")
    assert loud.returncode == 0 and loud.stdout == "2\n"
    assert len(loud.stderr) >= len(quiet.stderr)


def test_help_lists_every_command_and_each_takes_verbose():
    out = run(["-m", "cluster_sim", "--help"]).stdout
    for command in ("demo", "simulate", "bench", "soak", "calibrate", "scale", "speeds", "report"):
        assert command in COMMANDS and f"    {command}" in out
    assert "--verbose" in run(["-m", "cluster_sim", "simulate", "--help"]).stdout


def test_demo_help_lists_every_builtin_scenario():
    from cluster_sim.scenarios import builtin_names
    out = " ".join(run(["-m", "cluster_sim", "demo", "--help"]).stdout.split())
    assert all(name in out for name in builtin_names()) and "slow3x" in out


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from cluster_sim.__main__ import build_parser
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"{name} {action.option_strings[0]}"
              for name, sub in commands.choices.items() for action in sub._actions
              if action.option_strings and not action.help]
    assert silent == []


def test_a_policy_without_its_required_argument_names_it_and_the_fix():
    with pytest.raises(ValueError, match=r'needs k.*ksync.get\("ksync", k=2\)'):
        ksync.get("ksync")
    with pytest.raises(ValueError, match=r'needs k.*"kasync:k=2"'):
        ksync.parse("kasync")
    with pytest.raises(ValueError, match="has no argument kk"):
        ksync.parse("ksync:kk=3")


def test_history_says_how_many_updates_an_epoch_made(cluster):
    import tf_keras as keras

    from cluster_sim.workloads import compile_classifier, digits, mlp
    from strategies import KSyncStrategy, KSyncTelemetryCallback
    data = digits(seed=0)
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.KSync(k=2))
    with strategy.scope():
        model = compile_classifier(mlp(data.num_features, data.num_classes),
                                   keras.optimizers.SGD(0.05))
    history = model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(16)),
                        epochs=2, steps_per_epoch=10, verbose=0,
                        callbacks=[KSyncTelemetryCallback(strategy)])
    assert history.history["ksync_pushes_per_epoch"] == [10, 10]
    updates = history.history["ksync_updates_per_epoch"]
    assert sum(updates) == strategy.telemetry()["version"], history.history
    # K = 2 gradients per update: at most 5 updates from 10 pushes, fewer when a late
    # worker's gradients are dropped, 6 when a round straddles the epochs.
    assert all(1 <= u <= 6 for u in updates), history.history
    strategy.shutdown()


def test_predictor_evaluate_names_a_missing_traces_directory_and_the_sample(tmp_path, capsys):
    from predictor import evaluate
    (tmp_path / "empty").mkdir()
    for traces, problem in ((tmp_path / "none", "is not a directory"),
                            (tmp_path / "empty", "has no CSV files")):
        with pytest.raises(SystemExit) as exit_:
            evaluate.main(["--traces", str(traces), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and problem in err and "predictor/data" in err, err


def test_docs_give_no_path_of_the_development_machine():
    for path in ("predictor/train_default.py", "predictor/data/README.md",
                 "predictor/evaluate.py"):
        assert "/work/" not in (ROOT / path).read_text(), path


def test_the_test_extra_has_what_the_launcher_tests_need():
    import configparser
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert "pyyaml" in config["options.extras_require"]["test"]


def test_readme_shows_how_to_run_your_own_script_on_one_machine():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run your own script on one machine", 1)[1].split("\n## ", 1)[0]
    assert "with ksync.LocalCluster(" in section and "ksync.KSyncStrategy(" in section
    imports = re.findall(r"^(?:import \S.*|from \S+ import .*)$", section, re.M)
    assert imports == ["import gc", "import ksync", "import tf_keras as keras"]  # one namespace
    assert "ksync_updates_per_epoch" in section


def test_simulate_bar_ends_as_reached_target(capsys):
    from cluster_sim.cli.simulate import run_policies
    from cluster_sim.sim import SimConfig
    [result] = run_policies(["bsp"], SimConfig(), progress=True)
    assert result["tta_s"] is not None
    assert "reached target 0.93" in capsys.readouterr().err


TEARDOWN = """
from strategies.launch_env import quiet_tensorflow; quiet_tensorflow()
import gc, tensorflow as tf
class Executor:  # raises as TensorFlow's does once the servers of a run have stopped
    def __del__(self):
        raise tf.errors.UnavailableError(None, None, "Socket closed")
class Other:
    def __del__(self):
        raise tf.errors.UnavailableError(None, None, "a real problem")
Executor(); Other(); gc.collect(); print("done")
"""


def test_an_executor_torn_down_after_its_servers_prints_nothing_other_errors_do():
    out = run(["-c", TEARDOWN], KSYNC_VERBOSE=None)
    assert out.returncode == 0 and out.stdout == "done\n"
    assert "Executor.__del__" not in out.stderr and "Socket closed" not in out.stderr
    assert "Other.__del__" in out.stderr and "a real problem" in out.stderr
