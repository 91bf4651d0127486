"""Drop-in fidelity: the stock constructor and its errors, and several steps inside one
scheduled function, on the session's real local cluster. Several PS tasks with sharded
variables: tests/test_strategies/two_ps_suite.py (a cluster of its own, in a process of its own)."""

import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import ksync
from cluster_sim.workloads import Dataset, digits, mlp
from strategies import KSyncStrategy

DATA = digits()
partitioners = tf.distribute.experimental.partitioners


def resolver(spec):
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec), task_type="chief", task_id=0, rpc_layer="grpc")


def token_data() -> Dataset:
    """Digits as 64 token ids per image (position x intensity): an Embedding input whose
    gradient is sparse (`tf.IndexedSlices`)."""
    def ids(x):
        return (np.rint(x * 16).astype("int64") + 17 * np.arange(64)).astype("int64")
    return Dataset(ids(DATA.x_train), DATA.y_train, ids(DATA.x_test), DATA.y_test)


TOKENS = token_data()
VOCAB = 17 * 64


def embedding_model(seed=0, lib=keras):
    """Embedding, Flatten, Dense over `TOKENS`, in ``lib`` (tf_keras, or Keras 3)."""
    lib.utils.set_random_seed(seed)
    return lib.Sequential([lib.layers.Input((64,), dtype="int64"),
                           lib.layers.Embedding(VOCAB, 8),
                           lib.layers.Flatten(),
                           lib.layers.Dense(10)])


def whole_weights(model):
    """The model's weights with each sharded variable's shards joined into one array."""
    out, seen = [], set()
    for var in model.weights:
        container = getattr(var, "_sharded_container", None)
        if container is None:
            out.append(var.numpy())
        elif id(container()) not in seen:
            seen.add(id(container()))
            out.append(np.concatenate([s.numpy() for s in container().variables]))
    return out


def check_counters(t, pushes):
    assert t["applied"] + t["dropped"] + t["pending"] == t["pushed"] == pushes
    assert sum(w["pushes"] for w in t["workers"]) == pushes
    assert sum(t["staleness_histogram"]) == pushes


# -- the stock constructor's arguments and errors ------------------------------------
@pytest.mark.parametrize("spec, message", [
    ({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "There must be at least one ps."),
    ({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "There must be at least one worker."),
])
def test_invalid_cluster_gets_the_stock_strategys_error_first(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tf.distribute.experimental.ParameterServerStrategy(resolver(spec))
    # K = 5 would fail ksync's own check on any of these clusters: the stock one wins.
    with pytest.raises(ValueError, match=re.escape(message)):
        KSyncStrategy(resolver(spec), policy=ksync.KSync(k=5))


def test_a_policy_in_the_partitioner_position_says_to_pass_it_by_keyword():
    spec = {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:3"]}
    with pytest.raises(TypeError, match=re.escape("policy=ksync.BSP()")):
        KSyncStrategy(resolver(spec), ksync.BSP())
    with pytest.raises(TypeError, match="positional arguments"):
        KSyncStrategy(resolver(spec), None, ksync.BSP())


def mlp_model():
    return mlp(DATA.num_features, DATA.num_classes)


@pytest.mark.parametrize("steps_per_execution", [1, 10])
@pytest.mark.parametrize("make_model", [mlp_model, embedding_model], ids=["mlp", "embedding"])
def test_bsp_equals_single_process_sgd_on_the_concatenated_batches(
        cluster, steps_per_execution, make_model):
    check_bsp_equals_single_process(cluster, None, steps_per_execution, make_model)


def check_bsp_equals_single_process(local, partitioner, steps_per_execution, make_model,
                                    make_optimizer=lambda: keras.optimizers.SGD(0.5),
                                    lr_scaling=None, make_reference_optimizer=None):
    """Every round: one batch of every worker, read at the same version, on every
    shard; with several steps per scheduled function too. The reference trains in this
    process on the round's batches concatenated, with the same optimizer (a new one from
    ``make_optimizer``, or ``make_reference_optimizer``: the scaled rate of
    ``lr_scaling``): one update per round, its ``iterations`` set to the pushes
    made so far, as the PS's optimizer sees them (`optimizer.iterations` counts pushes:
    Adam's bias correction follows it). Returns the strategy and the trained model."""
    workers, batch, rounds = local.num_workers, 16, 10
    data = DATA if make_model is not embedding_model else TOKENS
    strategy = KSyncStrategy(local.resolver(), partitioner, policy=ksync.BSP(),
                             lr_scaling=lr_scaling)
    with strategy.scope():
        model = make_model()
        model.compile(make_optimizer(), keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), steps_per_execution=steps_per_execution)
    initial = whole_weights(model)
    model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(
        batch, num_shards=workers, shuffle_seed=None)), epochs=1,
        steps_per_epoch=rounds * workers, verbose=0)
    t = strategy.telemetry()
    assert (t["version"], t["applied"], t["dropped"]) == (rounds, rounds * workers, 0)
    assert int(model.optimizer.iterations.numpy()) == t["pushed"]

    reference = make_model()
    reference.compile((make_reference_optimizer or make_optimizer)(),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    reference.set_weights(initial)
    for r in range(rounds):
        reference.optimizer.iterations.assign(workers * (r + 1))
        idx = [w + workers * (r * batch + i) for w in range(workers) for i in range(batch)]
        reference.train_on_batch(data.x_train[idx], data.y_train[idx])
    # As fit ends: with EMA, the model takes its averages.
    if hasattr(reference.optimizer, "finalize_variable_values"):  # not a legacy one
        reference.optimizer.finalize_variable_values(reference.trainable_variables)
    got = whole_weights(model)
    for mine, want in zip(got, reference.get_weights()):
        np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got[0], initial[0])
    return strategy, model


# -- several steps inside one scheduled function -------------------------------------
# AdaSync with K0 = every worker and no loss reported: it keeps BSP, but through the
# adaptive path (observations, the monitor, a rule that could change at any time).
@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.AdaSync(k0=3, refresh_every=10)],
                         ids=["BSP", "AdaSync"])
