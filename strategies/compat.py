"""The TensorFlow range whose private APIs this package was tested against."""

import tensorflow as tf

TESTED_RANGE = ((2, 21), (2, 21))


def check_tensorflow_version(version: str | None = None) -> None:
    """Raise ImportError naming the fix when TensorFlow is outside the tested range.

    KSyncStrategy subclasses the parameter-server strategy's extended class and wraps the
    coordinator's closure queue, both private; other versions may differ silently.
    """
    version = version or tf.__version__
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    low, high = TESTED_RANGE
    if not low <= major_minor <= high:
        raise ImportError(
            f"ksync was tested with TensorFlow {low[0]}.{low[1]}.x to {high[0]}.{high[1]}.x "
            f"and relies on private parameter-server APIs; found {version}. Install a "
            f"tested version: pip install 'tensorflow>={low[0]}.{low[1]},<{high[0]}."
            f"{high[1] + 1}' 'tf-keras>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}'")
