"""Per-worker batch sizes inside `KSyncStrategy`: the TensorFlow side.

Each worker holds its own size in a per-worker variable, and its input pipeline
(`strategies.batching.dynamic_batches`) reads that local copy once per chunk of input.
The chief decides the sizes (`predictor.schedule.AllocationSchedule`, through the
strategy's controller) and assigns each worker's copy itself when they change: a step
never talks to anyone about its size, so allocation adds nothing to a step's path. A
worker that restarts gets its size at the chief's next refresh of the rule.

Input contract: with batch allocation the ``dataset_fn`` given to
`keras.utils.experimental.DatasetCreator` (or to `strategy.distribute_datasets_from_function`)
returns **unbatched** examples, repeated as needed; the strategy batches them per worker.
"""

import logging
import threading

import tensorflow as tf

from strategies import compat
from strategies.batching import dynamic_batches, looks_batched

# How a dataset_fn reaches the strategy, in fit and in a custom loop.
_HOW = ("keras.utils.experimental.DatasetCreator(dataset_fn), or in a custom loop as "
        "coordinator.create_per_worker_dataset(lambda: "
        "strategy.distribute_datasets_from_function(dataset_fn))")
_CONTRACT = ("with batch_allocation, dataset_fn must return unbatched examples (the "
             "strategy batches them per worker at the allocated sizes): remove the "
             ".batch(...) from your dataset_fn. Pass it as " + _HOW + ".")


class BatchAllocation:
    """Each worker's size in a per-worker variable, assigned by the chief, and the
    batching of worker input at that size."""

    def __init__(self, strategy, initial):
        self._sizes = list(initial)
        self._lock = threading.Lock()
        self._assigned = {}  # worker -> the variable object last given its size
        with strategy.scope():
            # Created on each worker when a step or the input first uses it.
            self.local_size = tf.Variable(initial[0], dtype=tf.int64, trainable=False,
                                          per_worker_variable=True,
                                          name="ksync/local_batch_size")

    def set_sizes(self, sizes) -> None:
        """Give each worker its entry of ``sizes``: every worker when they changed, else
        only a worker whose copy is new (created since, or re-created after a restart).
        One assign per worker given, from the chief; a worker unreachable now gets it
        at the next call."""
        with self._lock:
            changed = list(sizes) != self._sizes
            self._sizes = list(sizes)
            per_worker = self.local_size._per_worker_vars  # pylint: disable=protected-access
            if per_worker is None:
                return  # no worker copy yet: each is created holding the first size
            for worker, remote in enumerate(per_worker._values):  # pylint: disable=protected-access
                variable = compat.ready_remote_value(remote)
                if variable is None or (not changed and self._assigned.get(worker) is variable):
                    continue
                try:
                    variable.assign(self._sizes[worker])
                    self._assigned[worker] = variable
                except tf.errors.OpError:
                    self._assigned.pop(worker, None)  # down now: try at the next call

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
    entry, validation = compat.keras_entry_point_for(dataset, depth=2)
    return entry is not None and (entry != "fit" or validation)
