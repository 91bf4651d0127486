"""``fit``, ``evaluate`` and ``predict`` of a Keras 3 model created under a `KSyncStrategy`.

``fit`` runs as tf_keras's ``fit`` does under a parameter-server strategy: each worker
reads its own copy of the input (`per_worker_input`), the chief schedules steps (or
``steps_per_execution`` steps at a time) through the strategy's coordinator, the
optimizer's updates go to the parameter servers under the strategy's rule, and at the end
of each epoch the chief waits for every step and reads the metrics from their variables
on the PS. ``evaluate`` and ``predict`` run Keras 3's own code on the chief, reading the
parameters from the PS (each example once, in order). Keras 3 internals come from
`strategies.keras3` only.

Differences from Keras 3's ``fit`` a user sees: ``steps_per_epoch`` is needed for a dataset
or a dataset function of unknown size (a worker's copy repeats); ``verbose="auto"`` is 2,
one line per epoch, as tf_keras under a parameter-server strategy (a progress bar reads
every step's logs, which makes the chief wait for each step); batch-level logs reach only
callbacks that override a batch-end hook, and reading them waits for that step.

Example (the model made under ``strategy.scope()``; ``model.fit`` ends up here):

```python
history = model.fit(x_train, y_train, batch_size=32, epochs=3,
                    validation_data=(x_test, y_test))
```
"""


import keras
import tensorflow as tf

from strategies import keras3


def install(strategy_class) -> None:
    """Route the Keras 3 methods of models created under ``strategy_class`` here
    (`strategies.keras3.install`)."""
    keras3.install(strategy_class, fit, evaluate, predict)


class _PerWorkerInput:
    """What ``fit`` was given, as a per-worker dataset of the coordinator: a
    `tf.data.Dataset` (each worker iterates its own copy, repeated), a dataset function
    (``fn(input_context)``, e.g. tf_keras's ``DatasetCreator``: each worker calls it,
    so it may shard with ``tf.distribute.coordinator.experimental_get_current_worker_index()``),
    or arrays (each worker builds Keras 3's batches of them, shuffled each pass)."""

    def __init__(self, strategy, x, y, sample_weight, batch_size, steps_per_epoch, shuffle,
                 class_weight):
        if isinstance(x, tf.data.Dataset):
            _no_arrays_with(x, y, sample_weight, "a tf.data.Dataset")
            finite = x.cardinality().numpy()
            steps = steps_per_epoch or (int(finite) if finite > 0 else None)
            self.element_spec = x.element_spec
            source = strategy.experimental_distribute_dataset(
                x.repeat() if finite != tf.data.INFINITE_CARDINALITY else x)
        elif callable(x):
            _no_arrays_with(x, y, sample_weight, "a dataset function")
            steps = steps_per_epoch
            fn = x

            def source():
                return strategy.distribute_datasets_from_function(fn)
        else:
            adapter = keras3.data_adapter(x, y, sample_weight, batch_size, steps_per_epoch,
                                          shuffle, class_weight)
            steps = steps_per_epoch or adapter.num_batches
            self.element_spec = adapter.get_tf_dataset().element_spec

            def dataset_fn(_input_context):
                return keras3.data_adapter(x, y, sample_weight, batch_size, None, shuffle,
                                           class_weight).get_tf_dataset().repeat()

            def source():
                return strategy.distribute_datasets_from_function(dataset_fn)
        if not steps:
            raise ValueError(
                "KSyncStrategy: fit needs steps_per_epoch with a dataset or dataset "
                "function of unknown size: each worker reads its own copy, so the input "
                "never ends on its own. Pass steps_per_epoch=<steps in an epoch, all "
                "workers together>.")
        self.steps = steps
        self.dataset = strategy.coordinator.create_per_worker_dataset(source)
        if not hasattr(self, "element_spec"):
            self.element_spec = self.dataset.element_spec


def _no_arrays_with(x, y, sample_weight, what):
    if y is not None or sample_weight is not None:
        raise ValueError(f"fit: with x {what}, y and sample_weight come from x (got "
                         f"y={type(y).__name__}, sample_weight="
                         f"{type(sample_weight).__name__}).")


def _step_functions(model, strategy):
    """(one step, ``steps`` steps) of ``model.train_step`` on a worker's iterator, made
    once per model and strategy (as Keras 3 keeps its ``train_function``): a later
    ``fit`` does not trace them again."""
    cached = getattr(model, "_ksync_step_functions", None)
    if cached is not None and cached[0] is strategy:
        return cached[1]

    def step(iterator):
        return strategy.run(model.train_step, args=(next(iterator),))

    @tf.function
    def several(iterator, steps):
        for _ in tf.range(steps):
            outputs = step(iterator)
        return outputs  # pylint: disable=undefined-loop-variable

    model._ksync_step_functions = (strategy, (tf.function(step), several))
    return model._ksync_step_functions[1]


