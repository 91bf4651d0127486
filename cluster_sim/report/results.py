"""The one result schema of a run, shared by the harness, the simulator and the calibration.

`RunResult` lists every field a run result has; producers build one and hand it on as
a plain dict (`RunResult.as_dict`), which is what JSON files hold and what the report
reads. Field shapes are the same whoever produced the run: ``curve`` is a list of
evaluations ``{"wall_s", "pushes", "version", "loss", "accuracy"}`` (the harness adds
per-worker counters as ``workers``), ``batch_sizes`` a list of ``{"wall_s", "sizes"}``
(the per-worker batch sizes from that time on; empty without allocation), ``k_history``
a list of ``{"version", "k", "wait", "rule", "reason"}``. Times are seconds of training
(wall time in the harness, simulated time in the simulator).

Time to target accuracy over seeds (`median_tta`, the one definition every table
uses): a seed that never reached the target counts as +infinity, and the median of that
is the policy's TTA; it is None when the median is infinite.

Example:

>>> r = RunResult(policy="BSP()", seed=0, tta_s=None, final_accuracy=0.5, wall_s=2.0,
...               samples_per_s=64.0, staleness_p50=0, staleness_p95=0,
...               curve=[{"wall_s": 2.0, "pushes": 4, "version": 1, "loss": 1.0,
...                       "accuracy": 0.5}])
>>> d = r.as_dict()
>>> d["schema"], d["batch_sizes"], d["simulated"]
(1, [], False)
>>> RunResult.from_dict(d) == r
True
>>> median_tta([10.0, None, None])
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cluster_sim.report.stats import crossing_time

__all__ = ["SCHEMA_VERSION", "RunResult", "TTA_DEFINITION", "median_tta", "median_of",
           "curve_tta", "target_reached", "trailing_mean", "EVAL_RELATIVE_GAP", "TTA_WINDOW",
           "rule_name"]

#: Evaluations of a run (harness and simulator alike) are at most this fraction of the
#: training time (or pushes) so far apart, so at the target crossing consecutive
#: evaluations are at most 1 % of the run apart and the interpolated crossing is far
#: inside the 2 % the benchmark allows.
EVAL_RELATIVE_GAP = 0.01

#: Evaluations averaged for the time to target. Near its plateau an asynchronous rule's
#: validation loss swings from one evaluation to the next (stale momentum: seen on the
#: real 8-worker benchmark, SSP(s=4) between 0.97 and 1.11 around a mean of 1.04), so a
#: single evaluation's dip under the target says nothing about where training is; the
#: mean of the last five does. On a smooth curve it puts the crossing about two
#: evaluation gaps late (2 % of the time at `EVAL_RELATIVE_GAP`), alike for every rule.
TTA_WINDOW = 5

#: Bumped when a field changes meaning or shape; `RunResult.as_dict` writes it as "schema".
SCHEMA_VERSION = 1

TTA_DEFINITION = ("A run's time to target is when the mean of its last five validation "
                  "losses first fell to the target loss (or, for a workload without one, "
                  "the mean of its last five accuracies first rose to the target "
                  "accuracy), interpolated linearly between the two evaluations around the "
                  "crossing; one evaluation's dip does not count. tta_s is the median over seeds, a seed that never "
                  "reached the target counting as infinite; it is null when that median is "
                  "infinite (at least half the seeds missed, more than half for an odd "
                  "count). tta_reached counts the seeds that reached it.")


@dataclasses.dataclass
class RunResult:
    """One run of one policy and seed (see the module docstring for the shapes).

    Required: what every producer measures. Optional fields default to "not measured"
    (None, or an empty list); the simulator sets ``simulated`` and ``scenario``, the
    harness ``steady``, ``events``, ``fit_errors`` and the per-worker step times.
    """

    policy: str
    seed: int | None
    tta_s: float | None
    final_accuracy: float
    wall_s: float
    samples_per_s: float | None
    staleness_p50: float | None
    staleness_p95: float | None
    curve: list
    hardware_efficiency: float | None = None
    idle_fraction: float | None = None
    steady: dict | None = None
    staleness_histogram: list = dataclasses.field(default_factory=list)
    pushed: int = 0
    applied: int = 0
    dropped: int = 0
    pending: int = 0
    version: int = 0
    retried: int = 0
    rule: str | None = None
    k_history: list = dataclasses.field(default_factory=list)
    worker_pushes: list = dataclasses.field(default_factory=list)
    worker_step_times: list = dataclasses.field(default_factory=list)
    worker_compute_times: list = dataclasses.field(default_factory=list)
    batch_sizes: list = dataclasses.field(default_factory=list)
    events: list = dataclasses.field(default_factory=list)
    fit_errors: list = dataclasses.field(default_factory=list)
    scenario: str | None = None
    simulated: bool = False
    sim_run_s: float | None = None
    target_loss: float | None = None
    target_accuracy: float | None = None
    tta_accuracy_s: float | None = None
    final_loss: float | None = None
    max_eval_gap: float | None = None
    tta_first_s: float | None = None

    def as_dict(self) -> dict:
        """The fields as a dict, plus ``"schema"``: `SCHEMA_VERSION`."""
        return dict(dataclasses.asdict(self), schema=SCHEMA_VERSION)

    @classmethod
    def from_dict(cls, data: dict) -> RunResult:
        """The inverse of `as_dict`; keys that are no field (e.g. ``schema``) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def median_tta(values) -> float | None:
    """Median of per-seed TTAs with ``None`` (not reached) as +infinity; None if infinite.

    >>> median_tta([10.0, None, 30.0]), median_tta([10.0, None]), median_tta([None])
    (30.0, None, None)
    """
    finite = [math.inf if v is None else float(v) for v in values]
    if not finite:
        return None
    m = float(np.median(finite))
    return m if math.isfinite(m) else None


