"""Built-in training workloads: data that ships with scikit-learn and small tf_keras models.

Nothing is downloaded, so the demo and the tests run on a machine without network.

Example:

```python
data = digits()
with strategy.scope():
    model = mlp(data.num_features, data.num_classes)
model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(batch_size=32)),
          epochs=2, steps_per_epoch=100)
```
"""

import dataclasses

import numpy as np


@dataclasses.dataclass
class Dataset:
    """Train/test arrays and a per-worker input pipeline over the training part."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]

    @property
    def num_classes(self) -> int:
        return int(self.y_train.max()) + 1

    def dataset_fn(self, batch_size: int | None, num_shards: int | None = None,
                   shuffle_seed: int | None = 0, repeat: bool = True):
        """A ``dataset_fn`` for workers, batched (or single examples with
        ``batch_size=None``, for the strategy to batch).

        With ``num_shards`` None every worker reads the whole training set, each in its
        own order (seeded by ``shuffle_seed`` and the worker index, new every pass);
        otherwise worker ``i`` reads rows ``i::num_shards``. ``shuffle_seed=None`` keeps
        the stored order.
        """
        x, y = self.x_train, self.y_train

        def dataset_fn(_input_context=None):
            import tensorflow as tf
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            rows = tf.range(len(x), dtype=tf.int64)
            if num_shards:
                rows = rows[worker::num_shards]
            passes = tf.data.Dataset.range(2**62 if repeat else 1)
            if shuffle_seed is None:
                order = passes.map(lambda _pass: rows)
            else:
                # Same seed on every worker would hand all of them the same batches.
                order = passes.map(lambda p: tf.random.experimental.stateless_shuffle(
                    rows, seed=tf.stack([shuffle_seed * 7919 + worker, p])))
            ds = order.unbatch().map(lambda i: (tf.gather(x, i), tf.gather(y, i)))
            return ds if batch_size is None else ds.batch(batch_size, drop_remainder=True)

        return dataset_fn

    def test_dataset(self):
        """The test set as one repeated batch: ``evaluate(..., steps=1)`` and
        ``predict(..., steps=1)`` under a parameter-server strategy see each row once."""
        import tensorflow as tf
        return tf.data.Dataset.from_tensor_slices((self.x_test, self.y_test)).batch(
            len(self.x_test)).repeat()


def digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits (1797 images, 10 classes), scaled to [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    y = y.astype("int64")
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction,
                                              random_state=seed, stratify=y)
    return Dataset(x_tr, y_tr, x_te, y_te)


def mlp(num_features: int, num_classes: int, hidden=(32,), seed: int = 0, slowdown=None):
    """A small tf_keras MLP classifier producing logits; ``slowdown`` (a
    `cluster_sim.slowdown.SlowdownLayer`) goes first when given."""
    import tf_keras as keras
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Input((num_features,))] + ([slowdown] if slowdown else [])
    layers += [keras.layers.Dense(h, activation="relu") for h in hidden]
    layers.append(keras.layers.Dense(num_classes))
    return keras.Sequential(layers)


def compile_classifier(model, optimizer):
    import tf_keras as keras
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model
