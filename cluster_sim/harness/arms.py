"""The contenders of a comparison and the one parser of arm specs.

An arm is a rule (a `ksync` policy, optionally with batch allocation) and the step size
it trains with. Every command that compares rules (``demo``, ``simulate``, ``bench
policies``) reads its ``--arms`` with `parse_arm_specs`:

    NAME[=VALUE][@LR[/MOMENTUM]]

* ``NAME``: a contender of `CONTENDERS` (``bsp``, ``asp``, ``ssp``, ``ksync``, ...);
* ``=VALUE``: the rule's parameter, for the rules that have one (SSP's s, K-sync's K, ...);
* ``@LR``: the SGD learning rate, a number > 0, or ``linear``: the linear-scaling rule
  (the base rate times the samples of an update over one worker's batch, with a short
  warm-up: `ksync.learning_rate.linear_scaling`); without it the scenario's rate;
* ``/MOMENTUM``: the SGD momentum in [0, 1); without it the scenario's.

A row is labelled with what it was given: ``BSP @lr=0.4``, ``KAsync(k=2) @lr=0.01 m=0``,
``BSP @linear=0.16``; an arm at the scenario's rate keeps its bare label (``BSP``).

Example:

>>> [s.text for s in parse_arm_specs("bsp@0.4, kasync=2@0.01/0, adaptive")]
['bsp@0.4', 'kasync=2@0.01/0', 'adaptive']
>>> base = LearningRate(0.02, momentum=0.9)
>>> parse_arm_specs("bsp@linear")[0].arm(8, base, batch_size=32).label
'BSP @linear=0.16'
>>> parse_arm_specs("asp=2@0.1")
Traceback (most recent call last):
...
ValueError: arm 'asp=2@0.1': asp takes no value (only ssp, ksync, kasync, backup, rennala, ringmaster, syncswitch, ashl do); e.g. asp@0.1
"""

import dataclasses
import math

import ksync
from ksync import lr_scaling
from ksync.learning_rate import LearningRate, linear_scaling

__all__ = ["Arm", "Contender", "CONTENDERS", "ARMS", "ArmSpec", "parse_arm_specs",
           "parse_arms", "SPEC_HELP"]

