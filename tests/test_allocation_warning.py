"""The batch-allocation warning fires for training input that bypasses the allocation
(a tf.data.Dataset given to fit), never for evaluate, predict or fit's validation data."""

import logging

import pytest
import tf_keras as keras

import ksync
from cluster_sim.workloads import compile_classifier, digits, mlp
from strategies import KSyncStrategy

DATA = digits(seed=0)


def allocation_warnings(caplog):
    return [r for r in caplog.records if "batch allocation applies" in r.getMessage()]


@pytest.mark.cluster
def test_warning_only_when_fit_trains_on_a_dataset_directly(cluster, caplog):
    import predictor
    strategy = KSyncStrategy(cluster.resolver(), policy=ksync.ASP(),
                             batch_allocation=predictor.BatchAllocator(64, min_batch=4))
    with strategy.scope():
        model = compile_classifier(mlp(DATA.num_features, DATA.num_classes),
                                   keras.optimizers.SGD(0.1))
    with caplog.at_level(logging.WARNING):
        # The README's use: an unbatched dataset_fn, batched validation and evaluate data.
        model.fit(keras.utils.experimental.DatasetCreator(DATA.dataset_fn(None)), epochs=1,
                  steps_per_epoch=3, validation_data=DATA.test_dataset(),
                  validation_steps=1, verbose=0)
        model.evaluate(DATA.test_dataset(), steps=1, verbose=0)
        assert allocation_warnings(caplog) == []
        # Training on a batched dataset passed directly keeps its batches: say so.
        model.fit(DATA.test_dataset(), epochs=1, steps_per_epoch=2, verbose=0)
    [warning] = allocation_warnings(caplog)
    assert "DatasetCreator(dataset_fn)" in warning.getMessage()
    assert "remove the .batch" not in warning.getMessage()
    strategy.shutdown()
