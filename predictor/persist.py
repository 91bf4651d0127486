"""Single-file ``.npz`` persistence for forecasters (no pickle: loading never runs code).

A file holds a JSON header (format, version, class name, constructor
parameters) and named numpy arrays (fitted state, online buffers).

Example:

>>> import numpy as np, tempfile, os
>>> from predictor.persist import write_file, read_file
>>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
>>> write_file(path, {"class": "LastValue", "params": {}}, {"w": np.ones(2)})
>>> header, arrays = read_file(path)
>>> header["class"], arrays["w"].tolist()
('LastValue', [1.0, 1.0])
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

__all__ = ["ForecasterFileError", "FORMAT", "VERSION", "write_file", "read_file"]

FORMAT = "ksync-predictor"
VERSION = 1


class ForecasterFileError(OSError):
    """A forecaster file is missing, truncated, corrupt or of the wrong kind.

    The message names the file and says how to fix it.
    """


def write_file(path, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` and ``arrays`` to ``path`` exactly as named (no suffix added)."""
    full = dict(header, format=FORMAT, version=VERSION)
    payload = {f"a_{k}": np.asarray(v) for k, v in arrays.items()}
    payload["header"] = np.array(json.dumps(full, sort_keys=True))
    tmp = f"{os.fspath(path)}.tmp"
    # Write then rename so a crash mid-save cannot leave a truncated model behind.
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **payload)
    os.replace(tmp, path)


def read_file(path) -> tuple[dict, dict[str, np.ndarray]]:
    """Return ``(header, arrays)``; raise ``ForecasterFileError`` with a fix on any problem."""
    path = os.fspath(path)
    fix = ("re-create it with forecaster.fit(...) then forecaster.save(path), or use "
           "GRUSmoothingForecaster.default() / `python -m predictor.train_default`")
    if not os.path.exists(path):
        raise ForecasterFileError(f"forecaster file {path!r} does not exist; {fix}")
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a_")}
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError) as exc:
        raise ForecasterFileError(
            f"forecaster file {path!r} is truncated or not a ksync predictor file "
            f"({type(exc).__name__}: {exc}); {fix}") from exc
    if header.get("format") != FORMAT:
        raise ForecasterFileError(f"{path!r} is not a ksync predictor file; {fix}")
    if header.get("version") != VERSION:
        raise ForecasterFileError(
            f"{path!r} has format version {header.get('version')}, this ksync reads "
            f"version {VERSION}; {fix}")
    return header, arrays
