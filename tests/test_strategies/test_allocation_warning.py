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


def test_a_worker_without_a_speed_yet_is_said_by_explain_not_by_a_warning():
    """Expected conditions are said once, quietly: a worker that made no step in an
    allocation window (slow, paused, restarting) gets equal sizes for all, reported by
    `explain()` and the allocation history, with no warning in the progress bars."""
    import warnings

    import predictor
    from ksync.controller import Measurement, RuleController
    from predictor.schedule import AllocationSchedule

    schedule = AllocationSchedule(predictor.BatchAllocator(96, min_batch=4), mode="last")
    controller = RuleController(ksync.ASP(), num_workers=3, schedule=schedule,
                                allocate_every=10)

    def at(version, samples, busy_s, pushes):
        return controller.refresh(Measurement(
            version=version, live_workers=(0, 1, 2), worker_samples=samples,
            busy_s=busy_s, worker_pushes=pushes)).sizes

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        at(0, [0, 0, 0], [0.0, 0.0, 0.0], [0, 0, 0])
        first = at(10, [320, 320, 96], [1.0, 1.0, 1.0], [10, 10, 3])
        assert first[2] < first[0] / 2
        # Worker 2 finishes no step in the next window: no speed for it.
        assert at(20, [640, 640, 96], [2.0, 2.0, 2.0], [20, 20, 3]) == [32, 32, 32]
        assert ("equal batch sizes since version 20: no speed measured for worker 2 in "
                "the last window") in controller.explain()
        assert schedule.history[-1]["stage"] == "equal sizes: no speed for worker(s) [2]"
        again = at(30, [960, 960, 192], [3.0, 3.0, 3.0], [30, 30, 6])
        assert again[2] < again[0] / 2 and "equal batch sizes" not in controller.explain()


def test_speeds_that_are_not_speeds_still_warn():
    """A real problem (a forecaster or caller giving NaN or negative speeds) is said."""
    import predictor
    with pytest.warns(predictor.AllocatorFallbackWarning, match=r"workers \[1\]"):
        assert predictor.BatchAllocator(96, min_batch=4).allocate([1.0, -1.0, 2.0]) == [32] * 3
