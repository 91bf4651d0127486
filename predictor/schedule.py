"""When and from what the per-worker batch sizes change: profile, then allocate.

`AllocationSchedule` starts with equal sizes (the profiling phase), makes the first
allocation from the speeds measured there (the static allocation of Chao et al.), and
then, depending on ``mode``, keeps it (``"static"``), re-allocates from the last measured
speeds (``"last"``), or from a forecaster's prediction of the coming window
(``"forecast"``); ``"deadline"`` gives each worker what it finishes, at the last measured
speeds, in the time the fastest takes for an equal share (Non-blocking SGD's deadline:
the global batch shrinks instead of moving to faster workers). Pure numpy: the strategy and the discrete-event simulator share it.

A cluster hands `observe_window` its counters (samples, busy seconds, steps per worker);
a `predictor.step_cost.StepCostEstimate` takes the fixed cost per step out of the busy
time, so the speeds allocated on are per sample and do not move with a worker's own batch.

Example:

>>> from predictor.allocator import BatchAllocator
>>> schedule = AllocationSchedule(BatchAllocator(96, min_batch=4), mode="last")
>>> schedule.initial(3)
[32, 32, 32]
>>> schedule.observe(version=20, speeds=[300.0, 300.0, 100.0])
[41, 41, 14]
"""

import math

import numpy as np

from .step_cost import StepCostEstimate

MODES = ("static", "last", "forecast", "deadline")


