"""The arms of `bench policies`: each rule's grid over its parameter, learning rate and
momentum, the oracle-tuned choice, and where a choice sits in its grid.

``--arms`` is read by the one arm parser (`cluster_sim.harness.arms.parse_arm_specs`,
``NAME[=VALUE][@LR[/MOMENTUM]]``). A rule given without a value runs its parameter's
grid (`FAMILIES`); with ``lr_grid`` (``--lr-grid``) every fixed and literature rule also
runs each learning rate of a factor-2 grid (`lr_values`), the rules that apply every
gradient (asynchronous, staleness allowed) each momentum of `MOMENTA`, and each value its
linear-scaling arm (``@linear``, the untuned practitioner's choice, never the oracle's).
Adaptive gets the base learning rate only (`BASE_ONLY`). ``tuned`` (from
``--tune-seeds``, ``--tuned-from``, ``--grid-from-sim``) replaces a rule's grid by its
chosen (value, learning rate, momentum).

Example:

>>> base = LearningRate(0.02, momentum=0.9)
>>> [a.arm.label for a in bench_arms(parse_arm_specs("bsp"), 4, base=base, lr_grid="auto")]
['BSP @lr=0.0025', 'BSP @lr=0.005', 'BSP @lr=0.01', 'BSP @lr=0.02', 'BSP @lr=0.04', 'BSP @lr=0.08', 'BSP @lr=0.16', 'BSP @linear=0.08']
>>> tuned = {"bsp": ArmSpec("bsp", lr=0.04)}
>>> [a.arm.label for a in bench_arms(["bsp", "adaptive"], 4, tuned, base=base, lr_grid="auto")]
['BSP @lr=0.04', 'BSP @linear=0.08', 'Adaptive']
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import statistics

from cluster_sim.harness.arms import ArmSpec, CONTENDERS, Arm, parse_arm_specs
from cluster_sim.report.results import median_tta
from ksync.learning_rate import LearningRate

__all__ = ["FAMILIES", "ORDER", "MOMENTA", "BASE_ONLY", "BenchArm", "matrix_specs",
           "parse_families", "pinned_values", "parse_lr_grid", "lr_values", "bench_arms",
           "best_settings", "oracle_choices", "baseline_label", "grid_edges",
           "oracle_settings", "tuned_from", "check_arms", "coarse_arms", "refined_arms",
           "tuned_arms", "tuning_choices", "past_edge_arms", "PAST_EDGE_STEPS",
           "scenario_base", "scenario_arms"]


@dataclasses.dataclass(frozen=True)
class Family:
    """A rule with a parameter grid: ``grid(num_workers)`` gives its values, ``least``
    its smallest meaningful value, ``below_n`` whether a value must stay under the
    number of workers (k = N is BSP, an arm of its own)."""

    grid: object  # num_workers -> tuple of values
    least: int = 1
    below_n: bool = False

    def values(self, n: int) -> tuple:
        return tuple(sorted({int(v) for v in self.grid(n) if v >= 1}))

    def past(self, value: int, n: int, upward: bool) -> int | None:
        """The value one step past ``value`` (twice or half it; under ``below_n`` half
        way to n), None where the rule has no such value.

        >>> FAMILIES["ksync"].past(48, 64, True), FAMILIES["ksync"].past(2, 64, False)
        (56, None)
        """
        if upward:
            step = (value + n) // 2 if self.below_n and 2 * value >= n else 2 * value
            ok = step > value and (not self.below_n or step < n)
        else:
            step = value // 2
            ok = self.least <= step < value
        return step if ok else None


def _fractions(n, *fs, below=None, least=1):
    """``round(f * n)`` for each fraction, at least ``least``, below ``below``."""
    return tuple(v for v in (max(least, round(f * n)) for f in fs)
                 if below is None or v < below)


#: The parameter grids of the rules that have one (values depend on the workers);
#: labels and policies are `cluster_sim.harness.arms.CONTENDERS`'.
FAMILIES = {
    "ssp": Family(lambda n: (1, 2, 4, 8)),
    # k = 1 is ASP and k = N BSP (arms of their own).
    "ksync": Family(lambda n: _fractions(n, .25, .5, .75, below=n, least=2), 2, True),
    "kasync": Family(lambda n: _fractions(n, .25, .5, .75, below=n, least=2), 2, True),
    "backup": Family(lambda n: _fractions(n, 1 / 8, .25, below=n), 1, True),
    "rennala": Family(lambda n: _fractions(n, .5, 1, 2)),
    "ringmaster": Family(lambda n: _fractions(n, .5, 1, 2)),
    # The switch point in updates: an eighth, a quarter and a half of the ~1,100 BSP
    # updates the benchmark's target takes on 8 workers.
    "syncswitch": Family(lambda n: (128, 256, 512)),
    "ashl": Family(lambda n: (128, 256, 512)),
}
#: The matrix's rules in order; BSP first, the baseline of every ratio.
ORDER = ("bsp", "asp", "ssp", "ksync", "kasync", "backup", "rennala", "ringmaster",
         "adasync", "syncswitch", "ashl", "chao", "lb-bsp", "nbsgd", "adaptive",
         "adaptive+alloc", "adaptive+power", "adaptive+adascale", "adaptive+unscaled")
#: The momenta a rule that applies every gradient is tried at: asynchrony acts like
#: momentum of its own (Mitliagkas et al. 2016), so the best explicit one may be lower.
MOMENTA = (0.9, 0.5, 0.0)
#: Rules that get the base learning rate only: they are what the race measures.
BASE_ONLY = ("adaptive", "adaptive+alloc", "adaptive+power", "adaptive+adascale",
             "adaptive+unscaled")


@dataclasses.dataclass(frozen=True)
class BenchArm:
    """One arm of the matrix: its family (rule name), the harness `Arm`, its grid value
    (None without a grid) and the spec it was made from (its learning rate and
    momentum: None for the scenario's, "linear" for linear scaling)."""

    family: str
    arm: Arm
    value: int | None = None
    spec: ArmSpec | None = None

    @property
    def linear(self) -> bool:
        return self.spec is not None and self.spec.lr == "linear"


def matrix_specs(text: str) -> list[ArmSpec]:
    """``--arms`` (`parse_arm_specs`, "all": every rule of `ORDER`) with BSP added
    when absent: every ratio is to BSP.

    >>> [s.text for s in matrix_specs("kasync=2@0.01")]
    ['bsp', 'kasync=2@0.01']
    """
    specs = parse_arm_specs(text, ORDER)
    return specs if any(s.name == "bsp" for s in specs) else [ArmSpec("bsp"), *specs]


def parse_families(text: str) -> list[str]:
    """The rules ``--arms`` names (`parse_arm_specs`), in the matrix's order, BSP always
    included (every ratio is to BSP).

    >>> parse_families("ksync=4@0.1, asp")
    ['bsp', 'asp', 'ksync']
    """
    names = {s.name for s in matrix_specs(text)}
    return [name for name in ORDER if name in names]


def pinned_values(text: str) -> dict:
    """The grid values ``--arms`` pins (``kasync=64``: that value only, on every worker
    count, as a user who has tuned it would run it).

    >>> pinned_values("bsp, kasync=64@0.01, adaptive")
    {'kasync': 64}
    """
    return {s.name: s.value for s in parse_arm_specs(text, ORDER) if s.value is not None}


def parse_lr_grid(text: str | None):
    """``--lr-grid``: None or "" (no grid: the scenario's rate), "auto" (`lr_values`) or
    comma-separated rates > 0; ValueError names a bad one.

    >>> parse_lr_grid("0.01, 0.02,0.04"), parse_lr_grid("auto"), parse_lr_grid(None)
    ((0.01, 0.02, 0.04), 'auto', None)
    """
    if not text:
        return None
    if text.strip() == "auto":
        return "auto"
    try:
        rates = tuple(sorted({float(r) for r in text.split(",") if r.strip()}))
    except ValueError:
        rates = ()
    if not rates or not all(0 < r < math.inf for r in rates):
        raise ValueError(f"--lr-grid {text!r}: give 'auto' or comma-separated learning "
                         "rates > 0, e.g. --lr-grid 0.01,0.02,0.04")
    return rates


def lr_values(lr_grid, base: float, gradients_per_update: int) -> tuple:
    """The learning rates to try: ``lr_grid`` itself, or for "auto" a factor-2 grid from
    ``base`` / 8 to twice the linear-scaling rate (``base`` x the gradients of an
    update), at least to 4 x ``base``: wide enough that the best rate is inside for the
    rules measured (ASP's best on 8 workers ~``base`` / 3, BSP's on 256 ~40 x ``base``).

    >>> lr_values("auto", 0.02, 1)
    (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08)
    """
    if lr_grid != "auto":
        return tuple(lr_grid)
    top = math.ceil(math.log2(max(2, gradients_per_update))) + 1
    return tuple(round(base * 2.0 ** j, 12) for j in range(-3, top + 1))


def _applies_every_gradient(arm: Arm, n: int) -> bool:
    """An asynchronous rule that lets stale gradients in (at its start): ASP, SSP,
    Ringmaster, K-async, ASHL's first stage; not Rennala (staleness 0)."""
    rule = arm.make_policy().rule(n)
    return not rule.wait and (rule.max_staleness is None or rule.max_staleness > 0)


def _as_spec(item) -> ArmSpec:
    """An `ArmSpec`, or one parsed from its text ("ksync=4@0.1")."""
    return item if isinstance(item, ArmSpec) else parse_arm_specs(item, ORDER)[0]


def _tuned_spec(tuned, name) -> ArmSpec | None:
    chosen = (tuned or {}).get(name)
    if chosen is None or isinstance(chosen, ArmSpec):
        return chosen
    return ArmSpec(name, int(chosen))  # a grid value alone (earlier results)


def bench_arms(specs, num_workers: int, tuned: dict | None = None, *,
               base: LearningRate | None = None, batch_size: int = 32,
               lr_grid=None) -> list[BenchArm]:
    """Every arm of ``specs`` (`ArmSpec`s or their texts, e.g. `matrix_specs`'s) on
    ``num_workers`` workers, in the matrix's order: each grid value of a rule given no
    value, and with ``lr_grid`` each learning rate (and momentum) of its grid and its
    linear-scaling arm (module docstring). ``tuned[name]`` (an `ArmSpec`, or a grid
    value) replaces a grid by the chosen setting; what a spec sets itself wins.
    ``base`` is the scenario's step size, ``batch_size`` one worker's batch.

    >>> [a.arm.label for a in bench_arms(["bsp", "ksync"], 8)]
    ['BSP', 'KSync(k=2)', 'KSync(k=4)', 'KSync(k=6)']
    >>> [a.arm.policy for a in bench_arms(["ksync"], 8, tuned={"ksync": 4})]
    ['ksync:k=4']
    """
    base = base or LearningRate(0.02, momentum=0.9)
    specs = sorted((_as_spec(s) for s in specs),
                   key=lambda s: ORDER.index(s.name) if s.name in ORDER else len(ORDER))
    out = []
    for spec in specs:
        chosen = _tuned_spec(tuned, spec.name)
        given = spec.lr is not None or spec.momentum is not None
        if spec.value is not None:
            values = (spec.value,)
        elif chosen is not None and chosen.value is not None:
            values = (chosen.value,)
        elif spec.name in FAMILIES:
            values = FAMILIES[spec.name].values(num_workers)
        else:
            values = (None,)
        for value in values:
            one = dataclasses.replace(spec, value=value)
            if given:
                steps = [(spec.lr, spec.momentum)]
            elif chosen is not None and (chosen.lr is not None or chosen.momentum is not None):
                steps = [(chosen.lr, chosen.momentum)]
            elif lr_grid and spec.name not in BASE_ONLY:
                arm = one.contender.arm(value)
                k = arm.make_policy().rule(num_workers).k
                momenta = MOMENTA if _applies_every_gradient(arm, num_workers) else (None,)
                steps = [(lr, m) for lr in lr_values(lr_grid, base.rate, k) for m in momenta]
            else:
                steps = [(None, None)]
            if lr_grid and spec.name not in BASE_ONLY and not given:
                steps.append(("linear", None))  # the untuned practitioner's choice
            for lr, momentum in steps:
                s = dataclasses.replace(one, lr=lr, momentum=momentum)
                out.append(BenchArm(spec.name, s.arm(num_workers, base, batch_size), value, s))
    return list({a.arm.label: a for a in out}.values())  # one arm per label


def scenario_base(scenario) -> LearningRate:
    """The scenario's step size: the base of every arm's learning rate."""
    return LearningRate(scenario.learning_rate, momentum=scenario.momentum)


def scenario_arms(specs, n, scenario, lr_grid, tuned=None) -> list[BenchArm]:
    """The matrix's arms (`bench_arms`) on ``n`` workers of ``scenario``: its learning
    rate the base, its batch one worker's."""
    return bench_arms(specs, n, tuned, lr_grid=lr_grid, batch_size=scenario.batch_size,
                      base=scenario_base(scenario))


def check_arms(arms, num_workers: int) -> None:
    """Build every arm's policy for ``num_workers`` workers before any run; a
    ValueError names the arm and the problem (e.g. a rule ksync does not have yet)."""
    for a in arms:
        try:
            a.arm.make_policy().rule(num_workers)
        except (ValueError, TypeError) as err:
            raise ValueError(f"arm {a.arm.label} ({a.arm.policy!r}): {err}") from None


# ---- pruning the grid (--tune-stages) ----------------------------------------------------

def _log2_ratio(a: float, b: float) -> float:
    return math.log2(a / b)


def coarse_arms(arms, base: LearningRate) -> list:
    """Stage 1 of a pruned tuning: of each rule's grid (linear-scaling arms aside), every
    parameter value at the base momentum and the learning rates a factor 4 apart through
    the base rate (every other rate of the factor-2 grid).

    >>> base = LearningRate(0.02, momentum=0.9)
    >>> arms = bench_arms(["asp"], 8, base=base, lr_grid="auto")
    >>> [a.arm.label for a in coarse_arms(arms, base)]
    ['ASP @lr=0.005', 'ASP @lr=0.02', 'ASP @lr=0.08']
    """
    out = []
    for a in arms:
        step = a.arm.learning_rate
        if a.linear or step is None or a.family in BASE_ONLY:
            continue
        even = round(_log2_ratio(step.rate, base.rate)) % 2 == 0
        if even and step.momentum == base.momentum:
            out.append(a)
    return out


def refined_arms(arms, chosen: dict, base: LearningRate) -> list:
    """Stage 2: around each rule's stage-1 choice (``chosen[rule]``, a label of
    ``arms``): at its parameter value, its learning rate and the two a factor 2 either
    side at the base momentum, and for each other momentum m of the grid the rates
    within a factor 2 of the same effective step (rate / (1 - m): the rate x (1 - m) /
    (1 - base momentum)), or the grid's nearest rate when none is that near.

    >>> base = LearningRate(0.02, momentum=0.9)
    >>> arms = bench_arms(["asp"], 8, base=base, lr_grid="auto")
    >>> [a.arm.label for a in refined_arms(arms, {"asp": "ASP @lr=0.005"}, base)]
    ['ASP @lr=0.0025', 'ASP @lr=0.005', 'ASP @lr=0.01', 'ASP @lr=0.02 m=0.5', 'ASP @lr=0.04 m=0.5', 'ASP @lr=0.04 m=0', 'ASP @lr=0.08 m=0']
    """
    by_label = {a.arm.label: a for a in arms}
    out = []
    for name, label in chosen.items():
        best = by_label[label]
        rate = best.arm.learning_rate.rate
        grid = [a for a in arms if a.family == name and not a.linear
                and a.arm.learning_rate is not None and a.value == best.value]
        for momentum in dict.fromkeys(a.arm.learning_rate.momentum for a in grid):
            centre = rate * (1 - momentum) / (1 - base.momentum)
            same = [a for a in grid if a.arm.learning_rate.momentum == momentum]
            near = [a for a in same
                    if abs(_log2_ratio(a.arm.learning_rate.rate, centre)) <= 1.0 + 1e-9]
            # None that near (the centre beyond the grid): the grid's nearest rate.
            out += near or [min(same, key=lambda a: abs(_log2_ratio(a.arm.learning_rate.rate,
                                                                    centre)))]
    return [a for a in arms if a in out]  # in the grid's order


def tuned_arms(arms) -> list:
    """The arms a tuning chooses among: each rule's settings, linear-scaling arms
    aside, for the rules run at more than one."""
    return [a for a in arms if not a.linear and sum(
        b.family == a.family and not b.linear for b in arms) > 1]


#: How many times a pruned tuning steps past the edge of a rule's grid its choice sits
#: at (stage 3): a best setting at an edge may not be the best.
PAST_EDGE_STEPS = 3


def past_edge_arms(pool, label, num_workers: int, base: LearningRate) -> list:
    """Stage 3: the arms one step past each edge of its rule's grid (its arms in
    ``pool``) that the arm ``label`` sits at (`grid_edges`): a factor 2 further in
    learning rate at its value and momentum; the next value (`Family.past`) at its
    learning rate and the two a factor 2 either side. Arms ``pool`` has are left out.

    >>> base = LearningRate(0.02, momentum=0.9)
    >>> arms = bench_arms(["asp"], 8, base=base, lr_grid="auto")
    >>> [a.arm.label for a in past_edge_arms(arms, "ASP @lr=0.0025", 8, base)]
    ['ASP @lr=0.00125']
    >>> arms = bench_arms(["ksync"], 8, base=base, lr_grid=(0.01, 0.02, 0.04))
    >>> [a.arm.label for a in past_edge_arms(arms, "KSync(k=6) @lr=0.02", 8, base)]
    ['KSync(k=7) @lr=0.01', 'KSync(k=7) @lr=0.02', 'KSync(k=7) @lr=0.04']
    """
    best = next(a for a in pool if a.arm.label == label)
    spec = best.spec or ArmSpec(best.family, best.value)
    specs = []
    for edge in grid_edges(pool, label):
        what, side = edge.split()
        if what == "lr" and isinstance(spec.lr, float):
            factor = 2.0 if side == "highest" else 0.5
            specs.append(dataclasses.replace(spec, lr=round(spec.lr * factor, 12)))
        elif what == "value" and best.family in FAMILIES:
            value = FAMILIES[best.family].past(best.value, num_workers, side == "highest")
            rates = ([round(spec.lr * f, 12) for f in (0.5, 1.0, 2.0)]
                     if isinstance(spec.lr, float) else [spec.lr])
            specs += [dataclasses.replace(spec, value=value, lr=r) for r in rates
                      if value is not None]
    have = {a.arm.label for a in pool}
    # batch_size serves linear-scaling arms only, which a tuning never chooses.
    made = [BenchArm(best.family, s.arm(num_workers, base, batch_size=0), s.value, s)
            for s in specs]
    return [a for a in {a.arm.label: a for a in made}.values() if a.arm.label not in have]


def tuning_choices(results, arms, seeds, base: LearningRate | None = None,
                   num_workers: int | None = None, run=None) -> tuple[dict, list]:
    """Each rule's chosen label among ``arms`` (`tuned_arms`) from the tuning runs
    ``results`` on ``seeds``, and the arms it chose among: the best over all of them, or
    with ``base`` (a pruned tuning, ``--tune-stages``) the best of `refined_arms` around
    each rule's choice among `coarse_arms` on the first seed, then up to
    `PAST_EDGE_STEPS` times the best with `past_edge_arms` added where a choice sits at
    an edge (those that ran: ``run(arms)`` runs them on ``seeds`` and returns their
    results). What the bench chooses, and the tables recompute from a store.

    >>> base = LearningRate(0.02, momentum=0.9)
    >>> arms = bench_arms(["asp"], 8, base=base, lr_grid="auto")
    >>> runs = [{"policy": "ASP @lr=0.005", "seed": 100, "tta_s": 9.0},
    ...         {"policy": "ASP @lr=0.02", "seed": 100, "tta_s": 12.0},
    ...         {"policy": "ASP @lr=0.0025", "seed": 100, "tta_s": 8.0},
    ...         {"policy": "ASP @lr=0.02", "seed": 101, "tta_s": 1.0}]
    >>> tuning_choices(runs, arms, [100], base, 8)[0], tuning_choices(runs, arms, [100, 101])[0]
    ({'asp': 'ASP @lr=0.0025'}, {'asp': 'ASP @lr=0.02'})
    >>> runs.append({"policy": "ASP @lr=0.00125", "seed": 100, "tta_s": 7.0})
    >>> tuning_choices(runs, arms, [100], base, 8)[0]
    {'asp': 'ASP @lr=0.00125'}
    """
    # Every rule of `tuned_arms` is chosen for, however few of its arms a stage holds.
    chosen = tuned_arms(arms)
    results = [r for r in results if r["seed"] in seeds]
    if base is None:
        return best_settings(results, chosen), list(arms)
    coarse = coarse_arms(chosen, base)
    first = [r for r in results if r["seed"] == seeds[0]]
    chosen = refined_arms(chosen, best_settings(first, coarse), base)
    choices, pool = best_settings(results, chosen), list(arms)
    for _ in range(PAST_EDGE_STEPS):
        new = [a for label in choices.values()
               for a in past_edge_arms(pool, label, num_workers, base)]
        if new and run is not None:
            results = results + [r for r in run(new) if r["seed"] in seeds]
        new = [a for a in new if per_seed(results, a.arm.label)]
        if not new:
            break
        pool, chosen = pool + new, chosen + new
        choices = best_settings(results, chosen)
    return choices, pool


# ---- choosing ---------------------------------------------------------------------------

def per_seed(results, label) -> dict:
    """``{seed: run}`` of the arm labelled ``label``."""
    return {r["seed"]: r for r in results if r["policy"] == label}


def _tta_key(results, label):
    """Sort key of an arm: median TTA (never = inf), then median final loss."""
    runs = list(per_seed(results, label).values())
    tta = median_tta([r["tta_s"] for r in runs])
    losses = [r.get("final_loss") for r in runs if r.get("final_loss") is not None]
    return (math.inf if tta is None else tta, statistics.median(losses) if losses else math.inf)


def best_settings(results, arms) -> dict:
    """Each rule's best arm among ``arms`` that ran (linear-scaling arms aside), however
    few of its settings ``arms`` holds (a pruned tuning's stage may hold one): the
    lowest median time to target over seeds, then the lowest final loss.

    >>> runs = [{"policy": "BSP @lr=0.08", "seed": 0, "tta_s": 9.0}]
    >>> best_settings(runs, bench_arms(["bsp"], 8, lr_grid=(0.01, 0.08))[1:])
    {'bsp': 'BSP @lr=0.08'}
    """
    choices = {}
    for name in dict.fromkeys(a.family for a in arms):
        ran = [a.arm.label for a in arms if a.family == name and not a.linear
               and per_seed(results, a.arm.label)]
        if ran:
            choices[name] = min(ran, key=lambda label: _tta_key(results, label))
    return choices


def oracle_choices(results, arms) -> dict:
    """Per rule among ``arms`` run at several settings (grid values, learning rates,
    momenta; linear-scaling arms aside): the label of its best (`best_settings`); a
    rule run at one setting (tuned beforehand: ``--arms kasync=4``, ``--tuned-from``) is
    tuned at it.

    >>> runs = [{"policy": "KSync(k=2)", "seed": 0, "tta_s": 9.0},
    ...         {"policy": "KSync(k=4)", "seed": 0, "tta_s": 7.0}]
    >>> oracle_choices(runs, bench_arms(["ksync"], 6))
    {'ksync': 'KSync(k=4)'}
    """
    # A rule without a grid at one setting: no choice was made.
    made = {a.family for a in arms if a.family in FAMILIES or sum(
        b.family == a.family and not b.linear for b in arms) >= 2}
    return best_settings(results, [a for a in arms if a.family in made])


def baseline_label(results, arms) -> str:
    """The BSP every ratio is to: its one arm, or its oracle choice among several
    (learning rates), never a linear-scaling arm."""
    bsp = [a.arm.label for a in arms if a.family == "bsp" and not a.linear]
    if len(bsp) == 1:
        return bsp[0]
    return oracle_choices(results, [a for a in arms if a.family == "bsp"]).get("bsp", "BSP")


def grid_edges(arms, label) -> list[str]:
    """Where the arm ``label`` sits at an edge of its rule's grid: "value lowest",
    "lr highest", ... (a tuned value at an edge may not be the best: widen the grid).

    >>> arms = bench_arms(["ksync"], 8, base=LearningRate(0.02), lr_grid=(0.01, 0.02))
    >>> grid_edges(arms, "KSync(k=6) @lr=0.01")
    ['value highest', 'lr lowest']
    """
    chosen = next(a for a in arms if a.arm.label == label)
    family = [a for a in arms if a.family == chosen.family and not a.linear]
    out = []
    values = sorted({a.value for a in family if a.value is not None})
    if len(values) > 1 and chosen.value in (values[0], values[-1]):
        out.append("value " + ("lowest" if chosen.value == values[0] else "highest"))
    rates = sorted({a.arm.learning_rate.rate for a in family
                    if a.value == chosen.value and a.arm.learning_rate is not None})
    rate = chosen.arm.learning_rate.rate if chosen.arm.learning_rate else None
    if len(rates) > 1 and rate in (rates[0], rates[-1]):
        out.append("lr " + ("lowest" if rate == rates[0] else "highest"))
    return out


def oracle_settings(choices, arms) -> dict:
    """``{rule: {"value", "lr", "momentum"}}`` of each oracle choice: what
    `tuned_from` reads back (the learning rate as a number, or "linear")."""
    by_label = {a.arm.label: a for a in arms}
    out = {}
    for name, label in choices.items():
        spec = by_label[label].spec or ArmSpec(name, by_label[label].value)
        out[name] = {"value": spec.value, "lr": spec.lr, "momentum": spec.momentum}
    return out


def tuned_from(directory, scenario: str, num_workers: int, families, real=False) -> dict:
    """The setting (an `ArmSpec`: grid value, learning rate, momentum) of each rule in
    ``families`` that an earlier `bench policies` matrix (its ``--out`` directory)
    chose on ``scenario`` with ``num_workers`` workers: a screen of every grid over a
    few seeds, then only the tuned settings over many. For ``real`` runs an earlier real
    matrix of the scenario also serves. ValueError names what is missing and how to
    make it.

    >>> import json, pathlib, tempfile
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (out / "results.json").write_text(json.dumps({"scenarios": {"static@8": {
    ...     "oracle": {"kasync": "KAsync(k=4)", "ssp": "SSP(s=2)"}}}}))
    >>> tuned_from(out, "static", 8, ["bsp", "kasync", "adaptive"])
    {'kasync': ArmSpec(name='kasync', value=4, lr=None, momentum=None)}
    """
    path = pathlib.Path(directory) / "results.json"
    try:
        scenarios = json.loads(path.read_text())["scenarios"]
    except (OSError, KeyError, json.JSONDecodeError) as err:
        raise ValueError(f"--tuned-from {str(directory)!r}: no bench results there ({err}); "
                         "give the --out directory of an earlier `bench policies` run") from None
    entry = scenarios.get(f"{scenario}@{num_workers}") or (
        scenarios.get(scenario) if real else None)
    if entry is None:
        raise ValueError(f"--tuned-from {str(directory)!r} has no {scenario} on "
                         f"{num_workers} workers (it has {', '.join(scenarios)}); screen "
                         "the grids there first, e.g. --arms all --seeds 3")
    # What a tuned matrix ran each rule at, else what a screen's grids chose.
    settings = {**(entry.get("oracle_settings") or {}), **(entry.get("tuned_settings") or {})}
    if not settings:  # made before learning rates were tuned: grid values only
        labels = {a.arm.label: a.value for a in bench_arms(families, num_workers)}
        settings = {f: {"value": labels[label]} for f, label in
                    (entry.get("oracle") or {}).items() if label in labels}
    missing = [f for f in families if f in FAMILIES and f not in settings]
    if missing:
        raise ValueError(f"--tuned-from {str(directory)!r}: no tuned value of "
                         f"{', '.join(missing)} on {scenario} with {num_workers} workers; "
                         "screen their grids there (--arms including them)")
    return {f: ArmSpec(f, s.get("value"), s.get("lr"), s.get("momentum"))
            for f, s in settings.items() if f in families}
