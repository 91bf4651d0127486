"""A progress bar per run of `run_arm`: pushes toward the budget, the target in view.

A run stops at the target accuracy, usually long before its push budget; a bar left at
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
    """Callable as ``progress(pushes, accuracy)``; ``finish(result)`` ends the bar."""

    def __init__(self, label: str, config):
        self.target = config.target_accuracy
        self.bar = tqdm(total=config.max_pushes, desc=label, unit="push", file=sys.stderr)
        self.bar.set_postfix_str(f"target {self.target:g}: building the strategy and "
                                 f"tracing the step (first evaluation after "
                                 f"{config.pushes_per_chunk} pushes)")

    def __call__(self, pushes: int, accuracy: float) -> None:
        self.bar.set_postfix_str(f"accuracy {accuracy:.3f}, target {self.target:g}",
                                 refresh=False)
        self.bar.update(pushes - self.bar.n)

    def finish(self, result: dict) -> None:
        if result["tta_s"] is not None:
            self.bar.total = self.bar.n  # the budget was an upper bound, not the goal
            self.bar.set_postfix_str(f"reached target {self.target:g} in "
                                     f"{result['tta_s']:.1f} s")
        else:
            self.bar.set_postfix_str(f"target {self.target:g} not reached (accuracy "
                                     f"{result['final_accuracy']:.3f})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
