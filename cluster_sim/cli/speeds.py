"""`python -m cluster_sim speeds`: scenarios' speeds per allocation window, to a file.

Each scenario becomes a ``[workers, windows]`` matrix
(`cluster_sim.scenarios.windows.speed_matrix`: the worker's speed at the middle of each
window, 0 while it is paused or killed), saved by name in one ``.npz``: what
``python -m predictor.evaluate --regimes`` replays allocation on (``predictor`` reads no
scenario file itself). A window is one allocation period at nominal speed unless
``--window-s`` says otherwise.

Example:

```
python -m cluster_sim speeds --scenarios colocated,pause,churn --out runs/regimes.npz
python -m cluster_sim speeds --scenarios bench/pause --event-reference 300 --window-s 2.5 \\
    --out runs/bench_pause.npz
```
"""

import argparse
import pathlib
import sys

import numpy as np

from cluster_sim.scenarios import load_scenario
from cluster_sim.scenarios.windows import speed_matrix

__all__ = ["add_arguments", "run", "scenario_matrices"]


def scenario_matrices(names, window_s=None, until_s=None, event_reference_s=None,
                      traces=None) -> dict:
    """``{scenario name: [workers, windows] speeds}`` of each scenario in ``names``
    (built-in names or TOML paths, keyed by the scenario's own name: a file's ``name``,
    else its stem); events at fractions of a run placed at ``event_reference_s``.

    >>> {k: v.shape for k, v in scenario_matrices(["pause"], window_s=1.0).items()}
    {'pause': (4, 120)}
    """
    out = {}
    for name in names:
        scenario = load_scenario(name, traces_dir=traces)
        if scenario.name in out:
            raise ValueError(f"two scenarios named {scenario.name!r} ({name} is the "
                             "second): give each once, or set a name = in one file")
        if event_reference_s is not None:
            scenario = scenario.resolve_events(event_reference_s)
        out[scenario.name] = speed_matrix(scenario, window_s, until_s)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenarios", default="colocated,pause,churn",
                        help="comma-separated scenarios (built-in names or TOML files; "
                             "default colocated,pause,churn)")
    parser.add_argument("--window-s", type=float, default=None,
                        help="seconds per window (default: each scenario's allocation "
                             "period, 20 updates of its batch at speed 1)")
    parser.add_argument("--until-s", type=float, default=None,
                        help="seconds covered (default: each scenario's time_budget_s)")
    parser.add_argument("--event-reference", type=float, default=None, metavar="SECONDS",
                        help="place events given as fractions of a run (at_fraction) at "
                             "fractions of this many seconds")
    parser.add_argument("--traces", help="trace directory of a trace scenario (default: "
                                         "the vendored sample)")
    parser.add_argument("--out", required=True, help="the .npz file to write")


def run(args) -> int:
    names = [n for n in args.scenarios.split(",") if n]
    try:
        if not names:
            raise ValueError("--scenarios: give at least one scenario")
        matrices = scenario_matrices(names, args.window_s, args.until_s,
                                     args.event_reference, args.traces)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **matrices)
    for name, speeds in matrices.items():
        print(f"{name}: {speeds.shape[0]} workers x {speeds.shape[1]} windows, "
              f"{int((speeds == 0).sum())} stopped worker-windows")
    print(f"written to {out}")
    return 0
