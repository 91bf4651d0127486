"""Keras 3 against tf_keras, on demand: the issue's client (SGD 0.2 with momentum 0.5,
a batched tf.data.Dataset, 3 x 40 steps, validation on the test set) under the six
standard policies and steps_per_execution 1 and 5, in Keras 3 and in tf_keras on the same
cluster, and BSP against single-process SGD for the MLP and the Embedding model at
steps_per_execution 1 and 10. The suite runs a slice (tests/test_strategies/test_keras3.py,
tests/test_strategies/two_ps_suite.py); this takes a few minutes a shape:

    python -m pytest -q -s tests/test_strategies/keras3_matrix.py                    # 1 PS task
    KSYNC_MATRIX_PS=2 python -m pytest -q -s tests/test_strategies/keras3_matrix.py  # 2 PS tasks

It prints each arm's final validation accuracy, Keras 3 beside tf_keras. A process is
the chief of one cluster for its whole life: one shape per run.
"""

import pytest
import tf_keras

from cluster_sim.workloads import mlp
from strategies import KSyncStrategy

from optimizer_matrix import shape  # noqa: F401 (the cluster of the shape asked for)
from test_drop_in import DATA, check_counters
from test_keras3 import (POLICIES, check_bsp_equals_single_process, check_issue_client,
                         keras3_embedding, keras3_mlp, train_dataset)

ACCURACY = {}  # (policy, steps_per_execution) -> {library: final val_accuracy}


@pytest.fixture(scope="module", autouse=True)
def accuracy_table(shape):
    """Prints every arm's final validation accuracy once the module is done."""
    yield
    print(f"\nfinal val_accuracy, {len(shape[0].config.cluster['ps'])} PS task(s):")
    for (policy, spe), got in ACCURACY.items():
        print(f"  {policy:<60} spe={spe}: keras3 {got.get('keras3', float('nan')):.3f}  "
              f"tf_keras {got.get('tf_keras', float('nan')):.3f}")


def _tf_keras_client(local, partitioner, policy, steps_per_execution):
    strategy = KSyncStrategy(local.resolver(), partitioner, policy=policy)
    with strategy.scope():
        model = mlp(DATA.num_features, DATA.num_classes)
        model.compile(tf_keras.optimizers.SGD(0.2, momentum=0.5),
                      tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=steps_per_execution)
    history = model.fit(train_dataset(), epochs=3, steps_per_epoch=40, verbose=0,
                        validation_data=DATA.test_dataset(), validation_steps=1)
    check_counters(strategy.telemetry(), 120)
    return history.history["val_accuracy"][-1]


@pytest.mark.cluster
@pytest.mark.parametrize("steps_per_execution", [1, 5])
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
@pytest.mark.parametrize("library", ["keras3", "tf_keras"])
def test_client(shape, library, policy, steps_per_execution, record_property):
    local, partitioner = shape
    if library == "keras3":
        model = check_issue_client(local, partitioner, policy, record_property,
                                   steps_per_execution=steps_per_execution)
        val = model.history.history["val_accuracy"][-1]
    else:
        val = _tf_keras_client(local, partitioner, policy, steps_per_execution)
        record_property("val_accuracy", val)
    ACCURACY.setdefault((repr(policy), steps_per_execution), {})[library] = val


@pytest.mark.cluster
@pytest.mark.parametrize("steps_per_execution", [1, 10])
@pytest.mark.parametrize("make_model", [keras3_mlp, keras3_embedding],
                         ids=["mlp", "embedding"])
def test_bsp_equals_single_process(shape, make_model, steps_per_execution):
    local, partitioner = shape
    check_bsp_equals_single_process(local, partitioner, steps_per_execution, make_model)
