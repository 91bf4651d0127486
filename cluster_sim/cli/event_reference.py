"""`bench policies`: the seconds a scenario's events placed at fractions of a run stand
for (issue 46, item 6), and a time budget given as a multiple of the same run.

A scenario may place its pauses and kills at fractions of a reference run
(``at_fraction``, `cluster_sim.scenarios.RelativeEvent`), so that a short run (64 or 256
workers finish in a fraction of 8 workers' time) meets all of them. The benchmark's
reference is **tuned BSP's time to the target on the same cluster without those
events**: BSP (every ratio of the tables is to it) at the setting the matrix would choose
for it (its learning-rate grid with ``--lr-grid``, else the scenario's rate), simulated on
the same number of workers with the same costs, on the tuning seeds (``--tune-seeds``,
or 100-102 without; never the reported ones), the median of their times. ``--event-
reference SECONDS`` gives it instead (real runs need it: measuring it there would cost a
tuned BSP matrix on the real cluster).

A run that has not reached the target by ``--time-budget 5x`` (five times the reference)
is stopped and counts as never reaching it: at 256 workers a rule that never reaches
(asynchronous rules, most of their learning rates) would otherwise simulate to its push
limit, 20x the reference and most of the matrix's time (issue 46, item 9). `budget`
resolves it, measuring the reference as the events do (once per cell).

`bench policies` calls `resolve` per scenario and worker count, with a ``measure`` that
runs BSP's tuning and the tuned BSP on the scenario without its fraction events
(`cluster_sim.cli.bench_tuning.events_reference`) and returns `reference_seconds` of
those runs:

>>> from cluster_sim.scenarios import RelativeEvent, Scenario
>>> s = Scenario("p", 2, relative_events=(RelativeEvent(0.1, 1, "pause"),
...                                       RelativeEvent(0.2, 1, "resume")))
>>> resolved, note = resolve(s, 150.0, measure=None)
>>> [e.at_s for e in resolved.events]
[15.0, 30.0]
>>> print(note)  # doctest: +NORMALIZE_WHITESPACE
Events at fractions of a reference run of 150 s (given by --event-reference): w1 pause at
15s; w1 resume at 30s.
"""

from __future__ import annotations

import dataclasses
import statistics

#: Tuning seeds of the reference when the command gives none (never reported seeds).
DEFAULT_SEEDS = (100, 101, 102)


def without_relative_events(scenario):
    """``scenario`` with the events placed at fractions removed (the reference's cluster);
    fixed-second events stay, they belong to the cluster."""
    return dataclasses.replace(scenario, relative_events=())


def reference_seconds(results, seeds) -> float:
    """The median time to target of ``results`` (one run per seed): the reference. Raises
    ValueError, naming the seeds, when a run never reached the target: a reference
    that never ends cannot place events.

    >>> reference_seconds([{"tta_s": 100.0}, {"tta_s": 130.0}, {"tta_s": 90.0}], [1, 2, 3])
    100.0
    >>> reference_seconds([{"tta_s": None, "seed": 7}], [7])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the reference run (...) never reached the target on seed(s) [7]; ...
    """
    missing = [r.get("seed") for r in results if r.get("tta_s") is None]
    if missing or not results:
        raise ValueError("the reference run (tuned BSP without the events) never reached "
                         f"the target on seed(s) {missing or list(seeds)}; raise "
                         "--max-pushes or give --event-reference SECONDS")
    return float(statistics.median(r["tta_s"] for r in results))


def resolve(scenario, reference_s, measure):
    """``(scenario with its events in seconds, a sentence for the table)``: at
    ``reference_s`` when given, else at ``measure(scenario without them)``'s
    ``(seconds, how it was measured)``. A scenario with no fraction events is returned
    as it is, with an empty sentence."""
    if not scenario.relative_events:
        return scenario, ""
    how = "given by --event-reference"
    if reference_s is None:
        if measure is None:
            scenario.check_resolved()  # raises, saying how to give the reference
        reference_s, how = measure(without_relative_events(scenario))
    resolved = scenario.resolve_events(reference_s)
    events = "; ".join(f"w{e.worker} {e.action} at {e.at_s:g}s" for e in resolved.events)
    return resolved, (f"Events at fractions of a reference run of {reference_s:g} s "
                      f"({how}): {events}.")


def parse_budget(text) -> tuple:
    """``(seconds, factor)`` of ``--time-budget``: seconds, or a multiple of the reference
    run written ``NUMBERx``; ``(None, None)`` without. ValueError names a bad one.

    >>> parse_budget("600"), parse_budget("5x"), parse_budget(None)
    ((600.0, None), (None, 5.0), (None, None))
    """
    if text is None or text == "":
        return None, None
    text = str(text).strip()
    try:
        number = float(text[:-1] if text.lower().endswith("x") else text)
    except ValueError:
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ValueError(f"--time-budget {text!r}: give seconds (e.g. 600) or a multiple of "
                         "the reference run, tuned BSP's time to target (e.g. 5x)")
    return (None, number) if text.lower().endswith("x") else (number, None)


def budget(text, scenario, reference_s, measure) -> tuple:
    """``(seconds or None, a sentence for the table)`` a run of ``scenario`` may last,
    from ``--time-budget`` ``text``: its seconds, or its factor times the reference
    (``reference_s`` when given, else ``measure(scenario without its fraction
    events)``'s, as `resolve`).

    >>> budget("4x", None, 150.0, None)[0], budget(None, None, 150.0, None)
    (600.0, (None, ''))
    """
    seconds, factor = parse_budget(text)
    if factor is None:
        return seconds, ""
    how = "given by --event-reference"
    if reference_s is None:
        reference_s, how = measure(without_relative_events(scenario))
    seconds = factor * reference_s
    return seconds, (f"Every run stops at {factor:g}x a reference run of {reference_s:.4g} "
                     f"s ({how}): {seconds:.4g} s; one that has not reached the target by then "
                     "counts as never reaching it.")
