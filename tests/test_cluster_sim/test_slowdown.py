"""The injected delay lasts what the scenario asks, not a multiple of it."""

import time

import pytest
import tensorflow as tf

from cluster_sim.slowdown import per_sample_delays_us
from strategies.ps_state import sleep_us


def test_sleep_lasts_the_requested_time_once():
    sleep = tf.function(sleep_us)
    sleep(tf.constant(1000, tf.int64))  # trace outside the timing
    start = time.perf_counter()
    sleep(tf.constant(1_000_000, tf.int64))
    elapsed = time.perf_counter() - start
    # A sleep that ran once per element request took twice the time asked here; the
    # upper bound leaves a loaded machine half a second to wake the thread.
    assert 0.99 < elapsed < 1.5, elapsed


def test_per_sample_delays_scale_with_slowness():
    assert per_sample_delays_us(300, [1.0, 0.5, 0.25, 0]) == [300, 600, 1200, 0]
    with pytest.raises(ValueError, match=">= 0"):
        per_sample_delays_us(300, [1.0, -1])
