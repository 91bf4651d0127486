"""Keras callbacks of `KSyncStrategy`: telemetry into the training logs, and the training
loss to the strategy's controller (for the policies that follow it)."""

import tf_keras as keras
import tensorflow as tf


class KSyncTelemetryCallback(keras.callbacks.Callback):
    """Add k-sync counters to each epoch's logs (so to `History`) and, given a log dir,
    write them with per-worker speed and staleness as TensorBoard scalars.

    ``ksync_pushes_per_epoch`` and ``ksync_updates_per_epoch`` say what an epoch was:
    an epoch is ``steps_per_epoch`` worker mini-batches (pushes), as with the stock
    strategy, but under K-sync, BSP or backup workers K pushes make one update, so an
    epoch makes fewer updates than it has steps (under ASP as many).

    With learning-rate scaling (``KSyncStrategy(lr_scaling=...)``, on by default under
    `ksync.Adaptive`): ``ksync_lr_gain``, the last commit's gain; ``ksync_learning_rate``,
    the optimizer's rate that commit applied; ``ksync_progress``, the base steps the
    updates so far are worth (the gains' sum).

    Example:

    ```python
    history = model.fit(ds, epochs=3, steps_per_epoch=50,
                        callbacks=[KSyncTelemetryCallback(strategy, log_dir="logs")])
    history.history["ksync_updates_per_epoch"]   # e.g. [25, 25, 25] for 100 steps, K=4
    ```
    """

    def __init__(self, strategy, log_dir=None):
        super().__init__()
        self.strategy = strategy
        self.log_dir = log_dir
        self._writer = None
        self.last = None
        self._epoch_start = None  # (pushed, version) when the epoch began

    def on_train_begin(self, logs=None):
        if self.log_dir:
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_epoch_begin(self, epoch, logs=None):
        t = self.strategy.telemetry()
        self._epoch_start = (t["pushed"], t["version"])

    def on_epoch_end(self, epoch, logs=None):
        t = self.strategy.telemetry()
        self.last = t
        scalars = {f"ksync_{k}": t[k] for k in
                   ("version", "pushed", "applied", "dropped", "pending", "k")}
        if self._epoch_start is not None:
            scalars["ksync_pushes_per_epoch"] = t["pushed"] - self._epoch_start[0]
            scalars["ksync_updates_per_epoch"] = t["version"] - self._epoch_start[1]
        scalars["ksync_staleness_p95"] = t["staleness_p95"] or 0
        lr = t.get("lr_scaling") or {}
        for key in ("gain", "progress", "learning_rate"):
            if lr.get(key) is not None:
                scalars[f"ksync_{'lr_gain' if key == 'gain' else key}"] = lr[key]
        for w, stats in enumerate(t["workers"]):
            for key in ("samples_per_s", "step_time", "batch_size"):
                if stats[key] is not None:
                    scalars[f"ksync_worker{w}_{key}"] = stats[key]
        if logs is not None:
            logs.update(scalars)
        if self._writer is not None:
            with self._writer.as_default(step=epoch):
                for name, value in scalars.items():
                    tf.summary.scalar(name, value)
            self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class KSyncLossCallback(keras.callbacks.Callback):
    """Report each epoch's training loss (``logs["loss"]``) to the strategy, through
    `KSyncStrategy.report_loss`, for the policies that follow the loss
    (`ksync.AdaSync` raises K as it falls; `ksync.Adaptive` moves to larger updates
    when it stops falling).

    Under a parameter-server strategy tf_keras fetches the step results from the
    workers only at an epoch's end (per-batch logs are remote values that are never
    fetched), so the loss is reported once an epoch and reading it costs no extra
    round trip to a worker. For a report more often than once an epoch, use shorter
    epochs (``steps_per_epoch``). A custom `ClusterCoordinator` loop calls
    ``strategy.report_loss`` itself.

    Example:

    ```python
    strategy = ksync.KSyncStrategy(resolver, policy=ksync.AdaSync(k0=1))
    ...
    model.fit(ds, epochs=20, steps_per_epoch=100,
              callbacks=[ksync.KSyncLossCallback(strategy)])
    strategy.explain()   # "...: loss fell from 2.3 to 0.41: K = ... = 3; AdaSync: ..."
    ```
    """

    def __init__(self, strategy, key: str = "loss"):
        super().__init__()
        if not hasattr(strategy, "report_loss"):
            raise TypeError(f"KSyncLossCallback needs a KSyncStrategy, got "
                            f"{type(strategy).__name__}.")
        self.strategy = strategy
        self.key = key

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.key)
        if isinstance(value, (int, float)) or hasattr(value, "__float__"):
            self.strategy.report_loss(value)
