"""Several PS tasks and sharded variables, on a real local cluster with 2 PS tasks.

Run by tests/test_strategies/test_two_ps.py in a process of its own: a process is the chief of one
cluster for its whole life, and the rest of the suite shares the 1-PS cluster.
Directly: ``python -m pytest tests/test_strategies/two_ps_suite.py``.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras
from tensorflow.python.distribute.sharded_variable import ShardedVariable

import ksync
from cluster_sim.workloads import compile_classifier, mlp
from strategies import KSyncStrategy
from strategies.checkpoint import PS_FAILURES, wait_for_ps

from test_drop_in import (DATA, TOKENS, check_bsp_equals_single_process, check_counters,
                          embedding_model, mlp_model, whole_weights)
from test_optimizers import check_trains

partitioners = tf.distribute.experimental.partitioners
POLICIES = [ksync.BSP(), ksync.ASP(), ksync.SSP(max_staleness=1), ksync.KSync(k=1),
            ksync.KAsync(k=2), ksync.BackupWorkers(backups=1),
            ksync.Adaptive(refresh_every=10)]


@pytest.mark.parametrize("make_partitioner", [
    lambda: None,
    lambda: partitioners.FixedShardsPartitioner(2),
    lambda: partitioners.MinSizePartitioner(min_shard_bytes=1024, max_shards=2),
    lambda: partitioners.MaxSizePartitioner(max_shard_bytes=8 * 1024),
], ids=["none", "fixed", "min-size", "max-size"])
def test_variables_are_placed_and_sharded_as_the_stock_strategy_does(cluster_2ps,
                                                                      make_partitioner):
    def layout(strategy):
        with strategy.scope():
            model = embedding_model()
        out = []
        for var in model.variables:
            shards = getattr(var, "variables", [var])
            out.append((var.name.split("/")[-1], tuple(var.shape),
                        [(tuple(s.shape), s.device) for s in shards]))
        return out

    stock = layout(tf.distribute.experimental.ParameterServerStrategy(
        cluster_2ps.resolver(), make_partitioner()))
    ours = layout(KSyncStrategy(cluster_2ps.resolver(), make_partitioner(),
                                policy=ksync.BSP()))
    assert ours == stock
    assert {d for _, _, shards in ours for _, d in shards} == {
        "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"}


# -- several PS tasks ------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_every_policy_trains_sharded_variables_on_two_ps_tasks(cluster_2ps, policy):
    strategy = KSyncStrategy(cluster_2ps.resolver(), partitioners.FixedShardsPartitioner(2),
                             policy=policy)
    with strategy.scope():
        model = compile_classifier(embedding_model(), keras.optimizers.SGD(0.5, momentum=0.5))
    assert isinstance(model.layers[0].embeddings, ShardedVariable)
    history = model.fit(keras.utils.experimental.DatasetCreator(TOKENS.dataset_fn(32)),
                        epochs=2, steps_per_epoch=60, verbose=0)
    t = strategy.telemetry()
    check_counters(t, 120)
    loss, accuracy = model.evaluate(TOKENS.test_dataset(), steps=1, verbose=0)
    assert np.isfinite(loss) and accuracy > 0.5, (policy, loss, accuracy)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.predict(TOKENS.test_dataset(), steps=1, verbose=0).shape == (
        len(TOKENS.y_test), 10)
    if isinstance(policy, ksync.BSP):
        assert t["dropped"] == 0 and t["staleness_histogram"][0] == 120


# -- checkpoints and a lost PS ---------------------------------------------------------
def test_model_checkpoint_restores_across_a_different_number_of_shards(cluster_2ps,
                                                                        tmp_path):
    path = str(tmp_path / "weights")

    def build(partitioner):
        strategy = KSyncStrategy(cluster_2ps.resolver(), partitioner, policy=ksync.BSP())
        with strategy.scope():
            model = compile_classifier(embedding_model(), keras.optimizers.SGD(0.5))
        return model

    model = build(partitioners.FixedShardsPartitioner(2))
    model.fit(keras.utils.experimental.DatasetCreator(TOKENS.dataset_fn(32)), epochs=1,
              steps_per_epoch=20, verbose=0,
              callbacks=[keras.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    saved = whole_weights(model)
    assert isinstance(model.layers[0].embeddings, ShardedVariable)
    restored = build(None)  # one shard per variable
    restored.load_weights(path)
    assert not isinstance(restored.layers[0].embeddings, ShardedVariable)
    for got, want in zip(whole_weights(restored), saved):
        np.testing.assert_array_equal(got, want)


@pytest.fixture
def restarts_ps(cluster_2ps):
    yield cluster_2ps
    for index in range(2):
        if not cluster_2ps.running("ps", index):
            cluster_2ps.restart("ps", index)
            wait_for_ps(cluster_2ps.resolver(), timeout_s=60)


@pytest.mark.parametrize("victim", [0, 1], ids=["rule-task", "shard-task"])
def test_a_lost_ps_task_is_reported_to_the_user_while_workers_wait(restarts_ps, victim):
    """Workers gated by BSP, one of them far slower than the other, then a PS task is
    killed: fit raises the stock parameter-server failure, the process lives on."""
    from cluster_sim.slowdown import SlowdownLayer
    local = restarts_ps
    strategy = KSyncStrategy(local.resolver(), partitioners.FixedShardsPartitioner(2),
                             policy=ksync.BSP())
    with strategy.scope():
        slowdown = SlowdownLayer(local.num_workers)
        model = compile_classifier(mlp(DATA.num_features, DATA.num_classes,
                                       slowdown=slowdown), keras.optimizers.SGD(0.1))
    slowdown.set_speeds([1.0, 0.05], us_per_sample=2000)  # worker 1: 1.3 s a step
    killer = threading.Timer(4.0, local.kill, args=("ps", victim))
    killer.start()
    with pytest.raises(PS_FAILURES):
        model.fit(keras.utils.experimental.DatasetCreator(DATA.dataset_fn(32)), epochs=1,
                  steps_per_epoch=10_000, verbose=0)
    killer.join()
    strategy.shutdown()


@pytest.mark.parametrize("steps_per_execution", [1, 10])
@pytest.mark.parametrize("make_model", [mlp_model, embedding_model], ids=["mlp", "embedding"])
def test_bsp_on_sharded_variables_equals_single_process_sgd(cluster_2ps, steps_per_execution,
                                                            make_model):
    """One version is one model: every shard applies every round, none half of one."""
    check_bsp_equals_single_process(cluster_2ps, partitioners.FixedShardsPartitioner(2),
                                    steps_per_execution, make_model)


def test_linear_scaling_on_sharded_variables_equals_one_process_at_the_scaled_rate(
        cluster_2ps):
    """lr_scaling="linear": every shard's part of a commit (sparse gradients of an
    Embedding too) applies the rate times K, several steps per scheduled function."""
    check_bsp_equals_single_process(
        cluster_2ps, partitioners.FixedShardsPartitioner(2), 10, embedding_model,
        lambda: keras.optimizers.SGD(0.2, momentum=0.5), lr_scaling="linear",
        make_reference_optimizer=lambda: keras.optimizers.SGD(0.2 * cluster_2ps.num_workers,
                                                              momentum=0.5))


# -- optimizers whose update has extras (weight decay, EMA) ---------------------------
@pytest.mark.parametrize("name, policy", [
    ("AdamW", ksync.BSP()), ("Adamax-ema", ksync.Adaptive(refresh_every=10)),
    ("Lion-weight_decay", ksync.ASP())], ids=["AdamW-BSP", "Adamax-ema-Adaptive",
                                              "Lion-weight_decay-ASP"])
def test_optimizers_with_extras_train_sharded_variables(cluster_2ps, name, policy):
    check_trains(cluster_2ps, name, policy, partitioners.FixedShardsPartitioner(2))


def test_bsp_with_adamw_and_ema_on_sharded_variables_equals_single_process(cluster_2ps):
    """Weight decay on every shard before the round's gradients, the EMA once every
    shard has applied them, once per version (sparse gradients of an Embedding too)."""
    check_bsp_equals_single_process(
        cluster_2ps, partitioners.FixedShardsPartitioner(2), 1, embedding_model,
        lambda: keras.optimizers.AdamW(0.01, weight_decay=0.5, use_ema=True,
                                       ema_momentum=0.5))


# -- the held-out ctr workload through the harness ---------------------------------------
def test_ctr_trains_through_the_harness_with_sharded_tables_and_sparse_pushes(
        cluster_2ps, monkeypatch):
    """A short `ctr` run (`cluster_sim.harness.run.run_arm`, scenario ``ctr_small``): its
    embedding tables are sharded over both PS tasks, their gradients cross to the PS
    as ``IndexedSlices`` (rows and values, never a dense table), the counters add up,
    and the evaluator's numpy twin evaluates the final weights as Keras does."""
    import strategies.ps_state as ps_state
    from cluster_sim import workloads
    from cluster_sim.harness.run import Arm, RunConfig, run_arm
    from cluster_sim.scenarios import load_scenario

    scenario = load_scenario("ctr_small")
    data = workloads.load("ctr", train_size=4000, test_size=1000)
    built, sent = [], []
    build_model, copy_to = workloads.build_model, ps_state._copy_to

    def recording_build(*args, **kwargs):
        built.append(build_model(*args, **kwargs))
        return built[-1]

    def recording_copy(grad, device):  # a pushed gradient on its way to its PS task
        sent.append((isinstance(grad, tf.IndexedSlices), tf.DeviceSpec.from_string(
            device).task))
        return copy_to(grad, device)

    monkeypatch.setattr(workloads, "build_model", recording_build)
    monkeypatch.setattr(ps_state, "_copy_to", recording_copy)
    config = RunConfig.from_scenario(scenario, max_pushes=40, check_evaluator=True)
    result = run_arm(cluster_2ps, Arm("BSP", "bsp"), scenario, seed=0, config=config,
                     data=data)

    (model,) = built
    tables = [layer.embeddings for layer in model.layers
              if isinstance(layer, keras.layers.Embedding)]
    assert len(tables) == data.layout.num_fields
    for table in tables:
        assert isinstance(table, ShardedVariable)
        assert {tf.DeviceSpec.from_string(s.device).task for s in table.variables} == {0, 1}
    # Every table shard's gradient is pushed sparse (8 tables x 2 shards a traced step),
    # to both tasks; only the MLP's gradients cross dense.
    sparse = [task for is_sparse, task in sent if is_sparse]
    assert sparse and len(sparse) % (2 * len(tables)) == 0 and set(sparse) == {0, 1}
    assert result["pushed"] == 40 and result["tta_s"] is None
    assert result["applied"] + result["dropped"] + result["pending"] == result["pushed"]
    assert result["dropped"] == 0 and result["version"] == 20
    check = result["evaluator"]["check"]
    assert check["numpy"]["loss"] == pytest.approx(check["keras"]["loss"], rel=1e-5)
    assert check["numpy"]["accuracy"] == pytest.approx(check["keras"]["accuracy"], abs=1e-6)
    # Trained: from about log 2 toward the constant guess's 0.56.
    assert result["curve"][-1]["loss"] < result["curve"][0]["loss"] - 0.02, result["curve"]


