"""The full optimizer matrix, on demand: every optimizer of `test_optimizers.OPTIMIZERS`
under BSP, ASP and Adaptive, on a cluster of its own with 1 PS task (3 workers) or 2
(2 workers, variables sharded over both). The suite runs a slice of it
(tests/test_strategies/test_optimizers.py, tests/test_strategies/two_ps_suite.py); this takes a few minutes a shape:

    python -m pytest -q tests/test_strategies/optimizer_matrix.py                    # 1 PS task
    KSYNC_MATRIX_PS=2 python -m pytest -q tests/test_strategies/optimizer_matrix.py  # 2 PS tasks

Each optimizer is first fitted with the stock `ParameterServerStrategy` (asynchronous,
`STEPS` steps, one update each); every ksync policy then trains to as many model updates
(a rule averaging K gradients takes K steps an update) and must end with a held-out loss
ratio (after / before) within `SLACK` of the stock strategy's. Where the stock strategy
does not train an optimizer (above `BOUND`), ksync's ASP arm is held only to exact push
counts. Run with ``-s`` for the table of both.

A process is the chief of one cluster for its whole life: one shape per run.
"""

import os

import pytest
import tensorflow as tf
import tf_keras as keras

import ksync
from strategies import KSyncStrategy

from test_drop_in import DATA, check_counters, mlp_model
from test_optimizers import BOUND, LOSS, OPTIMIZERS, check_trains, fit_loss_ratio

POLICIES = {"BSP": ksync.BSP, "ASP": ksync.ASP, "Adaptive": ksync.Adaptive}
#: how much higher than the stock strategy's ksync's loss ratio (after / before) may end:
#: two short asynchronous fits of the same optimizer differ by the order of their pushes.
SLACK = 0.1
STEPS = 30  # the stock strategy's steps, one update each
RATIOS = {}  # optimizer -> {"stock": ratio, policy: ratio}


@pytest.fixture(scope="module")
def shape():
    """(cluster, partitioner) of the shape asked for."""
    from cluster_sim.local_cluster import LocalCluster
    num_ps = int(os.environ.get("KSYNC_MATRIX_PS", "1"))
    partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(
        num_ps) if num_ps > 1 else None
    with LocalCluster(num_workers=3 if num_ps == 1 else 2, num_ps=num_ps) as local:
        yield local, partitioner
        print(f"\nheld-out loss after / before, {num_ps} PS task(s):")
        print(f"{'optimizer':30}" + "".join(f"{c:>10}" for c in ("stock", *POLICIES)))
        for name, got in RATIOS.items():
            print(f"{name:30}" + "".join(f"{got.get(c, float('nan')):10.3f}"
                                          for c in ("stock", *POLICIES)))


def stock_ratio(local, partitioner, name):
    """The stock strategy's loss ratio for ``name``, fitted once per optimizer."""
    got = RATIOS.setdefault(name, {})
    if "stock" not in got:
        got["stock"], _ = fit_loss_ratio(tf.distribute.experimental.ParameterServerStrategy(
            local.resolver(), partitioner), name, STEPS)
    return got["stock"]


@pytest.mark.cluster
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_matrix(shape, name, policy):
    local, partitioner = shape
    if name == "Nadam" and policy != "ASP":
        # Refused at the first step under a rule that aggregates (see test_optimizers).
        strategy = KSyncStrategy(local.resolver(), partitioner, policy=POLICIES[policy]())
        with strategy.scope():
            model = mlp_model()
            model.compile(OPTIMIZERS[name][0](), LOSS)
        with pytest.raises(ValueError, match="Nadam"):
            model.fit(keras.utils.experimental.DatasetCreator(DATA.dataset_fn(32)),
                      epochs=1, steps_per_epoch=3, verbose=0)
        return
    stock = stock_ratio(local, partitioner, name)
    if policy == "ASP" and not stock < BOUND[name]:
        # The stock strategy does not train it either (lock-free updates of an optimizer
        # that divides by a second moment, docs/optimizers.md): no loss to match, but
        # every push must still be counted and applied once.
        strategy = KSyncStrategy(local.resolver(), partitioner, policy=POLICIES[policy]())
        RATIOS[name][policy], taken = fit_loss_ratio(strategy, name, STEPS)
        check_counters(strategy.telemetry(), taken)
        return
    RATIOS[name][policy] = check_trains(local, name, POLICIES[policy](), partitioner, STEPS,
                                        updates=STEPS, bound=stock + SLACK)
