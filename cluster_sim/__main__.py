"""Command line of cluster_sim: ``python -m cluster_sim demo|simulate`` (see --help)."""

import argparse
import os
import sys

from cluster_sim import demo, simulate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim")
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_arguments(sub.add_parser("demo", help=demo.__doc__.splitlines()[0]))
    simulate.add_arguments(sub.add_parser("simulate", help=simulate.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    return {"demo": demo.run, "simulate": simulate.run}[args.command](args)


def _quiet_exit(code: int) -> None:
    """Exit without the hundreds of "Failed to remove function remotely" lines that
    TensorFlow's eager context logs at interpreter exit, when it tries to free functions
    on the demo's servers, already stopped, and that would bury the printed table."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.exit(code)


if __name__ == "__main__":
    _quiet_exit(main())
