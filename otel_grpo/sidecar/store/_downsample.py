"""Which steps a downsampled step history keeps (M4): per bucket of consecutive steps, its first
and last step and, for every column, the steps where the column is lowest and highest.

    keep = m4_steps(steps, {"kl": (kl_steps, kl_values)}, points=1000)

A chart drawn through the kept steps has every bucket's full range for every column, so a spike
at a single step is always drawn. Kept steps are real steps: callers return their stored rows.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

_INF = float("inf")


def bucket_count(points: int, columns: int) -> int:
    """Buckets such that every bucket's rows (first, last, each column's min and max) fit in `points`."""
    return max(1, points // (2 + 2 * columns))


def m4_steps(steps: Sequence[int], columns: Mapping[str, tuple[Sequence[int], Sequence[float | None]]],
             points: int) -> list[int]:
    """The steps to keep, ascending: at most `points`, or the 2 + 2 per column of one bucket where
    that is more. `steps`: every step of the range, ascending; `columns`: per column, the steps that
    have it (ascending) and its values there (None: no value). Buckets split the step numbers
    `steps[0]..steps[-1]` into equal ranges; ties keep the first step, so both stores agree."""
    if not steps:
        return []
    buckets = bucket_count(points, len(columns))
    first, span = steps[0], steps[-1] - steps[0] + 1
    edges = [first + -(-(i * span) // buckets) for i in range(buckets + 1)]  # bucket i: [edges[i], edges[i+1])
    keep: set[int] = set()
    _bounds(steps, edges, keep)
    for col_steps, values in columns.values():
        _extremes(col_steps, values, edges, keep)
    return sorted(keep)


def _bounds(steps: Sequence[int], edges: list[int], keep: set[int]) -> None:
    lo = 0
    for edge in edges[1:]:
        hi = bisect_left(steps, edge, lo)
        if hi > lo:
            keep.add(steps[lo])
            keep.add(steps[hi - 1])
        lo = hi


def _extremes(steps: Sequence[int], values: Sequence[float | None], edges: list[int], keep: set[int]) -> None:
    # min()/max() and list.index run in C over each bucket's slice, several times faster than a
    # Python loop over every (step, value). None (a non-finite scalar) never wins either;
    # min() finds one (TypeError) sooner than a search for it would in the usual column without.
    try:
        plain = min(values, default=0.0) is not None  # [None] alone compares nothing
    except TypeError:
        plain = False
    if plain:
        lows = highs = values
    else:
        lows = [_INF if v is None else v for v in values]
        highs = [-_INF if v is None else v for v in values]
    lo = bisect_left(steps, edges[0])
    for edge in edges[1:]:
        hi = bisect_left(steps, edge, lo)
        if hi > lo:
            part = lows[lo:hi]
            low = min(part)
            if low != _INF:
                keep.add(steps[lo + part.index(low)])
                part = highs[lo:hi] if highs is not lows else part
                keep.add(steps[lo + part.index(max(part))])
        lo = hi
