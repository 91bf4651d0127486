"""Worker preemptions under TensorFlow's coordination service, the stock strategy beside
ksync's, on demand: the same `model.fit` (tf_keras, a small MLP on the digits data,
ASP-like stock updates or a ksync policy) on a local cluster of 1 PS and 4 workers, one
worker killed (SIGKILL) every ``--every-s`` seconds round robin and restarted ``--down-s``
later, for ``--minutes``. Prints how many kills the chief lived through and how it ended
(its exit code: 139 is a segmentation fault). Each strategy runs in a process of its own
(a native crash takes the process with it). Under the coordination service by default
(``--without-coordination-service``: the older handler):

    python tests/test_strategies/preemption_soak.py --strategy stock --minutes 8
    python tests/test_strategies/preemption_soak.py --strategy ksync --policy bsp --minutes 8

`python -m cluster_sim soak` is the product's soak (accuracy against an undisturbed run);
this script exists to tell TensorFlow's own failures from ksync's.
"""

import argparse
import faulthandler
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategy", choices=("stock", "ksync"), required=True)
    parser.add_argument("--policy", default="bsp", help="ksync policy (default bsp)")
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--every-s", type=float, default=22.0)
    parser.add_argument("--down-s", type=float, default=6.0)
    parser.add_argument("--without-coordination-service", action="store_true",
                        help="TensorFlow's older failure handler (no heartbeats)")
    args = parser.parse_args(argv)
    faulthandler.enable()
    if not args.without_coordination_service:
        os.environ["TF_PSS_ENABLE_COORDINATION_SERVICE"] = "1"

    import tensorflow as tf
    import tf_keras as keras

    from cluster_sim.local_cluster import LocalCluster
    from cluster_sim.netns import isolate_loopback
    from cluster_sim.workloads import load

    data = load("digits")
    isolate_loopback()
    kills = []
    with LocalCluster(num_workers=4) as cluster:
        if args.strategy == "stock":
            strategy = tf.distribute.experimental.ParameterServerStrategy(cluster.resolver())
        else:
            import ksync
            strategy = ksync.KSyncStrategy(cluster.resolver(), policy=args.policy)
        with strategy.scope():
            model = keras.Sequential([keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(10)])
            model.compile(keras.optimizers.SGD(0.05),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          steps_per_execution=1)
        stop = threading.Event()
        end = time.monotonic() + args.minutes * 60

        def preempt():
            worker = 0
            while not stop.wait(args.every_s) and time.monotonic() < end - args.down_s:
                cluster.kill("worker", worker)
                kills.append(round(time.monotonic() - end + args.minutes * 60))
                print(f"kill {len(kills)}: worker {worker} at {kills[-1]} s", flush=True)
                time.sleep(args.down_s)
                cluster.restart("worker", worker)
                worker = (worker + 1) % 4

        killer = threading.Thread(target=preempt, daemon=True)
        killer.start()
        class StopInTime(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self._supports_tf_logs = True  # what tf_keras asks of a batch hook here

            def on_train_batch_end(self, batch, logs=None):
                self.model.stop_training = time.monotonic() >= end

        fits = 0
        try:
            # One long fit, as a user's (the harness's) training is; a new one only when
            # it failed: the last step's logs can live on a worker killed since.
            while time.monotonic() < end:
                fits += 1
                try:
                    model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(32)),
                              epochs=1, steps_per_epoch=10**7, verbose=0,
                              callbacks=[StopInTime()])
                except (tf.errors.UnavailableError, tf.errors.AbortedError,
                        tf.errors.CancelledError, tf.errors.InvalidArgumentError) as err:
                    print(f"fit {fits} ended early: {type(err).__name__}", flush=True)
        finally:
            stop.set()
            killer.join()
    sys.stdout.flush()
    print(f"{args.strategy}: survived {len(kills)} kills, {fits} fits, "
          f"{args.minutes:g} minutes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
