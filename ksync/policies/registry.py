"""The registry: every policy by name, and a policy from a spec string.

>>> from ksync.policies.registry import parse
>>> parse("ksync:k=2")
KSync(k=2)
"""

import inspect
import json

from ksync.policies.adaptive import Adaptive
from ksync.policies.base import Policy
from ksync.policies.fixed import ASP, BSP, SSP, BackupWorkers, KAsync, KSync
from ksync.policies.literature import ASHL, AdaSync, Rennala, Ringmaster, SyncSwitch


_BY_NAME = {cls.name: cls for cls in (BSP, ASP, SSP, KSync, KAsync, BackupWorkers, Adaptive,
                                      SyncSwitch, ASHL, Rennala, Ringmaster, AdaSync)}


def parse(spec: str) -> Policy:
    """A fresh policy from ``name`` or ``name:key=value;...`` (e.g. ``"ksync:k=8"``)."""
    name, _, args = str(spec).strip().partition(":")
    kwargs = {}
    for item in filter(None, args.split(";")):
        key, _, value = item.partition("=")
        try:
            kwargs[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key.strip()] = value
    return get(name, **kwargs)


def get(name: str, **kwargs) -> Policy:
    """A policy by name, e.g. ``get("ksync", k=2)``."""
    if isinstance(name, Policy):
        return name
    key = str(name).lower().replace("-", "").replace("_", "")
    if key not in _BY_NAME:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(_BY_NAME)}.")
    cls = _BY_NAME[key]
    # Name the arguments and show a working call, not Python's bare "missing 1 required
    # positional argument" or "unexpected keyword argument".
    params = {p: v for p, v in inspect.signature(cls).parameters.items()
              if v.kind in (v.POSITIONAL_OR_KEYWORD, v.KEYWORD_ONLY)}
    missing = [p for p, v in params.items()
               if v.default is inspect.Parameter.empty and p not in kwargs]
    unknown = [k for k in kwargs if k not in params]
    if missing or unknown:
        takes = ", ".join(f"{p}=..." if v.default is inspect.Parameter.empty
                          else f"{p}={v.default!r}" for p, v in params.items())
        problem = " and ".join(([f"needs {', '.join(missing)}"] if missing else []) +
                               ([f"has no argument {', '.join(unknown)}"] if unknown else []))
        message = f"policy {name!r} {problem}; it takes {cls.__name__}({takes})"
        if missing:
            p = missing[0]
            message += f', e.g. ksync.get("{key}", {p}=2) or the spec "{key}:{p}=2"'
        raise ValueError(message + ".")
    return cls(**kwargs)
