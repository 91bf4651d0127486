"""The command line of cluster_sim: ``python -m cluster_sim COMMAND`` (see --help).

One entry point for every lab command; each lives in a module of `cluster_sim.cli`
(``report`` in `cluster_sim.report.writer`) with ``add_arguments(parser)`` and
``run(args)``.
"""

import argparse
import importlib
import os
import re

from cluster_sim.cli import quiet_exit
from strategies.launch_env import VERBOSE_ENV

#: command -> module with add_arguments(parser) and run(args).
COMMANDS = {
    "demo": "cluster_sim.cli.demo",
    "simulate": "cluster_sim.cli.simulate",
    "bench": "cluster_sim.cli.bench",
    "soak": "cluster_sim.cli.soak",
    "calibrate": "cluster_sim.cli.calibrate",
    "scale": "cluster_sim.cli.scale",
    "speeds": "cluster_sim.cli.speeds",
    "report": "cluster_sim.report.writer",
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (each command's module adds its options)."""
    parser = argparse.ArgumentParser(prog="python -m cluster_sim",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, path in COMMANDS.items():
        module = importlib.import_module(path)
        doc = module.__doc__.strip()
        summary = re.sub(r"^`python -m cluster_sim \w+`: ", "", " ".join(doc.split("\n\n")[0].split()))
        sub_parser = sub.add_parser(name, help=summary, description=doc,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub_parser)
        sub_parser.add_argument("--verbose", action="store_true",
                                help="keep TensorFlow's start-up and C++ log lines (hidden "
                                     "by default; same as KSYNC_VERBOSE=1)")
        sub_parser.set_defaults(run=module.run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"  # read before TensorFlow is imported, and by servers
    return args.run(args)


if __name__ == "__main__":
    quiet_exit(main())