# -- Keras 3 models (strategies/keras3.py) ---------------------------------------------
@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.Adaptive(refresh_every=10)], ids=repr)
def test_keras3_client_trains_sharded_variables_on_two_ps_tasks(cluster_2ps, policy,
                                                                record_property):
    from test_keras3 import check_issue_client
    model = check_issue_client(cluster_2ps, partitioners.FixedShardsPartitioner(2), policy,
                               record_property)
    for var in model.weights:
        assert {s.device for s in var.value.variables} == {
            "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0"}


@pytest.mark.parametrize("model, make_partitioner", [
    ("embedding", lambda: partitioners.FixedShardsPartitioner(2)),
    # the kernel in 2 shards, the biases whole
    ("mlp", lambda: partitioners.MinSizePartitioner(min_shard_bytes=1024, max_shards=2)),
], ids=["embedding-fixed", "mlp-min-size"])
def test_keras3_bsp_on_sharded_variables_equals_single_process_sgd(cluster_2ps, model,
                                                                   make_partitioner):
    import test_keras3
    make_model = test_keras3.keras3_mlp if model == "mlp" else test_keras3.keras3_embedding
    test_keras3.check_bsp_equals_single_process(cluster_2ps, make_partitioner(), 1, make_model)


def test_keras3_checkpoints_written_on_two_shards_restore_on_one(cluster_2ps, tmp_path):
    """A `.keras` file and `ModelCheckpoint`'s weights, written from a model whose
    variables are sharded over both PS tasks, restore exactly into a model of whole
    variables, optimizer state (momentum, kept per shard) included: in this process
    alone, and under the strategy without a partitioner (which trains on from there)."""
    import keras as keras3
    from test_keras3 import LOSS, keras3_embedding
    strategy = KSyncStrategy(cluster_2ps.resolver(), partitioners.FixedShardsPartitioner(2),
                             policy=ksync.ASP())
    with strategy.scope():
        model = keras3_embedding()
        model.compile(keras3.optimizers.SGD(0.1, momentum=0.9), LOSS, metrics=["accuracy"])
    weights = str(tmp_path / "ckpt.weights.h5")
    model.fit(TOKENS.dataset_fn(16), epochs=2, steps_per_epoch=20, verbose=0,
              callbacks=[keras3.callbacks.ModelCheckpoint(weights, save_weights_only=True)])
    assert all(len(v.value.variables) == 2 for v in model.weights)
    saved = str(tmp_path / "model.keras")
    model.save(saved)
    want = model.predict(TOKENS.x_test, verbose=0)

    # After iterations and the learning rate: a momentum beside each shard.
    momentum = [v.numpy() for v in model.optimizer.variables[2:]]
    assert len(momentum) == 3 * 2  # each of the 3 weights in 2 shards

    local = keras3.models.load_model(saved)
    np.testing.assert_allclose(local.predict(TOKENS.x_test, verbose=0), want, atol=1e-6)
    assert int(local.optimizer.iterations.numpy()) == 40
    restored_momentum = [v.numpy() for v in local.optimizer.variables[2:]]
    assert len(restored_momentum) == 3 and np.abs(restored_momentum[0]).max() > 0
    joined = [np.concatenate(momentum[i:i + 2]) for i in range(0, 6, 2)]
    for mine, want_m in zip(restored_momentum, joined):
        np.testing.assert_allclose(mine, want_m, atol=1e-7)

    with strategy.scope():  # and back into 2 shards
        again = keras3.models.load_model(saved)
    for mine, want_m in zip([v.numpy() for v in again.optimizer.variables[2:]], momentum):
        np.testing.assert_allclose(mine, want_m, atol=1e-7)

    whole = KSyncStrategy(cluster_2ps.resolver(), policy=ksync.BSP())
    with whole.scope():
        restored = keras3_embedding(seed=7)
        restored.compile(keras3.optimizers.SGD(0.1, momentum=0.9), LOSS)
    restored.load_weights(weights)
    assert not any(isinstance(v.value, ShardedVariable) for v in restored.weights)
    np.testing.assert_allclose(restored.predict(TOKENS.x_test, verbose=0), want, atol=1e-6)
    with whole.scope():
        reloaded = keras3.models.load_model(saved)
    np.testing.assert_allclose(reloaded.predict(TOKENS.x_test, verbose=0), want, atol=1e-6)
    reloaded.fit(TOKENS.dataset_fn(16), epochs=1, steps_per_epoch=10, verbose=0)
    check_counters(whole.telemetry(), 10)
    assert int(reloaded.optimizer.iterations.numpy()) == 40 + 10  # restored, then counted
