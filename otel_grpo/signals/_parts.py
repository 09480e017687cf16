"""What a stat's parts are and how the pack names its vectors: shared by the device half of the signals
(`_partial`, `_reduce`) and the host half (`_gathered`), which imports no torch (it runs in the telemetry
process too)."""

from __future__ import annotations

import enum
from typing import Callable


class Part(str, enum.Enum):
    """How one stat key is finalized from its combined parts."""

    MEAN = "mean"  # sum / count
    STD = "std"  # from sum, sum of squares, count
    MIN = "min"
    MAX = "max"
    SUM = "sum"
    ESS = "ess"  # (mean w)^2 / mean(w^2) from sum, sum of squares, count
    QUANTILE = "quantile"  # from a gathered per-sample vector
    SUMMARY = "summary"  # mean, std, min, max or sum of a gathered per-sample vector
    GROUP = "group"  # the spread within consecutive groups of a gathered per-sample vector
    DISTINCT = "distinct"  # distinct / total of gathered int64 n-gram ids


# Slot fields each part keeps in the SUM-combined part of the pack, in pack order.
FIELDS = {
    Part.MEAN: ("sum", "count"),
    Part.STD: ("sum", "sumsq", "count"),
    Part.ESS: ("sum", "sumsq", "count"),
    Part.MIN: ("count",),
    Part.MAX: ("count",),
    Part.SUM: ("sum",),
    Part.QUANTILE: (),
    Part.SUMMARY: (),
    Part.GROUP: (),
    Part.DISTINCT: (),
}


# Per-sample columns ride in `Stats.vectors` under this prefix (no catalog key contains ":"), and so do
# vectors gathered only for their summaries (`add_summarized`).
COLUMN_PREFIX = "column:"
SUMMARIZED_PREFIX = "summarized:"
# Per-row tables (`add_table`) ride there too, flattened, their width in the key: "table:<width>:<name>".
TABLE_PREFIX = "table:"

Finish = Callable[..., tuple[dict[str, tuple[float, bool]], dict[str, list[float]]]]
"""`Stats.add_table`'s finish: (rows, params, calls) numpy arrays -> (stat values, per-sample values)."""