class _BatchLogs(dict):
    """A step's logs that wait for the step only when a callback reads a value."""

    def __init__(self, remote, names):
        super().__init__({name: _Fetched(remote, name) for name in names})


class _Fetched:
    def __init__(self, remote, name):
        self._remote, self._name = remote, name

    def __float__(self):
        return float(self._remote.fetch()[self._name])

    def __repr__(self):
        return f"<{self._name} of a scheduled step>"


def fit(model, stock, *, x=None, y=None, batch_size=None, epochs=1, verbose="auto",
        callbacks=None, validation_split=0.0, validation_data=None, shuffle=True,
        class_weight=None, sample_weight=None, initial_epoch=0, steps_per_epoch=None,
        validation_steps=None, validation_batch_size=None, validation_freq=1):
    del stock
    keras3.check_compiled(model, "fit")
    strategy = keras3.strategy_of(model)
    _check_trainable(model)
    if validation_split and validation_data is None:
        (x, y, sample_weight), validation_data = keras3.train_validation_split(
            (x, y, sample_weight), validation_split)
    train = _PerWorkerInput(strategy, x, y, sample_weight, batch_size, steps_per_epoch,
                            shuffle, class_weight)
    with strategy.scope():
        keras3.symbolic_build(model, train.element_spec)
    verbose = 2 if verbose == "auto" else verbose
    user_callbacks = list(callbacks or [])
    batch_logs = verbose == 1 or any(keras3.overrides_batch_end(c) for c in user_callbacks)
    callbacks = keras.callbacks.CallbackList(
        user_callbacks, add_history=True, add_progbar=verbose != 0, verbose=verbose,
        epochs=epochs, steps=train.steps, model=model)
    one_step, several_steps = _step_functions(model, strategy)
    per_call = model.steps_per_execution
    coordinator = strategy.coordinator
    iterator = iter(train.dataset)
    names = None
    model.stop_training = False
    callbacks.on_train_begin()
    training_logs = None
    for epoch in range(initial_epoch, epochs):
        model.reset_metrics()
        callbacks.on_epoch_begin(epoch)
        step, remote = 0, None
        while step < train.steps and not model.stop_training:
            count = min(per_call, train.steps - step)
            callbacks.on_train_batch_begin(step)
            if per_call == 1:
                remote = coordinator.schedule(one_step, args=(iterator,))
            else:
                remote = coordinator.schedule(several_steps,
                                              args=(iterator, tf.constant(count)))
            step += count
            if batch_logs and names is None:
                names = list(remote.fetch())  # the first step's: what train_step returns
            callbacks.on_train_batch_end(
                step - 1, _BatchLogs(remote, names) if batch_logs else None)
        coordinator.join()
        logs = keras3.epoch_logs(model, remote.fetch() if remote is not None else {})
        if validation_data is not None and keras3.should_eval(model, epoch, validation_freq):
            val_x, val_y, val_sw = keras.utils.unpack_x_y_sample_weight(validation_data)
            val_logs = evaluate(model, None, x=val_x, y=val_y, sample_weight=val_sw,
                                batch_size=validation_batch_size or batch_size,
                                steps=validation_steps, callbacks=callbacks,
                                return_dict=True, verbose=0)
            logs.update({f"val_{name}": value for name, value in val_logs.items()})
        callbacks.on_epoch_end(epoch, logs)
        training_logs = logs
        if model.stop_training:
            break
    model.optimizer.finalize_variable_values(model.trainable_weights)
    callbacks.on_train_end(logs=training_logs)
    return model.history


def _check_trainable(model):
    optimizer = model.optimizer
    if model.run_eagerly:
        raise ValueError("KSyncStrategy: run_eagerly=True cannot run steps on the "
                         "workers (as with tf_keras under a parameter-server strategy); "
                         "compile with run_eagerly=False.")
    if getattr(optimizer, "use_ema", False):
        raise ValueError(
            "KSyncStrategy: Keras 3's optimizer EMA (use_ema=True) updates its averages "
            "in each step, outside tf.distribute's update path, so the PS cannot apply "
            "them once per model update. Use use_ema=False, or tf_keras's optimizers "
            "(their EMA runs once per update under ksync).")
    if getattr(optimizer, "gradient_accumulation_steps", None):
        raise ValueError(
            "KSyncStrategy: gradient_accumulation_steps applies the optimizer under a "
            "condition inside the step, which the PS cannot follow; K-sync rules "
            "already aggregate gradients: use policy=ksync.KSync(k=...) instead.")


def evaluate(model, stock, **arguments):
    """Keras 3's ``evaluate``, run on the chief (`keras3.on_the_chief`)."""
    stock = stock or keras3.stock_method("evaluate")
    if arguments.get("verbose") == "auto":
        arguments["verbose"] = 2
    with keras3.on_the_chief(model):
        return stock(model, **arguments)


def predict(model, stock, **arguments):
    """Keras 3's ``predict``, run on the chief (`keras3.on_the_chief`)."""
    with keras3.on_the_chief(model):
        return stock(model, **arguments)
