"""Command line of cluster_sim: ``python -m cluster_sim demo|simulate`` (see --help)."""

import argparse

from cluster_sim import demo, simulate
from cluster_sim.quiet_exit import quiet_exit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim")
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_arguments(sub.add_parser("demo", help=demo.__doc__.splitlines()[0]))
    simulate.add_arguments(sub.add_parser("simulate", help=simulate.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    return {"demo": demo.run, "simulate": simulate.run}[args.command](args)


if __name__ == "__main__":
    quiet_exit(main())
