"""The commands of ``python -m cluster_sim`` (one module each) and what they share.

Each command module has ``add_arguments(parser)`` and ``run(args) -> exit code``;
`cluster_sim.__main__` lists them. The commands are the top of `cluster_sim`: they may
import the harness, the simulator, the scenarios and the report, and nothing imports
them.
"""

import os
import sys
import time
import warnings

from strategies.launch_env import quiet_tensorflow, verbose


def command_line(argv=None) -> list[str]:
    """The command that is running (``argv``, default `sys.argv`) as a user types it,
    for the ``meta`` of a results.json: ``python -m cluster_sim ARGS``, with no path of
    this machine (results committed to the repository are read on other machines).

    >>> command_line(["path/to/cluster_sim/__main__.py", "demo", "--seeds", "2"])
    ['python', '-m', 'cluster_sim', 'demo', '--seeds', '2']
    """
    return ["python", "-m", "cluster_sim", *(sys.argv if argv is None else argv)[1:]]


def parse_seeds(text, option: str = "--seeds", start: int = 0) -> list[int]:
    """Seeds from a count (``3``: ``start`` .. ``start`` + 2), a range (``100-102``) or a
    list (``0,5,7``); ValueError names the option and the forms.

    >>> parse_seeds("3"), parse_seeds("3", start=100), parse_seeds("0, 5,7")
    ([0, 1, 2], [100, 101, 102], [0, 5, 7])
    """
    text = str(text).strip()
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        elif "-" in text:
            first, _, last = text.partition("-")
            seeds = list(range(int(first), int(last) + 1))
        else:
            seeds = list(range(start, start + int(text)))
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"{option} {text!r}: give a count (3: seeds {start}-{start + 2}), a range "
                         "(100-102) or a list of distinct seeds >= 0 (0,5,7)")
    return seeds


def seeds_text(seeds) -> str:
    """``0-9`` for a run of seeds, else ``1,5``; ``-`` for none (`parse_seeds` reads
    the first two back).

    >>> seeds_text([100, 101]), seeds_text([0, 5]), seeds_text([7]), seeds_text([])
    ('100-101', '0,5', '7', '-')
    """
    seeds = list(seeds)
    if not seeds:
        return "-"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 1:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def prepare_tensorflow() -> None:
    """Settings every command that trains must make before TensorFlow is imported:
    tf_keras as Keras (parameter-server training needs it), TensorFlow imported without
    its start-up noise (`strategies.launch_env.quiet_tensorflow`; ``--verbose`` keeps
    it), and no warning about tf.data checkpoints on every `fit`."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    quiet_tensorflow()
    warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data")


def time_fit(cluster, model, creator, steps: int, warmup: int,
             samples=None) -> tuple[float, dict]:
    """(steps/s, CPU ms per step by process) of ``steps`` `fit` steps of ``model`` on
    ``creator``, after ``warmup`` untimed ones (they trace the step). The CPU dict has
    "chief" (this process: dispatch and the coordinator's threads), "worker" and "ps"
    (all tasks of the job), their "total", and "parts": the same time by role and
    thread (`cluster_sim.cpu_profile.cluster_parts`). CPU time is the figure to compare:
    wall time on a shared machine swings. ``samples``: a callable returning the
    examples trained on so far, for steps whose batches differ in size; the dict then
    has "samples_per_step" too."""
    from cluster_sim.cpu_profile import cluster_parts

    model.fit(creator, epochs=1, steps_per_epoch=warmup, verbose=0)

    def cpu():
        return {"chief": time.process_time(), "worker": cluster.cpu_seconds("worker"),
                "ps": cluster.cpu_seconds("ps")}

    samples_start = samples() if samples else 0
    start, cpu_start, parts_start = time.perf_counter(), cpu(), cluster_parts(cluster)
    model.fit(creator, epochs=1, steps_per_epoch=steps, verbose=0)
    rate = steps / (time.perf_counter() - start)
    cpu_ms = {role: 1e3 * (used - cpu_start[role]) / steps for role, used in cpu().items()}
    cpu_ms["total"] = sum(cpu_ms.values())
    cpu_ms["parts"] = {part: 1e3 * (used - parts_start.get(part, 0.0)) / steps
                       for part, used in cluster_parts(cluster).items()}
    if samples:
        cpu_ms["samples_per_step"] = (samples() - samples_start) / steps
    return rate, cpu_ms


def release(strategy) -> None:
    """Stop a `KSyncStrategy`'s coordinator threads once a command is done with it: they
    would go on refreshing the rule until the cluster is gone, and then say they could
    not. The stock strategy has nothing to stop."""
    if hasattr(strategy, "shutdown"):
        strategy.shutdown()


def quiet_exit(code: int) -> None:
    """Exit without the hundreds of "Failed to remove function remotely" lines that
    TensorFlow's eager context logs at interpreter exit, when it tries to free functions
    on servers already stopped, and that would bury the printed table (``--verbose``
    keeps them).

    Example: ``if __name__ == "__main__": quiet_exit(main())``
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if not verbose():
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    sys.exit(code)
