"""strategies: the `tf.distribute` strategy, its Keras callback and the TF_CONFIG tools.

`KSyncStrategy` and `KSyncTelemetryCallback` are imported on first use, so the launcher
and `strategies.tf_config` load without TensorFlow.
"""

__all__ = ["KSyncStrategy", "KSyncTelemetryCallback"]


def __getattr__(name):
    if name == "KSyncStrategy":
        from strategies.ksync_strategy import KSyncStrategy
        return KSyncStrategy
    if name == "KSyncTelemetryCallback":
        from strategies.callbacks import KSyncTelemetryCallback
        return KSyncTelemetryCallback
    raise AttributeError(f"module 'strategies' has no attribute {name!r}")
