"""strategies: the `tf.distribute` strategy, its Keras callback and the TF_CONFIG tools.

`KSyncStrategy`, `KSyncTelemetryCallback` and `KSyncLossCallback` are imported on first
use, so the launcher and `strategies.tf_config` load without TensorFlow. A training script
reaches them, and the checkpoint and launch helpers, as `ksync.KSyncStrategy`, ... (the
package's public namespace, `import ksync`); the names here stay for existing code.
"""

__all__ = ["KSyncStrategy", "KSyncTelemetryCallback", "KSyncLossCallback"]


def __getattr__(name):
    if name == "KSyncStrategy":
        from strategies.ksync_strategy import KSyncStrategy
        return KSyncStrategy
    if name == "KSyncTelemetryCallback":
        from strategies.callbacks import KSyncTelemetryCallback
        return KSyncTelemetryCallback
    if name == "KSyncLossCallback":
        from strategies.callbacks import KSyncLossCallback
        return KSyncLossCallback
    raise AttributeError(f"module 'strategies' has no attribute {name!r}")
