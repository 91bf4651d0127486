"""The one table formatter of `cluster_sim`: cells, terminal tables and Markdown tables.

Example:

>>> print(text_table(["policy", "TTA s"], [["BSP()", format_cell(12.345, ".1f")],
...                                        ["ASP()", format_cell(None, ".1f")]]))
policy  TTA s
------  -----
BSP()   12.3
ASP()   -
>>> print(markdown_table_rows(["a", "b"], [["x|y", "1"]]))
| a | b |
|---|---|
| x\\|y | 1 |
"""

import math

__all__ = ["format_cell", "format_interval", "text_table", "markdown_table_rows"]


def format_cell(value, fmt: str) -> str:
    """``value`` formatted with ``fmt``, or ``"-"`` when it is None (not measured)."""
    return "-" if value is None else format(value, fmt)


def format_interval(point, low, high, fmt: str) -> str:
    """``point [low, high]`` with ``fmt``; an infinite value (never reached) as "never".

    >>> format_interval(1.5, 1.0, math.inf, ".1f")
    '1.5 [1.0, never]'
    """
    cell = lambda v: "never" if math.isinf(v) else format(v, fmt)
    return f"{cell(point)} [{cell(low)}, {cell(high)}]"


def text_table(header, rows) -> str:
    """Left-aligned columns two spaces apart, a dashed rule under the header."""
    header = [str(c) for c in header]
    rows = [[str(c) for c in row] for row in rows]
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def markdown_table_rows(header, rows) -> str:
    """The same table in Markdown (``|`` in cells escaped)."""
    out = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)
