"""Train a small MLP on scikit-learn's digits with `KSyncStrategy`, unchanged anywhere.

* One machine (no TF_CONFIG): starts a local cluster of one parameter server and
  ``--workers`` workers as separate processes on 127.0.0.1 (`ksync.LocalCluster`) and
  trains on it, this process being the chief:

      python examples/train_digits.py --policy bsp

* Several machines: TF_CONFIG names this process the chief, so the strategy is built from
  it; run it through the launcher, with ``ksync-launch`` (no script) on every ps and
  worker machine (see README, "Multi-machine launch"):

      ksync-launch -- python examples/train_digits.py --policy bsp

The last line printed is ``RESULT {json}`` (accuracy, pushes, updates, seconds); with
``--result PATH`` the same JSON is also written to PATH.
"""

import argparse
import gc
import json
import os
import sys
import time

# tf_keras, not Keras 3, drives parameter-server training; set before TensorFlow loads.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="adaptive",
                        help="ksync policy name: bsp, asp, ssp, ksync, kasync, backup, adaptive")
    parser.add_argument("--epochs", type=int, default=3, help="epochs (default 3)")
    parser.add_argument("--steps-per-epoch", type=int, default=100,
                        help="pushes (worker mini-batches) per epoch")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="samples per worker mini-batch (default 32)")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    parser.add_argument("--workers", type=int, default=2,
                        help="workers of the local cluster (ignored under TF_CONFIG)")
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit with code 1 if the test accuracy ends below this")
    parser.add_argument("--result", help="also write the RESULT JSON to this file")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's start-up and C++ log lines")
    return parser.parse_args(argv)


def train(strategy, args) -> dict:
    """Build, fit and evaluate the model under ``strategy``; return the measurements."""
    import tf_keras as keras

    from cluster_sim.workloads import compile_classifier, digits, mlp

    data = digits()
    with strategy.scope():
        model = compile_classifier(mlp(data.num_features, data.num_classes),
                                   keras.optimizers.SGD(args.lr, momentum=0.9))
    started = time.monotonic()
    model.fit(keras.utils.experimental.DatasetCreator(data.dataset_fn(args.batch_size)),
              epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
    seconds = time.monotonic() - started
    loss, accuracy = model.evaluate(data.test_dataset(), steps=1, verbose=0)
    t = strategy.telemetry()
    return {"accuracy": float(accuracy), "loss": float(loss), "pushed": int(t["pushed"]),
            "applied": int(t["applied"]), "version": int(t["version"]),
            "workers": len(t["workers"]), "policy": repr(strategy.policy),
            "train_seconds": round(seconds, 2)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import ksync
    ksync.quiet_tensorflow(args.verbose)
    if os.environ.get("TF_CONFIG"):
        # On a real cluster: this process is the chief named by TF_CONFIG.
        result = train(ksync.strategy_from_tf_config(policy=args.policy), args)
    else:
        # On one machine: the same training against a local cluster of processes.
        from cluster_sim.netns import isolate_loopback
        isolate_loopback()  # keep the local servers off the machine's real interfaces
        with ksync.LocalCluster(num_workers=args.workers) as cluster:
            result = train(ksync.KSyncStrategy(cluster.resolver(), policy=args.policy), args)
            # Free the model's functions while the servers still answer: freed after
            # they stop, each one logs a "failed to remove function remotely" error.
            gc.collect()
    line = json.dumps(result)
    print(f"RESULT {line}", flush=True)
    if args.result:
        with open(args.result, "w") as f:
            f.write(line + "\n")
    if result["accuracy"] < args.min_accuracy:
        print(f"test accuracy {result['accuracy']:.3f} is below --min-accuracy "
              f"{args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
