"""A progress bar per run of `run_arm`: pushes toward the budget, the target in view.

A run stops at its target (validation loss, or accuracy), usually long before its push
budget; a bar left at
30 % would read as an abort, so a run that reaches the target ends its bar full, saying
"reached target". Until the first evaluation (strategy built, step traced, and with
allocation the forecaster loaded: several seconds) the bar says what it is waiting for.

Example:

```python
with TargetBar("BSP s0", config) as bar:
    bar.finish(run_arm(cluster, arm, scenario, config=config, progress=bar))
```
"""

import sys

from tqdm import tqdm


class TargetBar:
    """A `run_arm` progress callback: ``point(point)`` with each evaluation point
    (``pushes``, ``loss``, ``accuracy``), or called as ``bar(pushes, accuracy)``;
    ``finish(result)`` ends the bar. The target is the validation loss when the run has
    one (``config.target_loss``, or ``target_loss=``), else accuracy."""

    def __init__(self, label: str, config, target_loss=None):
        self.loss_target = config.target_loss if target_loss is None else target_loss
        self.target = config.target_accuracy
        # "target 0.93" is an accuracy, as it always was; a loss target says so.
        self.what = (f"loss {self.loss_target:g}" if self.loss_target is not None
                     else f"{self.target:g}")
        self.bar = tqdm(total=config.max_pushes, desc=label, unit="push", file=sys.stderr)
        self.bar.set_postfix_str(f"target {self.what}: building the strategy and "
                                 "tracing the step")

    def point(self, point: dict) -> None:
        self(point["pushes"], point["accuracy"], point.get("loss"))

    def __call__(self, pushes: int, accuracy: float, loss: float | None = None) -> None:
        shown = ("" if loss is None else f"loss {loss:.3f}, ") + f"accuracy {accuracy:.3f}"
        self.bar.set_postfix_str(f"{shown}, target {self.what}", refresh=False)
        self.bar.update(max(0, min(pushes, self.bar.total) - self.bar.n))

    def finish(self, result: dict) -> None:
        if result["tta_s"] is not None:
            self.bar.total = self.bar.n  # the budget was an upper bound, not the goal
            self.bar.set_postfix_str(f"reached target {self.what} in "
                                     f"{result['tta_s']:.1f} s")
        else:
            final = (f"loss {result['final_loss']:.3f}" if self.loss_target is not None
                     and result.get("final_loss") is not None
                     else f"accuracy {result['final_accuracy']:.3f}")
            self.bar.set_postfix_str(f"target {self.what} not reached ({final})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
