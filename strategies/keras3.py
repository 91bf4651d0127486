"""Keras 3 internals that `KSyncStrategy` relies on, in one place, for one tested range.

Keras 3 has no parameter-server training of its own. With the TensorFlow backend its
variables are `tf.Variable`s created through the strategy's creator, so under
`KSyncStrategy.scope()` they land on the parameter servers and its optimizer's updates go
through `tf.distribute`'s ``extended.update``, where the strategy takes them (as for
tf_keras). What is missing is the driver: Keras 3's ``fit`` runs steps in the chief's own
process. `install` (called when the strategy creates the first Keras 3 variable) makes a
model created under the scope take the strategy's own (`strategies.keras3_fit`), and makes Keras 3's
``assign_add`` atomic on the strategy's variables (Keras 3 reads, adds and assigns: two
workers counting into one metric or ``optimizer.iterations`` at once lost counts). A model
created outside the scope, or under any other strategy, runs Keras 3's own code.

Example:

```python
import keras, ksync
strategy = ksync.KSyncStrategy(resolver, policy=ksync.BSP())
with strategy.scope():
    model = keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(10)])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
model.fit(dataset.repeat(), epochs=3, steps_per_epoch=100)   # steps on the workers
```
"""

import functools
import inspect
import sys

import numpy as np

#: Keras 3 (major, minor) versions this module was tested with, inclusive.
TESTED_RANGE = ((3, 15), (3, 15))

_BACKEND = (
    "KSyncStrategy trains Keras 3 models with the TensorFlow backend only; this process "
    "runs Keras 3 on the {backend!r} backend, whose variables and steps TensorFlow's "
    "distribution strategies never see. Set KERAS_BACKEND=tensorflow before importing "
    "keras, or use tf_keras (`import tf_keras as keras`).")

_installed = False


def keras_version(keras) -> tuple:
    return tuple(int(p) for p in keras.__version__.split(".")[:2])


def check_keras(keras=None) -> None:
    """Raise, naming the fix, unless ``keras`` (the imported module) is a Keras 3 of the
    tested range running on TensorFlow."""
    if keras is None:
        import keras
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(_BACKEND.format(backend=backend))
    low, high = TESTED_RANGE
    if not low <= keras_version(keras) <= high:
        raise ImportError(
            f"ksync runs Keras 3 models through Keras internals tested with Keras "
            f"{low[0]}.{low[1]} to {high[0]}.{high[1]}; found {keras.__version__}. Install "
            f"a tested version (pip install 'keras>={low[0]}.{low[1]},<{high[0]}."
            f"{high[1] + 1}') or use tf_keras (`import tf_keras as keras`).")


def created_by_keras3() -> bool:
    """Whether Keras 3 (the ``keras`` package, not tf_keras) is creating the variable
    the caller is asked for: a ``keras`` module on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "keras" or module.startswith("keras."):
            return True
        frame = frame.f_back
    return False


def guard_other_backend(strategy_class) -> None:
    """When this process has imported Keras 3 on another backend than TensorFlow, make
    creating a Keras 3 variable under a scope of ``strategy_class`` raise (`check_keras`):
    the model would otherwise train in this process, without the strategy, and say
    nothing."""
    keras = sys.modules.get("keras")
    backend = getattr(getattr(keras, "backend", None), "backend", None)
    if backend is None or keras_version(keras) < (3, 0) or backend() == "tensorflow":
        return
    from keras.src.backend.common import variables
    init = variables.Variable.__init__
    if getattr(init, "_ksync_guard", False):
        return

    @functools.wraps(init)
    def guarded(self, *args, **kwargs):
        import tensorflow as tf
        if isinstance(tf.distribute.get_strategy(), strategy_class):
            check_keras(keras)
        init(self, *args, **kwargs)

    guarded._ksync_guard = True
    variables.Variable.__init__ = guarded


def install(strategy_class, fit, evaluate, predict) -> None:
    """Check the Keras 3 in use (`check_keras`), then have the ``fit``, ``evaluate`` and
    ``predict`` of every model created under a ``strategy_class`` scope call the given
    functions, as ``fit(model, stock_fit, **arguments)``. Idempotent; models of other
    strategies keep Keras 3's own methods."""
    global _installed
    check_keras()
    if _installed:
        return
    from keras.src.backend.tensorflow.core import Variable
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    for name, ours in (("fit", fit), ("evaluate", evaluate), ("predict", predict)):
        setattr(TensorFlowTrainer, name,
                _dispatching(getattr(TensorFlowTrainer, name), ours, strategy_class))
    Variable.assign_add = _atomic(Variable.assign_add, "assign_add")
    Variable.assign_sub = _atomic(Variable.assign_sub, "assign_sub")
    Variable.__array__ = _array_of_shards(Variable.__array__)
    from keras.src.layers.layer import Layer
    for name in ("trainable_weights", "trainable_variables"):
        setattr(Layer, name, property(_shards_listed(getattr(Layer, name).fget)))
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    TFOptimizer.add_variable_from_reference = _slot_recorded(
        TFOptimizer.add_variable_from_reference)
    TFOptimizer.save_own_variables = _whole_slots_saved(TFOptimizer.save_own_variables)
    TFOptimizer.load_own_variables = _whole_slots_loaded(TFOptimizer.load_own_variables)
    _installed = True


