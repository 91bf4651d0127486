"""One result schema and one report for the harness, the simulator and the calibration.

* `cluster_sim.report.results`: `RunResult`, the fields every run result has, and the
  time-to-target definition (`curve_tta`, `median_tta`);
* `cluster_sim.report.tables`: the table formatter (`format_cell`, `text_table`,
  `markdown_rows`);
* `cluster_sim.report.verdict`: the plain-language verdict under the table (`verdict`),
  with the seed-to-seed noise it is judged against;
* `cluster_sim.report.writer`: `summarise`, `write_report`, `load_results`,
  `format_table`, `version_to_wall`;
* `cluster_sim.report.stats`: interpolated crossing times, intervals over seeds (a range
  under 5 seeds), paired ratios and the coefficient of variation;
* ``python -m cluster_sim report RUN_DIR`` (or ``python -m cluster_sim.report``) rebuilds
  a report from any results.json.
"""

from cluster_sim.report.results import (EVAL_RELATIVE_GAP, SCHEMA_VERSION, TTA_DEFINITION,
                                        RunResult, curve_tta, median_of, median_tta)
from cluster_sim.report.tables import format_cell, markdown_table_rows, text_table
from cluster_sim.report.verdict import verdict
from cluster_sim.report.writer import (COLUMNS, REQUIRED_KEYS, format_table, load_results, main,
                                       markdown_table, step_time_spread, summarise,
                                       version_to_wall, write_report)

__all__ = ["RunResult", "SCHEMA_VERSION", "TTA_DEFINITION", "median_tta", "median_of",
           "curve_tta", "EVAL_RELATIVE_GAP",
           "format_cell", "text_table", "markdown_table_rows", "summarise", "write_report",
           "load_results", "main", "format_table", "markdown_table", "step_time_spread",
           "version_to_wall", "REQUIRED_KEYS", "COLUMNS", "verdict"]

from cluster_sim.report.stats import (bootstrap_ci, coefficient_of_variation,  # noqa: E402
                                      crossing_time, paired_ratio_ci)
__all__ += ["crossing_time", "bootstrap_ci", "paired_ratio_ci", "coefficient_of_variation"]
