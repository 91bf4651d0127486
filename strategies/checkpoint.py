"""Checkpoints of a `KSyncStrategy` run, to continue after a parameter server restarts.

A PS holds the model, the optimizer slots and the k-sync state (version, counters, the
pending round's gradient aggregate); when it dies they are gone. `KSyncCheckpoint` saves
all of it from the chief at the end of every epoch (when `fit` has joined every step,
so the snapshot is consistent), together with what lives on the chief: the policy's
rule and history and, with batch allocation, the sizes, the schedule and the forecaster.

The procedure after a PS failure (`fit` raises one of `PS_FAILURES` within a second;
`ksync.KSyncCheckpoint`, `ksync.PS_FAILURES` and `ksync.wait_for_ps` are these names):
restart the PS task (your cluster manager does; `ksync-launch` on its machine), then in
the chief build a new strategy and model exactly as before, restore, and fit on from
the restored epoch. The variables of the old strategy cannot be reused: they belonged
to the dead server.

Example:

```python
def build():
    strategy = ksync.KSyncStrategy(resolver, policy=ksync.Adaptive())
    with strategy.scope():
        model = make_model()
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9), loss)
    return strategy, ksync.KSyncCheckpoint(strategy, model, "ckpt")

strategy, ckpt = build()
while True:
    epoch = ckpt.restore()                       # 0 when there is no checkpoint yet
    try:
        ckpt.model.fit(creator, initial_epoch=epoch, epochs=20, steps_per_epoch=100,
                       callbacks=[ckpt.callback()])
        break
    except ksync.PS_FAILURES:
        strategy.shutdown()
        ksync.wait_for_ps(resolver, timeout_s=600)   # the PS task is being restarted
        strategy, ckpt = build()
```
"""

import json
import os
import time

import tensorflow as tf
import tf_keras as keras

from strategies.launch_net import probe

#: What `fit` raises when a parameter server dies (it varies with the moment of death).
PS_FAILURES = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError)