def test_steps_per_execution_keeps_a_synchronous_rule_exact(cluster, policy, record_property):
    """The issue's client: written for the stock strategy, steps_per_execution=5, a
    batched tf.data.Dataset given to fit, 6 x 100 steps, validation every epoch (at 6 x 50
    AdaSync once ended at 0.906, too near the 0.9 a machine must pass)."""
    strategy = KSyncStrategy(cluster.resolver(), policy=policy)
    with strategy.scope():
        model = mlp(DATA.num_features, DATA.num_classes)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=5)
    train = tf.data.Dataset.from_tensor_slices((DATA.x_train, DATA.y_train)).shuffle(
        2000, seed=1).repeat().batch(32)
    history = model.fit(train, epochs=6, steps_per_epoch=100, verbose=0,
                        validation_data=DATA.test_dataset(), validation_steps=1)
    t = strategy.telemetry()
    check_counters(t, 600)
    assert t["dropped"] == 0 and t["pending"] == 0
    assert t["staleness_histogram"][0] == 600  # every gradient read the version it joined
    record_property("val_accuracy", history.history["val_accuracy"][-1])
    assert history.history["val_accuracy"][-1] >= 0.9
    assert model.predict(DATA.test_dataset(), steps=1, verbose=0).shape == (
        len(DATA.y_test), 10)


def test_custom_loop_running_several_steps_per_function(cluster):
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.BSP())
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = mlp(DATA.num_features, DATA.num_classes)
        optimizer = keras.optimizers.SGD(0.1)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=keras.losses.Reduction.NONE)
    iterator = iter(coordinator.create_per_worker_dataset(DATA.dataset_fn(32)))

    def replica_fn(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    @tf.function
    def three_steps(it):  # unrolled: three strategy.run calls in one function
        losses = [strategy.run(replica_fn, args=(next(it),)) for _ in range(3)]
        return tf.add_n(losses) / 3

    @tf.function
    def loop_steps(it):
        total = tf.constant(0.0)
        for _ in tf.range(4):
            total += strategy.run(replica_fn, args=(next(it),))
        return total / 4

    losses = [coordinator.schedule(three_steps, args=(iterator,)) for _ in range(10)]
    losses += [coordinator.schedule(loop_steps, args=(iterator,)) for _ in range(6)]
    coordinator.join()
    assert losses[-1].fetch() < losses[0].fetch()
    t = strategy.telemetry()
    check_counters(t, 10 * 3 + 6 * 4)
    assert t["dropped"] == 0 and t["staleness_histogram"][0] == t["pushed"]




def test_every_parameter_read_of_a_step_waits_for_its_version_read(cluster):
    """The version a gradient is charged from is read before any parameter of its step
    (else its staleness could be under-counted), and the order binds the reads, which
    run on the PS, not the step's other ops on the worker."""
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.ASP())
    with strategy.scope():
        model = mlp(DATA.num_features, DATA.num_classes)
        optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def step(x, y):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                    y, model(x, training=True), from_logits=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                          model.trainable_variables))
            return loss
        return strategy.run(replica_fn, args=(x, y))

    graph = step.get_concrete_function(tf.TensorSpec([None, DATA.num_features]),
                                       tf.TensorSpec([None], tf.int64)).graph
    inside = {id(external): internal.op for external, internal in graph.captures}
    params = {inside[id(v.handle)] for v in model.trainable_variables}
    counters = inside[id(strategy._state.counter_vec.handle)]  # pylint: disable=protected-access

    def reads_counters(op, depth=3):
        return op is counters or depth > 0 and any(
            reads_counters(t.op, depth - 1) for t in op.inputs)

    param_reads = [op for op in graph.get_operations()
                   if op.type == "ReadVariableOp" and op.inputs[0].op in params]
    assert len(param_reads) >= len(model.trainable_variables)
    for op in param_reads:
        assert any(reads_counters(c) for c in op.control_inputs), op.name
    others = [op for op in graph.get_operations() if op.type in ("MatMul", "BiasAdd")]
    assert others and not any(reads_counters(c) for op in others for c in op.control_inputs)


def test_bsp_gate_reads_the_ps_about_once_a_round_and_stays_exact(cluster, record_property):
    """One step per scheduled function: the chief knows from the finished steps whether
    a worker's round can be full yet and when every worker has pushed into it, so it
    reads the PS's gate once in several rounds (3 steps each here) instead of once a
    step (before) or once a round (before the rounds were counted), and BSP stays
    exact."""
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.BSP())
    with strategy.scope():
        model = mlp(DATA.num_features, DATA.num_classes)
        model.compile(keras.optimizers.SGD(0.05),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = tf.data.Dataset.from_tensor_slices((DATA.x_train, DATA.y_train)).repeat().batch(32)
    model.fit(train, epochs=2, steps_per_epoch=60, verbose=0,
              validation_data=DATA.test_dataset(), validation_steps=1)
    t = strategy.telemetry()
    check_counters(t, 120)
    assert t["dropped"] == 0 and t["staleness_histogram"][0] == 120
    reads = strategy.coordinator.chief_reads()["gate"]
    record_property("gate_reads", reads)  # 40 rounds; alone it reads in under half of them
    # Fewer reads than rounds, with a margin: after other cluster tests on a shared
    # machine the count was seen at 24 (the rounds' timing decides how many can be
    # answered from the finished steps alone).
    assert reads <= 120 / 3 * 0.75, reads
