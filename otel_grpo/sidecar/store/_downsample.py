"""Which steps a downsampled step history keeps (M4): per bucket of consecutive steps, its first
and last step and, for every column, the steps where the column is lowest and highest.

    keep = m4_rows(steps, [kl, reward], points=1000)   # row indices, ascending

A chart drawn through the kept steps has every bucket's full range for every column, so a spike
at a single step is always drawn. Kept steps are real steps: callers return their stored rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def bucket_count(points: int, columns: int) -> int:
    """Buckets such that every bucket's rows (first, last, each column's min and max) fit in `points`."""
    return max(1, points // (2 + 2 * columns))


def m4_rows(steps: np.ndarray, columns: Sequence[np.ndarray], points: int) -> np.ndarray:
    """The rows to keep, ascending: at most `points`, or the 2 + 2 per column of one bucket where
    that is more. `steps`: the range's step numbers, ascending (int64); `columns`: one float64
    array per column, aligned with `steps`, NaN where the step has no value (a NaN never wins).
    Buckets split the step numbers `steps[0]..steps[-1]` into equal ranges; ties keep the first
    step, so the result does not depend on how the rows were stored."""
    n = len(steps)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    buckets = bucket_count(points, len(columns))
    first, span = int(steps[0]), int(steps[-1]) - int(steps[0]) + 1
    # Bucket i holds the steps in [edges[i], edges[i+1]); integer ceilings, as exact as the steps.
    # (The first edge is the first step and the last one past the last step: rows 0 and n.)
    inner = first + -(-(np.arange(1, buckets, dtype=object) * span) // buckets)
    bounds = np.concatenate(([0], np.searchsorted(steps, inner.astype(np.int64), side="left"), [n]))
    starts = bounds[:-1][bounds[1:] > bounds[:-1]]  # the non-empty buckets' first rows
    ends = np.append(starts[1:], n)
    keep = [starts, ends - 1]
    if columns:
        # Every column at once (one row of a 2-D block each, its values contiguous): per bucket,
        # its lowest and highest value (reduceat over the buckets' rows), then the first row
        # holding each.
        block = np.vstack(columns)
        missing = np.isnan(block)
        holes = bool(missing.any())
        bucket = np.repeat(np.arange(len(starts)), ends - starts)  # each row's bucket
        rows = np.arange(n)
        for fill, reduce in ((np.inf, np.minimum), (-np.inf, np.maximum)):
            values = np.where(missing, fill, block) if holes else block
            extreme = reduce.reduceat(values, starts, axis=1)
            found = np.minimum.reduceat(np.where(values == extreme[:, bucket], rows, n), starts, axis=1)
            keep.append(found[np.isfinite(extreme)])  # a bucket without a value in the column keeps nothing
    return np.unique(np.concatenate(keep))