class KSyncCheckpoint:
    """Save and restore a run of ``model`` under ``strategy`` in ``directory``.

    Args:
      strategy: the `KSyncStrategy` the model was built under.
      model: a compiled tf_keras model (its optimizer is saved with it).
      directory: where checkpoints go (the chief's disk, or shared storage).
      max_to_keep: checkpoints kept; older ones are deleted.
    """

    def __init__(self, strategy, model, directory, max_to_keep: int = 3):
        from strategies.ksync_strategy import KSyncStrategy
        if not isinstance(strategy, KSyncStrategy):
            raise TypeError(f"KSyncCheckpoint needs a KSyncStrategy, got "
                            f"{type(strategy).__name__}.")
        if getattr(model, "optimizer", None) is None:
            raise ValueError("compile the model before creating its KSyncCheckpoint: the "
                             "optimizer's state is part of the checkpoint.")
        self.strategy, self.model, self.directory = strategy, model, os.fspath(directory)
        ps_state = strategy.checkpoint_objects(model)
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                               ksync=tf.train.Checkpoint(**ps_state))
        self._manager = tf.train.CheckpointManager(self._checkpoint, self.directory,
                                                   max_to_keep=max_to_keep)

    @property
    def latest(self) -> str | None:
        """Path prefix of the newest checkpoint, or None."""
        return self._manager.latest_checkpoint

    def save(self, epoch: int) -> str:
        """Write a checkpoint for ``epoch`` finished epochs; its path prefix."""
        strategy = self.strategy
        # The rule and the sizes must not change between their PS copy and the chief's.
        with strategy.rule_lock:
            # Side files first: until the checkpoint itself is written, `latest` is still
            # the previous one, so a crash in between leaves a restorable directory.
            path = os.path.join(self.directory, f"ckpt-{int(epoch)}")
            os.makedirs(self.directory, exist_ok=True)
            side = {"epoch": int(epoch), "policy": repr(strategy.policy),
                    **strategy.controller.get_state()}
            schedule = strategy.controller.schedule
            if schedule is not None:
                side["allocation"]["allocator"] = schedule.allocator.get_state()
                if schedule.forecaster is not None:
                    schedule.forecaster.save(f"{path}.forecaster.npz")
            tmp = f"{path}.ksync.json.tmp"
            with open(tmp, "w") as f:
                json.dump(side, f)
            os.replace(tmp, f"{path}.ksync.json")
            written = self._manager.save(checkpoint_number=epoch)
        kept = set(self._manager.checkpoints)
        for name in os.listdir(self.directory):
            prefix = os.path.join(self.directory, name.partition(".")[0])
            if name.endswith((".ksync.json", ".forecaster.npz")) and prefix not in kept:
                os.remove(os.path.join(self.directory, name))
        return written

    def restore(self) -> int:
        """Load the newest checkpoint into the model, optimizer and strategy; the number
        of finished epochs it holds (0, and nothing loaded, when there is none)."""
        path = self.latest
        if path is None:
            return 0
        strategy = self.strategy
        try:
            with open(f"{path}.ksync.json") as f:
                side = json.load(f)
        except (OSError, ValueError) as err:
            raise ValueError(f"checkpoint {path} has no readable {path}.ksync.json ({err}); "
                             "it was not written by KSyncCheckpoint, or the file was lost. "
                             f"Start afresh in another directory than {self.directory}.") \
                from err
        # Checked before anything is loaded: a refused restore changes nothing.
        if side["policy"] != repr(strategy.policy):
            raise ValueError(f"checkpoint {path} was written under {side['policy']}, this "
                             f"strategy runs {strategy.policy!r}; use the same policy.")
        schedule = strategy.controller.schedule
        if ("allocation" in side) != (schedule is not None):
            raise ValueError(f"checkpoint {path} was written "
                             f"{'with' if 'allocation' in side else 'without'} batch "
                             "allocation; build the strategy the same way.")
        with strategy.rule_lock:
            try:
                self._checkpoint.restore(path).assert_existing_objects_matched()
            except (ValueError, AssertionError, tf.errors.OpError) as err:
                raise ValueError(
                    f"checkpoint {path} cannot be restored into this model and strategy "
                    f"({type(err).__name__}: {err}). Build the same model, optimizer, "
                    "policy, lr_scaling and batch allocation as the run that wrote it, or "
                    f"start afresh in another directory than {self.directory}.") from err
            strategy.controller.set_state(side)  # the rule's PS copy was restored above
            strategy.rule_restored()
            if schedule is not None:
                schedule.allocator.set_state(side["allocation"]["allocator"])
                if schedule.forecaster is not None:
                    schedule.forecaster = type(schedule.forecaster).load(
                        f"{path}.forecaster.npz")
        return int(side["epoch"])

    def callback(self) -> keras.callbacks.Callback:
        """A callback that saves at the end of every epoch."""
        return _SaveEveryEpoch(self)


class _SaveEveryEpoch(keras.callbacks.Callback):
    def __init__(self, checkpoint):
        super().__init__()
        self.checkpoint = checkpoint

    def on_epoch_end(self, epoch, logs=None):
        # Under parameter-server training fit has joined every step of the epoch here.
        self.checkpoint.save(epoch + 1)


def wait_for_ps(cluster_resolver, timeout_s: float = 300.0, poll_s: float = 0.5) -> None:
    """Block until every PS task of the cluster accepts connections again; TimeoutError
    naming the tasks still down after ``timeout_s``."""
    tasks = cluster_resolver.cluster_spec().as_dict().get("ps", [])
    deadline = time.monotonic() + timeout_s
    while True:
        down = [address for address in tasks if probe(address) is not None]
        if not down:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"parameter server(s) {down} did not come back within "
                               f"{timeout_s:.0f} s; restart them (ksync-launch with their "
                               "TF_CONFIG) and check the network between chief and PS.")
        time.sleep(poll_s)
