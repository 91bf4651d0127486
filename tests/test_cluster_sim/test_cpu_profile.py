"""CPU time by thread (`cluster_sim.cpu_profile`): read from /proc, no cluster."""

import threading
import time

from cluster_sim import cpu_profile


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_busy_thread_is_charged_to_its_part():
    before = cpu_profile.chief_parts()
    # Measured while the thread lives: an ended thread takes its time with it.
    done = threading.Event()
    spinner = threading.Thread(target=lambda: (_spin(0.3), done.wait()),
                               name="ksync-test-spin")
    spinner.start()
    time.sleep(0.05)
    while spinner.is_alive() and not _spent(before, "ksync") >= 0.25:
        time.sleep(0.05)
    spent = _spent(before, "ksync")
    done.set()
    spinner.join(timeout=30)
    assert 0.25 <= spent < 1.0, spent
    _spin(0.2)
    assert _spent(before, "dispatch") >= 0.15


def _spent(before, part):
    return cpu_profile.chief_parts()[part] - before[part]


def test_thread_seconds_names_the_threads_of_a_process():
    import os
    threads = cpu_profile.thread_seconds(os.getpid())
    assert threading.get_native_id() in threads
    assert cpu_profile.thread_seconds(2 ** 22 + 12345) == {}  # no such process
