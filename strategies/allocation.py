"""Per-worker batch sizes inside `KSyncStrategy`: the TensorFlow side.

The allocation lives in a vector variable on the PS (one size per worker). Every step a
worker copies its own entry into a per-worker variable on itself, and its input pipeline
(`strategies.batching.dynamic_batches`) reads that local copy once per chunk of input, so
sizes follow the allocation within a few batches without the pipeline ever talking to
the PS. The chief
updates the vector from a `predictor.schedule.AllocationSchedule`.

Input contract: with batch allocation the ``dataset_fn`` given to
`keras.utils.experimental.DatasetCreator` (or to `strategy.distribute_datasets_from_function`)
returns **unbatched** examples, repeated as needed; the strategy batches them per worker.
"""

import logging
import sys

import tensorflow as tf

from strategies.batching import dynamic_batches, looks_batched

# How a dataset_fn reaches the strategy, in fit and in a custom loop.
_HOW = ("keras.utils.experimental.DatasetCreator(dataset_fn), or in a custom loop as "
        "coordinator.create_per_worker_dataset(lambda: "
        "strategy.distribute_datasets_from_function(dataset_fn))")
_CONTRACT = ("with batch_allocation, dataset_fn must return unbatched examples (the "
             "strategy batches them per worker at the allocated sizes): remove the "
             ".batch(...) from your dataset_fn. Pass it as " + _HOW + ".")


class BatchAllocation:
    """Sizes on the PS, their per-worker copies, and the batching of worker input."""

    def __init__(self, strategy, initial, ps_device: str):
        with tf.init_scope(), tf.device(ps_device):
            self.sizes = tf.Variable(tf.constant(initial, tf.int64), trainable=False,
                                     name="ksync/batch_sizes")
        with strategy.scope():
            self.local_size = tf.Variable(initial[0], dtype=tf.int64, trainable=False,
                                          per_worker_variable=True,
                                          name="ksync/local_batch_size")

    def set_sizes(self, sizes) -> None:
        self.sizes.assign(tf.constant(list(sizes), tf.int64))

    def sync_local(self, worker):
        """Inside a step: copy this worker's allocated size to its local variable."""
        return self.local_size.assign(tf.gather(self.sizes, worker))

    def wrap_dataset_fn(self, dataset_fn):
        def batched_dataset_fn(input_context):
            dataset = dataset_fn(input_context)
            if not isinstance(dataset, tf.data.Dataset):
                raise TypeError(f"dataset_fn must return a tf.data.Dataset, got "
                                f"{type(dataset).__name__}; " + _CONTRACT)
            if looks_batched(dataset.element_spec):
                raise ValueError("dataset_fn returned batches "
                                 f"({dataset.element_spec}); " + _CONTRACT)
            return dynamic_batches(dataset, self.local_size)
        return batched_dataset_fn

    _warned = False

    def pass_dataset(self, dataset):
        """A dataset built on the chief keeps its own batches: what evaluate, predict
        and fit's validation need. Only training on one loses the allocation, so say
        that once, for fit (or a custom loop), never for evaluate or predict."""
        if not self._warned and not _for_evaluation(dataset):
            self._warned = True
            logging.warning("ksync: batch allocation applies to input from a dataset_fn; "
                            "this tf.data.Dataset is trained on with its own batches. To "
                            "train with allocated sizes, pass a dataset_fn that returns "
                            "unbatched examples as %s.", _HOW)
        return dataset


def _for_evaluation(dataset) -> bool:
    """Whether ``dataset`` is being distributed for evaluate, predict or fit's validation
    (which fit prepares itself, from its local ``val_x``): the innermost Keras entry
    point on the stack says. False for fit's training input and outside Keras."""
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_globals.get("__name__", "").startswith("tf_keras")
                and frame.f_code.co_name in ("fit", "evaluate", "predict")):
            return (frame.f_code.co_name != "fit"
                    or frame.f_locals.get("val_x") is dataset)
        frame = frame.f_back
    return False