def median_of(values) -> float | None:
    """Median of the finite values that are not None (None if there are none).

    >>> median_of([1.0, None, float("nan"), 3.0])
    2.0
    """
    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.median(values)) if values else None


def trailing_mean(values, window: int = TTA_WINDOW) -> np.ndarray:
    """The mean of each value and the ``window - 1`` before it (fewer at the start).

    >>> trailing_mean([4.0, 2.0, 0.0, 2.0], window=2).tolist()
    [4.0, 3.0, 1.0, 1.0]
    """
    v = np.asarray(values, dtype=float)
    sums = np.cumsum(np.concatenate([[0.0], v]))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(idx - window, 0)
    return (sums[idx] - sums[lo]) / (idx - lo)


def curve_tta(curve, target_loss=None, target_accuracy=None, window=TTA_WINDOW) -> dict:
    """A run's times to target from its evaluation curve (``wall_s``, ``loss``,
    ``accuracy``), each the interpolated crossing (`cluster_sim.report.stats.crossing_time`)
    of the mean of the last ``window`` evaluations (`trailing_mean`), None if never
    reached: ``tta_s`` (validation loss down to ``target_loss``; accuracy up to
    ``target_accuracy`` when there is no target loss), ``tta_accuracy_s`` (accuracy's
    crossing), ``tta_first_s`` (the first single evaluation past the target, which a
    noisy curve reaches by chance), ``max_eval_gap`` (the largest time between
    consecutive evaluations, from the start to the first one at or past the crossing
    (or the run's end), as a fraction of the time to target (or of the run)).

    The one definition of time to target: the harness and the simulator both call it,
    and stop a run when `target_reached` says so.

    >>> curve = [{"wall_s": t, "loss": l, "accuracy": a} for t, l, a in
    ...          [(1.0, 1.0, 0.5), (2.0, 0.6, 0.7), (3.0, 0.4, 0.9)]]
    >>> r = curve_tta(curve, target_loss=0.5, target_accuracy=0.8, window=1)
    >>> r["tta_s"], r["tta_accuracy_s"], r["max_eval_gap"]
    (2.5, 2.5, 0.4)
    >>> curve_tta(curve, target_accuracy=0.95, window=1)["tta_s"] is None
    True
    >>> dip = [{"wall_s": t, "loss": l, "accuracy": 0.5} for t, l in
    ...        enumerate([1.0, 0.9, 0.7, 0.9, 0.8, 0.45, 0.8])]
    >>> r = curve_tta(dip, target_loss=0.5, window=3)   # one dip under 0.5: not reached
    >>> r["tta_s"], round(r["tta_first_s"], 2)
    (None, 4.86)
    >>> diverged = [{"wall_s": 0.0, "loss": 2.3, "accuracy": 0.1},   # as a store keeps NaN
    ...             {"wall_s": 1.0, "loss": None, "accuracy": 0.1}]
    >>> curve_tta(diverged, target_loss=0.5)["tta_s"] is None
    True
    """
    times = [float(p["wall_s"]) for p in curve]

    def crossing(key, target, below, w):
        if target is None or not curve:
            return None
        # A stored run keeps a NaN loss (a diverged run) as null: it reaches nothing.
        values = [math.nan if p[key] is None else float(p[key]) for p in curve]
        return crossing_time(times, trailing_mean(values, w), float(target), below=below)

    tta_acc = crossing("accuracy", target_accuracy, False, window)
    tta = crossing("loss", target_loss, True, window) if target_loss is not None else tta_acc
    first = (crossing("loss", target_loss, True, 1) if target_loss is not None
             else crossing("accuracy", target_accuracy, False, 1))
    end = tta if tta is not None else (times[-1] if times else 0.0)
    # Consecutive evaluations from the start to the first one at or past the crossing.
    upto = [0.0] + [t for t in times if t < end] + [t for t in times if t >= end][:1]
    gaps = [b - a for a, b in zip(upto, upto[1:])]
    return {"tta_s": tta, "tta_accuracy_s": tta_acc, "tta_first_s": first,
            "max_eval_gap": max(gaps) / end if gaps and end > 0 else None}


def target_reached(curve, target_loss=None, target_accuracy=None,
                   window=TTA_WINDOW) -> bool:
    """Whether the curve so far is at or past its target as `curve_tta` counts it (the
    mean of the last ``window`` evaluations): what stops a run, in the harness and in
    the simulator alike.

    >>> pts = lambda *ls: [{"loss": l, "accuracy": 0.0} for l in ls]
    >>> target_reached(pts(0.9, 0.4), target_loss=0.5, window=2)
    False
    >>> target_reached(pts(0.5, 0.4), target_loss=0.5, window=2)
    True
    """
    if not curve:
        return False
    last = curve[-window:]
    if target_loss is not None:
        return float(np.mean([p["loss"] for p in last])) <= target_loss
    return (target_accuracy is not None
            and float(np.mean([p["accuracy"] for p in last])) >= target_accuracy)


def rule_name(label: str) -> str:
    """The rule of a run's label, upper case, without its arguments or step size: the
    baselines (BSP, ASP) are found by it.

    >>> rule_name("BSP()"), rule_name("bsp"), rule_name("BSP @lr=0.4"), rule_name("BSPThenASP()")
    ('BSP', 'BSP', 'BSP', 'BSPTHENASP')
    """
    return str(label).split(" @")[0].split("(")[0].strip().upper()
