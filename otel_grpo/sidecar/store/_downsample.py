"""Which steps a downsampled step history keeps (M4): per bucket of consecutive steps, its first
and last step and, for every column, the steps where the column is lowest and highest.

    keep = m4_rows(steps, [kl, reward], points=1000)   # row indices, ascending, at most 1000

A chart drawn through the kept steps has every bucket's full range for every column, so a spike
at a single step is always drawn. Kept steps are real steps: callers return their stored rows.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np


_MAX_PASSES = 6
"""M4 passes at most after the first, searching for the bucket count that fills `points`."""


def bucket_count(points: int, columns: int) -> int:
    """Buckets such that every bucket's rows (first, last, each column's min and max) fit in `points`
    however the columns' extremes fall: the number `m4_rows` starts its search from."""
    return max(1, points // (2 + 2 * columns))


class _M4:
    """The columns of one step range, prepared once for M4 passes at several bucket counts."""

    def __init__(self, steps: np.ndarray, columns: Sequence[np.ndarray]) -> None:
        self.steps, self.n = steps, len(steps)
        # Every column at once (one row of a 2-D block each, its values contiguous); NaN never wins.
        self.block = np.vstack(columns) if columns else np.empty((0, self.n))
        missing = np.isnan(self.block)
        holes = bool(missing.any())
        self.filled = [(np.where(missing, fill, self.block) if holes else self.block, reduce)
                       for fill, reduce in ((np.inf, np.minimum), (-np.inf, np.maximum))]

    def rows(self, buckets: int) -> np.ndarray:
        """The rows M4 keeps with `buckets` buckets, ascending. Buckets split the step numbers
        `steps[0]..steps[-1]` into equal ranges; ties keep the first step, so the result does not
        depend on how the rows were stored."""
        steps, n = self.steps, self.n
        first, span = int(steps[0]), int(steps[-1]) - int(steps[0]) + 1
        # Bucket i holds the steps in [edges[i], edges[i+1]); integer ceilings, as exact as the steps.
        # (The first edge is the first step and the last one past the last step: rows 0 and n.)
        inner = first + -(-(np.arange(1, buckets, dtype=object) * span) // buckets)
        bounds = np.concatenate(([0], np.searchsorted(steps, inner.astype(np.int64), side="left"), [n]))
        starts = bounds[:-1][bounds[1:] > bounds[:-1]]  # the non-empty buckets' first rows
        ends = np.append(starts[1:], n)
        keep = [starts, ends - 1]
        if len(self.block):
            # Per bucket, each column's lowest and highest value (reduceat over the buckets' rows),
            # then the first row holding each.
            bucket = np.repeat(np.arange(len(starts)), ends - starts)  # each row's bucket
            rows = np.arange(n)
            for values, reduce in self.filled:
                extreme = reduce.reduceat(values, starts, axis=1)
                found = np.minimum.reduceat(np.where(values == extreme[:, bucket], rows, n), starts, axis=1)
                keep.append(found[np.isfinite(extreme)])  # a bucket without a value in the column keeps nothing
        return np.unique(np.concatenate(keep))

    def most_extreme(self, candidates: np.ndarray, points: int) -> np.ndarray:
        """The first and last row and the `points - 2` rows of `candidates` whose value lies farthest
        from its column's median, in median absolute deviations (a row counts by its farthest
        column; ties keep the earlier row); ascending."""
        inner = candidates[(candidates > 0) & (candidates < self.n - 1)]
        score = np.zeros(len(inner))
        if len(self.block) and len(inner):
            with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # a column without any value: its median is NaN
                median = np.nanmedian(self.block, axis=1, keepdims=True)
                mad = np.nanmedian(np.abs(self.block - median), axis=1, keepdims=True)
                distance = np.abs(self.block[:, inner] - median)
                z = np.where(distance == 0, 0.0, distance / mad)  # a constant column: any departure is infinite
            score = np.maximum(np.max(np.where(np.isnan(z), -np.inf, z), axis=0), 0.0)
        chosen = inner[np.lexsort((inner, -score))[:max(0, points - 2)]]
        return np.unique(np.concatenate(([0, self.n - 1], chosen)))


def m4_rows(steps: np.ndarray, columns: Sequence[np.ndarray], points: int) -> np.ndarray:
    """The rows to keep, ascending: at most `points` (>= 2), every row where there are no more.
    `steps`: the range's step numbers, ascending (int64); `columns`: one float64 array per column,
    aligned with `steps`, NaN where the step has no value (a NaN never wins).

    As many buckets as fit: columns often share their extremes (a bad step holds the highest KL and
    the lowest reward), so the guaranteed count (`bucket_count`) is a floor, and the count is raised
    while the kept rows stay within `points`. Where even one bucket keeps more (more columns than
    points allow: 2 + 2 per column), the first and last step and the `points - 2` steps farthest
    from their column's median (`_M4.most_extreme`): a spike still comes first."""
    n = len(steps)
    if n <= points:
        return np.arange(n, dtype=np.int64)
    m4 = _M4(steps, columns)
    lo = bucket_count(points, len(columns))
    kept = m4.rows(lo)
    if len(kept) > points:  # lo == 1: a single bucket does not fit
        return m4.most_extreme(kept, points)
    # More buckets while the rows fit, by interpolation between a count that fits and one that does
    # not (rows grow about in proportion to buckets; not strictly: any count found to fit is a valid
    # answer). A few passes: stop within a tenth of `points`.
    hi, over = points + 1, None  # more buckets than points never fit a step range without gaps
    for _ in range(_MAX_PASSES):
        if hi - lo <= 1 or len(kept) >= points - points // 10:
            break
        if over is None:
            guess = lo * points // len(kept)
        else:
            guess = lo + (hi - lo) * (points - len(kept)) // (over - len(kept))
        mid = min(max(guess, lo + 1), hi - 1)
        candidate = m4.rows(mid)
        if len(candidate) <= points:
            lo, kept = mid, candidate
        else:
            hi, over = mid, len(candidate)
    return kept