class AllocationSchedule:
    """Args:
      allocator: a `predictor.BatchAllocator` (global batch, bounds, hysteresis).
      forecaster: a fitted `predictor.Forecaster` (e.g. `GRUSmoothingForecaster.default()`);
        required for mode "forecast".
      mode: "static", "last", "forecast" or "deadline" (default: "forecast" with a forecaster,
        otherwise "last").
      horizon: windows ahead the forecast covers; the allocation uses their mean. The
        default, 1, is the window the sizes hold for (the next one re-allocates): a mean
        over 10 windows let the default forecaster hedge for a return of the speeds, which
        on `colocated` (speeds switching every 12 windows) left a slowed worker a larger
        batch (docs/user-guide.md, "Speed forecasting", has the replay; docs/design-notes.md,
        "A forecast horizon of 10 windows", the figures).
      step_cost: a `predictor.step_cost.StepCostEstimate` for `observe_window`
        (default: a new one); None measures speeds as samples over busy time.
    """

    def __init__(self, allocator, forecaster=None, mode=None, horizon: int = 1,
                 step_cost="estimate"):
        mode = mode or ("forecast" if forecaster is not None else "last")
        if mode not in MODES:
            raise ValueError(f"allocation mode must be one of {MODES}, got {mode!r}")
        if mode == "forecast" and forecaster is None:
            raise ValueError('allocation mode "forecast" needs a forecaster, e.g. '
                             "predictor.GRUSmoothingForecaster.default(); or use mode='last'")
        self.allocator = allocator
        self.forecaster = forecaster
        self.mode = mode
        self.horizon = horizon
        self.step_cost = StepCostEstimate() if step_cost == "estimate" else step_cost
        self.sizes = None
        self.history = []  # dicts: version, stage, measured, forecast, sizes

    def initial(self, num_workers: int) -> list:
        """Equal sizes for the profiling phase (raises if the bounds are infeasible)."""
        self.sizes = self.allocator.equal_sizes(num_workers)
        self.history = [{"version": 0, "stage": "profile", "measured": None,
                         "forecast": None, "sizes": list(self.sizes)}]
        return list(self.sizes)

    def observe_window(self, version: int, samples, busy_s, steps=None) -> list | None:
        """`observe` one window from each worker's samples, busy seconds and steps in it
        (``steps`` None: speeds are samples over busy time).

        >>> from predictor.allocator import BatchAllocator
        >>> schedule = AllocationSchedule(BatchAllocator(96, min_batch=4), mode="last")
        >>> schedule.initial(3)
        [32, 32, 32]
        >>> schedule.observe_window(20, samples=[640, 640, 640], busy_s=[2.0, 2.0, 6.0],
        ...                         steps=[20, 20, 20])
        [41, 41, 14]
        """
        if self.step_cost is None or steps is None:
            speeds = [s / t if s > 0 and t > 0 else None for s, t in zip(samples, busy_s)]
        else:
            speeds = self.step_cost.speeds(samples, busy_s, steps)
        return self.observe(version, speeds)

    def observe(self, version: int, speeds) -> list | None:
        """Measured samples/s per worker over the last window (None where a worker has
        no measurement); returns new sizes, or None to keep the current.

        After profiling, a window in which a worker has no speed (it made no step: a
        slow, paused or restarting worker) gives equal sizes quietly, an expected
        condition that `status` and ``history`` report; the next window with a speed
        for every worker allocates again. A number that is not a speed (NaN, inf, zero,
        negative: a bug of the caller or the forecaster) gives equal sizes too, with an
        `AllocatorFallbackWarning`.

        >>> from predictor.allocator import BatchAllocator
        >>> s = AllocationSchedule(BatchAllocator(96, min_batch=4), mode="last")
        >>> _ = s.initial(3); s.observe(10, [300.0, 300.0, 100.0])
        [41, 41, 14]
        >>> s.observe(20, [300.0, 300.0, None]), s.status()
        ([32, 32, 32], 'equal batch sizes since version 20: no speed measured for worker 2 in the last window')
        """
        measured = np.array([np.nan if s is None else float(s) for s in speeds])
        unmeasured = [i for i, s in enumerate(speeds) if s is None]
        profiled = len(self.history) > 1
        if self.mode == "static" and profiled:
            return None
        usable = np.isfinite(measured) & (measured > 0)
        if not profiled and not usable.all():
            return None  # keep profiling until every worker has been measured
        forecast = None
        target = measured
        if unmeasured:
            # No forecast is fed or trusted while a worker is unmeasured (the forecaster
            # keeps its level); equal sizes until every worker reports again.
            stage = f"equal sizes: no speed for worker(s) {unmeasured}"
        elif not usable.all():
            stage = "fallback: unusable speeds"  # the allocator warns
        else:
            stage = "allocate" if profiled else "first allocation from profile"
            if self.mode == "forecast":
                self.forecaster.update(measured.reshape(-1, 1))
                forecast = self.forecaster.predict(horizon=self.horizon).mean(axis=1)
                target = forecast
        if unmeasured:
            sizes = self.allocator.equal_for_now(len(measured))
        elif self.mode == "deadline":
            sizes = self.allocator.deadline_sizes(target)
        else:
            sizes = self.allocator.allocate(target)
        self.history.append({
            "version": int(version), "stage": stage,
            "measured": [None if not math.isfinite(m) else float(m) for m in measured],
            "forecast": None if forecast is None else [float(f) for f in forecast],
            "step_cost_s": None if self.step_cost is None else self.step_cost.cost,
            "sizes": list(sizes)})
        changed = sizes != self.sizes
        self.sizes = list(sizes)
        return list(sizes) if changed else None

    def status(self) -> str | None:
        """Why the sizes are equal now, in one line, when they fell back (None: they
        follow the speeds, or profiling is under way); `ksync.RuleController.explain`
        appends it."""
        fallbacks = 0
        for entry in reversed(self.history):
            if not entry["stage"].startswith(("equal sizes", "fallback")):
                break
            fallbacks += 1
        if not fallbacks:
            return None
        since = self.history[-fallbacks]
        last = self.history[-1]
        if last["stage"].startswith("fallback"):
            why = "speeds that were not speeds (NaN, inf, zero or negative)"
        else:
            missing = [i for i, m in enumerate(last["measured"]) if m is None]
            why = (f"no speed measured for worker{'s' if len(missing) > 1 else ''} "
                   f"{', '.join(map(str, missing))} in the last window")
        return f"equal batch sizes since version {since['version']}: {why}"
