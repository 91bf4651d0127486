"""Command line of cluster_sim: ``python -m cluster_sim demo`` (see --help)."""

import argparse
import sys

from cluster_sim import demo


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster_sim")
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_arguments(sub.add_parser("demo", help=demo.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