def mark(variable) -> None:
    """Mark a variable the strategy created for Keras 3 (its updates become atomic)."""
    for part in getattr(variable, "variables", None) or [variable]:
        part._ksync_keras3 = True


def strategy_of(model):
    """The strategy ``model`` was created under (Keras 3 keeps it), or None."""
    return getattr(model, "_distribute_strategy", None)


def _dispatching(stock, ours, strategy_class):
    signature = inspect.signature(stock)

    @functools.wraps(stock)
    def method(self, *args, **kwargs):
        if not isinstance(strategy_of(self), strategy_class):
            return stock(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments.update(arguments.pop("kwargs", {}))
        del arguments["self"]
        return ours(self, stock, **arguments)

    method._ksync_stock = stock
    return method


def _shards_listed(stock):
    """A Keras 3 variable the strategy's partitioner sharded holds a `ShardedVariable`,
    which Keras 3's gradient and optimizer code cannot take (it has no one handle). As
    tf_keras does, a layer's trainable weights list its shards instead, each as a Keras
    variable of its own (`_shard_variables`): the tape differentiates the shards, the
    optimizer keeps its slots beside each shard, and the strategy aggregates and applies
    each shard's gradient on its own PS task. ``weights`` (saving, ``get_weights``)
    keep the whole variables."""
    @functools.wraps(stock)
    def getter(self):
        out = []
        for variable in stock(self):
            out.extend(_shard_variables(variable) or [variable])
        return out
    return getter


def _shard_variables(variable):
    """The Keras 3 variables of a sharded ``variable``'s shards (made once), else None."""
    value = getattr(variable, "_value", None)
    shards = getattr(value, "variables", None)
    if not shards or not getattr(shards[0], "_ksync_keras3", False):
        return None
    if getattr(variable, "_ksync_shards", None) is None:
        from keras.src.backend import Variable  # the class Keras 3 checks against

        class ShardOf(Variable):
            """A Keras 3 variable holding an existing shard (no new tf.Variable)."""
            def _initialize(self, value):
                self._value = value()

        variable._ksync_shards = [
            ShardOf(initializer=lambda shape, dtype, shard=shard: shard, shape=shard.shape,
                    dtype=variable.dtype, trainable=variable.trainable,
                    name=f"{variable.name}_part_{i}")
            for i, shard in enumerate(shards)]
        for i, shard in enumerate(variable._ksync_shards):
            shard._ksync_whole, shard._ksync_index = variable, i
    return variable._ksync_shards


# The optimizer keeps its slots (momentum, Adam's moments) beside each shard; its saved
# state holds them joined, as for whole variables, so that a `.keras` file or weights
# written with one sharding restore with another (or none).
def _slot_recorded(stock):
    @functools.wraps(stock)
    def method(self, reference_variable, name=None, initializer="zeros"):
        slot = stock(self, reference_variable, name=name, initializer=initializer)
        whole = getattr(reference_variable, "_ksync_whole", None)
        if whole is not None:
            slot._ksync_slot_of = (whole, name, reference_variable._ksync_index)
        return slot
    return method


def _saved_layout(optimizer):
    """The optimizer's state as saved: a list of lists of its variables, one list per
    saved entry (a slot of a sharded variable: its shards' slots, in shard order, at the
    place of the first)."""
    layout, groups = [], {}
    for variable in optimizer.variables:
        slot_of = getattr(variable, "_ksync_slot_of", None)
        if slot_of is None:
            layout.append([variable])
            continue
        key = (id(slot_of[0]), slot_of[1])
        if key not in groups:
            groups[key] = []
            layout.append(groups[key])
        groups[key].append(variable)
    for group in groups.values():
        group.sort(key=lambda v: v._ksync_slot_of[2])
    return layout


def _whole_slots_saved(stock):
    @functools.wraps(stock)
    def method(self, store):
        layout = _saved_layout(self)
        if all(len(entry) == 1 for entry in layout):
            return stock(self, store)
        for i, entry in enumerate(layout):
            store[str(i)] = np.concatenate([v.numpy() for v in entry]) if len(entry) > 1 \
                else entry[0].numpy()
    return method


def _whole_slots_loaded(stock):
    @functools.wraps(stock)
    def method(self, store):
        layout = _saved_layout(self)
        if all(len(entry) == 1 for entry in layout) or len(store.keys()) != len(layout):
            return stock(self, store)  # Keras warns on a count that does not match
        for i, entry in enumerate(layout):
            if len(entry) == 1:
                entry[0].assign(store[str(i)])
                continue
            value, start = np.asarray(store[str(i)]), 0
            for variable in entry:
                variable.assign(value[start:start + variable.shape[0]])
                start += variable.shape[0]
    return method


def _array_of_shards(stock):
    """Keras 3 saves a variable as ``np.asarray(variable)``, which asks its value for
    ``__array__``; a `ShardedVariable` has none: its shards joined instead."""
    @functools.wraps(stock)
    def method(self, *args, **kwargs):
        if _shard_variables(self) is not None:
            return np.asarray(self._value.numpy(), *args[:1])
        return stock(self, *args, **kwargs)
    return method


def _atomic(stock, op):
    """Keras 3's ``assign_add`` is ``assign(self + value)``: atomic instead on the
    strategy's variables (outside a stateless scope, where Keras records it)."""
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    @functools.wraps(stock)
    def method(self, value):
        target = self._value
        if getattr(target, "_ksync_keras3", False) and not in_stateless_scope():
            return getattr(target, op)(self._convert_to_tensor(value, dtype=self._dtype))
        return stock(self, value)

    return method


def stock_method(name):
    """Keras 3's own ``fit``, ``evaluate`` or ``predict`` (after `install`)."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    return getattr(TensorFlowTrainer, name)._ksync_stock


# -- what keras3_fit needs from Keras 3's trainer ---------------------------------------
def data_adapter(x, y, sample_weight, batch_size, steps_per_epoch, shuffle, class_weight):
    """Keras 3's own adapter of arrays (and what else its ``fit`` accepts)."""
    from keras.src.trainers.data_adapters import get_data_adapter
    return get_data_adapter(x, y, sample_weight, batch_size=batch_size,
                            steps_per_epoch=steps_per_epoch, shuffle=shuffle,
                            class_weight=class_weight)


def train_validation_split(arrays, validation_split):
    from keras.src.trainers.data_adapters import array_slicing
    return array_slicing.train_validation_split(arrays, validation_split=validation_split)


def symbolic_build(model, element_spec) -> None:
    """Create every variable of the model, its metrics and its optimizer (under the
    caller's scope) from the spec of one batch, as Keras 3's ``fit`` does before its
    first step: a scheduled step cannot create variables."""
    model._symbolic_build(data_batch=element_spec)  # pylint: disable=protected-access


def check_compiled(model, method) -> None:
    model._assert_compile_called(method)  # pylint: disable=protected-access


def should_eval(model, epoch, validation_freq) -> bool:
    return model._should_eval(epoch, validation_freq)  # pylint: disable=protected-access


def epoch_logs(model, step_logs) -> dict:
    """The model's metrics (read from their variables on the PS) when they are what the
    steps return, else the last step's logs (a custom ``train_step``)."""
    return dict(model._get_metrics_result_or_logs(step_logs))  # pylint: disable=protected-access


def overrides_batch_end(callback) -> bool:
    from keras.src.utils.python_utils import is_default
    return not (is_default(callback.on_batch_end) and is_default(callback.on_train_batch_end))


class on_the_chief:
    """Within it, ``model`` runs Keras 3's own ``evaluate`` and ``predict`` in this
    process (as tf_keras's ``predict`` does under a parameter-server strategy), reading
    its parameters from the PS: each example once, in order. Called inside the
    strategy's scope (``fit`` there, with validation data), the scope is set aside
    meanwhile: Keras 3 would otherwise hand its input to the strategy, which only
    serves workers."""

    def __init__(self, model):
        self._model = model

    def __enter__(self):
        from strategies.compat import set_aside_strategy_scopes
        self._strategy = self._model._distribute_strategy  # pylint: disable=protected-access
        self._model._distribute_strategy = None  # pylint: disable=protected-access
        self._aside = set_aside_strategy_scopes()
        self._aside.__enter__()

    def __exit__(self, *exc):
        self._aside.__exit__(None, None, None)
        self._model._distribute_strategy = self._strategy  # pylint: disable=protected-access
