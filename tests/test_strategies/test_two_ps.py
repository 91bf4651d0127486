"""Runs tests/test_strategies/two_ps_suite.py (2 PS tasks, sharded variables) in a process of its own."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.cluster
def test_two_ps_suite():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         os.path.join(HERE, "two_ps_suite.py")],
        cwd=os.path.dirname(HERE), capture_output=True, text=True, timeout=1200)
    summary = [line for line in proc.stdout.splitlines()
               if line.startswith(("FAILED", "ERROR", "E ")) or " passed" in line
               or " failed" in line]
    assert proc.returncode == 0, "\n".join(summary[-40:]) or proc.stderr[-4000:]
    assert " passed" in summary[-1], summary[-1:]
