"""The black-box slowdown: a real process duty-cycled by SIGSTOP/SIGCONT from outside."""

import subprocess
import sys
import threading
import time

import pytest

from cluster_sim.harness.signals import DutyCycler
from conftest import proc_state

# Prints the time after each short sleep: its rate of lines is its share of wall time.
TICKER = "import time\nwhile True:\n    time.sleep(0.004)\n    print(time.monotonic(), flush=True)\n"


@pytest.fixture
def ticker():
    proc = subprocess.Popen([sys.executable, "-c", TICKER], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    ticks = []
    reader = threading.Thread(target=lambda: [ticks.append(float(x)) for x in proc.stdout],
                              daemon=True)
    reader.start()
    yield proc, ticks
    proc.kill()
    proc.wait()


def rate(ticks, t0, t1):
    return sum(t0 <= t < t1 for t in ticks) / (t1 - t0)


def state_becomes(pid, states, timeout_s=5.0):
    """Whether ``pid``'s state is one of ``states`` within ``timeout_s`` (a loaded
    machine may run the cycler's thread late)."""
    deadline = time.monotonic() + timeout_s
    while proc_state(pid) not in states:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_duty_cycle_gives_the_process_its_share_and_close_leaves_it_running(ticker,
                                                                          record_property):
    proc, ticks = ticker
    cycler = DutyCycler([proc.pid], period_s=0.1)
    try:
        time.sleep(0.5)  # the interpreter starts
        t0 = time.monotonic()
        time.sleep(1.5)
        t1 = time.monotonic()
        cycler.set_speeds([0.4])
        time.sleep(2.0)
        t2 = time.monotonic()
        cycler.set_speeds([0.0])
        assert state_becomes(proc.pid, ("T",)), proc_state(proc.pid)
    finally:
        cycler.close()
    assert state_becomes(proc.pid, ("S", "R")), proc_state(proc.pid)
    # Speed 0.4: about 0.4 of the free rate (0.40 on an idle run, 0.51 and 0.09 on runs
    # at load averages 10-20 and 30). The bounds only say "clearly slowed, not stopped":
    # signal latency and the load's swings between the two phases move it.
    share = rate(ticks, t1 + 0.2, t2) / rate(ticks, t0, t1)
    record_property("share_at_speed_0.4", share)
    assert 0.03 < share < 0.75, share


def test_bad_speeds_and_period_are_refused():
    with pytest.raises(ValueError, match="period_s"):
        DutyCycler([1], period_s=0)
    cycler = DutyCycler([999999999])  # no such process group: signals are skipped
    try:
        with pytest.raises(ValueError, match="need 1 speeds"):
            cycler.set_speeds([0.5, 0.5])
        with pytest.raises(ValueError):
            cycler.set_speeds([-1.0])
    finally:
        cycler.close()