#: What ``--help`` says about an arm spec.
SPEC_HELP = ("an arm is NAME[=VALUE][@LR[/MOMENTUM]]: e.g. bsp@0.4, kasync=2@0.01, "
             "asp@0.007/0.5 (momentum 0.5), bsp@linear (the linear-scaling rule: the "
             "base rate x the gradients of an update, with a short warm-up); without @ "
             "the scenario's learning rate and momentum")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One contender of a comparison: a policy spec for `ksync.parse` (e.g. "ksync:k=3"),
    how batch sizes are set: None (equal), "static" (profile then fixed, Chao et al.),
    "last" (last measured speeds), "forecast" (the shipped GRU forecaster) or "deadline"
    (what each worker finishes by the fastest's time: Non-blocking SGD), its step
    size (None: the run's learning rate and momentum) and the PS's learning-rate
    scaling (`ksync.lr_scaling`: "auto", the product's default, or "adascale", ...)."""

    label: str
    policy: str
    allocation: str | None = None
    learning_rate: LearningRate | None = None
    lr_scaling: str | None = lr_scaling.AUTO

    def make_policy(self):
        return ksync.parse(self.policy)

    def step_size(self, config) -> LearningRate:
        """The arm's `LearningRate`, else ``config``'s (a `RunConfig` or `SimConfig`).

        >>> from cluster_sim.harness.config import RunConfig
        >>> Arm("BSP", "bsp").step_size(RunConfig(learning_rate=0.05, momentum=0.9))
        LearningRate(rate=0.05, momentum=0.9, start=None, warmup_pushes=0)
        """
        if self.learning_rate is not None:
            return self.learning_rate
        return LearningRate(config.learning_rate, momentum=config.momentum)


@dataclasses.dataclass(frozen=True)
class Contender:
    """A named rule: its label and `ksync.parse` spec, with ``{}`` where its parameter
    goes when it has one, the parameter's value when a spec gives none (``default``),
    its batch allocation and its learning-rate scaling."""

    label: str
    policy: str
    default: int | None = None
    allocation: str | None = None
    lr_scaling: str | None = lr_scaling.AUTO

    @property
    def takes_value(self) -> bool:
        return "{}" in self.policy

    def arm(self, value: int | None = None) -> Arm:
        """The `Arm` at ``value`` (the default when None), at the run's step size."""
        if not self.takes_value:
            return Arm(self.label, self.policy, self.allocation, lr_scaling=self.lr_scaling)
        v = self.default if value is None else value
        return Arm(self.label.format(v), self.policy.format(v), self.allocation,
                   lr_scaling=self.lr_scaling)


#: Every named contender; the rules with a parameter first take ``=VALUE``.
CONTENDERS = {
    "bsp": Contender("BSP", "bsp"),
    "asp": Contender("ASP", "asp"),
    "ssp": Contender("SSP(s={})", "ssp:max_staleness={}", 3),
    "ksync": Contender("KSync(k={})", "ksync:k={}", 3),
    "kasync": Contender("KAsync(k={})", "kasync:k={}", 2),
    "backup": Contender("Backup(b={})", "backup:backups={}", 1),
    "rennala": Contender("Rennala(B={})", "rennala:batch={}", 4),
    "ringmaster": Contender("Ringmaster(R={})", "ringmaster:max_delay={}", 4),
    "syncswitch": Contender("Sync-Switch(after={})", "syncswitch:switch_after={}", 40),
    "ashl": Contender("ASHL(after={})", "ashl:switch_after={}", 40),
    "adasync": Contender("AdaSync", "adasync"),
    # The product's default: the "power" gain, a factor of it moved by the loss.
    "adaptive": Contender("Adaptive", "adaptive"),
    "adaptive+alloc": Contender("Adaptive+alloc", "adaptive", allocation="forecast"),
    # Ablations of the default (docs/user-guide.md, Learning rates): the power gain
    # without the loss's factor; AdaScale's gain instead; the user's rate as given.
    "adaptive+power": Contender("Adaptive+power", "adaptive:loss_step=false",
                                lr_scaling="power"),
    "adaptive+adascale": Contender("Adaptive+AdaScale", "adaptive:loss_step=false",
                                   lr_scaling="adascale"),
    "adaptive+unscaled": Contender("Adaptive unscaled", "adaptive:loss_step=false",
                                   lr_scaling=None),
    "chao": Contender("Chao static alloc", "bsp", allocation="static"),
    "lb-bsp": Contender("BSP+alloc(last)", "bsp", allocation="last"),
    "bsp+forecast": Contender("BSP+alloc(forecast)", "bsp", allocation="forecast"),
    "nbsgd": Contender("Non-blocking SGD", "bsp", allocation="deadline"),
}

#: What ``python -m cluster_sim demo --arms all`` compares (each at its default value).
ARMS = {name: CONTENDERS[name].arm() for name in (
    "bsp", "asp", "ssp", "ksync", "kasync", "backup", "adaptive", "adaptive+alloc", "chao",
    "lb-bsp", "bsp+forecast", "nbsgd", "ashl", "syncswitch")}


@dataclasses.dataclass(frozen=True)
class ArmSpec:
    """One parsed arm spec: the contender's name, its parameter (None: the default, or
    a benchmark's grid), learning rate (None: the scenario's; a float; "linear") and
    momentum (None: the scenario's)."""

    name: str
    value: int | None = None
    lr: float | str | None = None
    momentum: float | None = None

    @property
    def text(self) -> str:
        """The spec as a user writes it."""
        out = self.name + (f"={self.value}" if self.value is not None else "")
        if self.lr is not None or self.momentum is not None:
            out += "@" + ("base" if self.lr is None else f"{self.lr:g}"
                          if isinstance(self.lr, float) else self.lr)
            out += f"/{self.momentum:g}" if self.momentum is not None else ""
        return out

    @property
    def contender(self) -> Contender:
        return CONTENDERS[self.name]

    def arm(self, num_workers: int, base: LearningRate, batch_size: int) -> Arm:
        """The `Arm` on ``num_workers`` workers, the scenario's step size being ``base``
        (its rate and momentum) and one worker's batch ``batch_size``; the label says
        the step size when the spec sets one."""
        arm = self.contender.arm(self.value)
        if self.lr is None and self.momentum is None:
            return arm
        momentum = base.momentum if self.momentum is None else self.momentum
        if self.lr == "linear":
            k = arm.make_policy().rule(num_workers).k  # gradients of an update at the start
            step = linear_scaling(base.rate, k * batch_size, batch_size, momentum=momentum)
            suffix = f" @linear={step.rate:.3g}"
        else:
            step = LearningRate(base.rate if self.lr is None else self.lr, momentum=momentum)
            suffix = f" @lr={step.rate:g}"
        if momentum != base.momentum:
            suffix += f" m={momentum:g}"
        return dataclasses.replace(arm, label=arm.label + suffix, learning_rate=step)


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _parse_one(item: str, choices) -> ArmSpec:
    name_value, at, step = item.partition("@")
    name, eq, value = (part.strip() for part in name_value.partition("="))
    if name not in choices:
        raise ValueError(f"arm {item!r}: unknown name {name!r}; choose from "
                         f"{', '.join(choices)} or 'all'")
    contender = CONTENDERS[name]
    if eq and not contender.takes_value:
        takes = [n for n in choices if CONTENDERS[n].takes_value]
        raise ValueError(f"arm {item!r}: {name} takes no value (only {', '.join(takes)} "
                         f"do); e.g. {name}{at}{step}")
    if eq and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"arm {item!r}: the value after '=' must be an integer >= 1, e.g. "
                         f"{name}=4")
    spec = ArmSpec(name, int(value) if eq else None)
    if not at:
        return spec
    rate, slash, momentum = (part.strip() for part in step.partition("/"))
    lr = "linear" if rate == "linear" else _number(rate)
    if lr is None or (lr != "linear" and lr <= 0):
        raise ValueError(f"arm {item!r}: the learning rate after '@' must be a number > 0 "
                         f"or 'linear', got {rate!r}; e.g. {name}@0.05 or {name}@linear")
    mom = None
    if slash:
        mom = _number(momentum)
        if mom is None or not 0 <= mom < 1:
            raise ValueError(f"arm {item!r}: the momentum after '/' must be a number in "
                             f"[0, 1), got {momentum!r}; e.g. {name}@{rate}/0.5")
    return dataclasses.replace(spec, lr=lr, momentum=mom)


def parse_arm_specs(text: str, choices=tuple(CONTENDERS)) -> list[ArmSpec]:
    """The arms of a comma-separated list of specs (module docstring), or every name of
    ``choices`` for ``"all"``; ValueError names the bad spec, the problem and the fix.

    >>> parse_arm_specs("ksync=4@0.1/0.5")
    [ArmSpec(name='ksync', value=4, lr=0.1, momentum=0.5)]
    >>> parse_arm_specs("bsp@-1")
    Traceback (most recent call last):
    ...
    ValueError: arm 'bsp@-1': the learning rate after '@' must be a number > 0 or 'linear', got '-1'; e.g. bsp@0.05 or bsp@linear
    """
    choices = tuple(choices)
    if text.strip() == "all":
        return [ArmSpec(name) for name in choices]
    specs = [_parse_one(item.strip(), choices) for item in text.split(",") if item.strip()]
    if not specs:
        raise ValueError(f"no arm in {text!r}; give e.g. bsp,asp@0.01 or 'all'")
    return specs


def parse_arms(text: str) -> list[str]:
    """Names of `ARMS` from a comma-separated list, or every arm for ``"all"``
    (`parse_arm_specs` without values or learning rates); ValueError names the unknown
    ones and the choices.

    >>> parse_arms("bsp, lb-bsp")
    ['bsp', 'lb-bsp']
    """
    specs = parse_arm_specs(text, choices=ARMS)
    bad = [s.text for s in specs if s != ArmSpec(s.name)]
    if bad:
        raise ValueError(f"{', '.join(bad)}: this command takes names only")
    return [s.name for s in specs]
