"""``python -m cluster_sim.report RUN_DIR``: the same as ``python -m cluster_sim report``."""

import sys

from cluster_sim.report.writer import main

if __name__ == "__main__":
    sys.exit(main())
