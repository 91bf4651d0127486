"""The soak script's pure parts: its fault schedule and its accuracy measure."""

import pytest

from cluster_sim.__main__ import main
from cluster_sim.cli.soak import fault_events, plateau_accuracy


def test_fault_schedule_pauses_each_worker_then_kills_each():
    events = fault_events(2, 600, 120, 20, 30)
    assert [(e["action"], e["worker"], e["at_s"]) for e in events] == [
        ("pause", 0, 120.0), ("pause", 1, 240.0), ("kill", 0, 360.0), ("kill", 1, 480.0)]
    assert events[2]["restart_at_s"] == 390.0 and events[0]["duration_s"] == 20


def test_fault_schedule_refuses_faults_longer_than_their_spacing():
    with pytest.raises(ValueError, match="raise --fault-every-s"):
        fault_events(4, 600, 30, 30, 10)


def test_plateau_accuracy_averages_the_last_evaluations():
    run = {"curve": [{"accuracy": a} for a in (0.2, 0.9, 0.95, 1.0)]}
    assert plateau_accuracy(run, 3) == pytest.approx(0.95)
    assert plateau_accuracy(run, 10) == pytest.approx(0.7625)


def test_bad_arguments_exit_2_naming_the_option(capsys):
    assert main(["soak", "--last-evals", "0"]) == 2
    assert "--last-evals must be >= 1" in capsys.readouterr().err
