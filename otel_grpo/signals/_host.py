"""What the host finalizes from a gathered per-sample vector: quantiles and summaries.

Every rank's rows of a per-sample vector reach the host in `reduce_stats`' one copy (for the
histograms), in rank order, so their quantiles, means, spreads and extremes are plain float64
arithmetic here: no device op, and every rank (and one process on the concatenated batch)
gets the same value, bit for bit.
"""

from __future__ import annotations

import math


def quantile(ordered: list[float], q: float) -> float:
    """`torch.nanquantile`'s linear interpolation on sorted non-NaN values (its lerp; torch's fused
    multiply-add may round the last bits differently)."""
    rank = q * (len(ordered) - 1)
    below = math.floor(rank)
    low, high = ordered[below], ordered[math.ceil(rank)]
    weight = rank - below
    return low + weight * (high - low) if weight < 0.5 else high - (high - low) * (1 - weight)


def summary(values: list[float], stat: str) -> tuple[float, bool]:
    """(value, valid) of `stat` ("mean", "std", "min", "max" or "sum") over non-NaN `values`; invalid without
    any (a sum of none is 0 and valid, as a counter's). The std is unbiased (n - 1), 0 for one value, from the
    deviations from the mean (two passes: no cancellation when the spread is small against the mean)."""
    n = len(values)
    if stat == "sum":
        return math.fsum(values), True
    if n == 0:
        return 0.0, False
    if stat == "min":
        return min(values), True
    if stat == "max":
        return max(values), True
    mean = math.fsum(values) / n
    if stat == "mean":
        return mean, True
    if n == 1:
        return 0.0, True
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1)), True
