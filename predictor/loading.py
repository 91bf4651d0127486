"""Load any saved forecaster, whatever its class.

`Forecaster.load` knows only the classes already imported (each registers itself on
import); `load` imports the module of the class a file names first, so a file written
by any forecaster loads without the caller importing its module, and TensorFlow loads
only for the neural forecasters.

Example:

>>> import numpy as np, os, tempfile
>>> from predictor.baselines import LastValue
>>> path = os.path.join(tempfile.mkdtemp(), "last.npz")
>>> LastValue().fit([np.ones(20)]).save(path)
>>> type(load(path)).__name__
'LastValue'
"""

from . import baselines  # noqa: F401  (registers the numpy forecasters)
from .base import Forecaster
from .persist import read_file

#: classes defined in predictor.gru, imported only when a file holds one (TensorFlow).
_NEURAL = ("GRUSmoothingForecaster", "GRUOnly")


def load(path) -> Forecaster:
    """Load any forecaster saved with ``save(path)``."""
    header, _ = read_file(path)
    if header.get("class") in _NEURAL:
        from . import gru  # noqa: F401
    return Forecaster.load(path)
