"""What the host finalizes from a gathered per-sample vector: quantiles and summaries (numpy: no torch).

Every rank's rows of a per-sample vector reach the host in `reduce_stats`' one copy (for the
histograms), in rank order, so their quantiles, means, spreads and extremes are plain float64
arithmetic here: no device op, and every rank (and one process on the concatenated batch)
gets the same value, bit for bit.
"""

from __future__ import annotations

import math
import operator
from typing import Mapping, Sequence

import numpy as np

INF = float("inf")
SAFETY_BOUND = 20.0  # IS ratios are exp(clamp(log ratio, +-20)); exp(20) ~ 4.9e8: no overflow in float32


def quantile(ordered: list[float], q: float) -> float:
    """`torch.nanquantile`'s linear interpolation on sorted non-NaN values (its lerp; torch's fused
    multiply-add may round the last bits differently)."""
    rank = q * (len(ordered) - 1)
    below = math.floor(rank)
    low, high = ordered[below], ordered[math.ceil(rank)]
    weight = rank - below
    return low + weight * (high - low) if weight < 0.5 else high - (high - low) * (1 - weight)


def summaries(values: list[float], stats: set[str]) -> dict[str, tuple[float, bool]]:
    """(value, valid) of each of `stats` ("mean", "std", "min", "max", "sum") over non-NaN `values`; invalid
    without any (a sum of none is 0 and valid, as a counter's). Sums are correctly rounded (`math.fsum`): the
    same whatever the order of the rows. The std is unbiased (n - 1), 0 for one value, from the deviations
    from the mean (two passes: no cancellation when the spread is small against the mean)."""
    n = len(values)
    out: dict[str, tuple[float, bool]] = {}
    if "sum" in stats:
        out["sum"] = (math.fsum(values), True)
    if n == 0:
        return out | {stat: (0.0, False) for stat in stats - {"sum"}}
    if "min" in stats:
        out["min"] = (min(values), True)
    if "max" in stats:
        out["max"] = (max(values), True)
    if stats & {"mean", "std"}:
        mean = math.fsum(values) / n
        out["mean"] = (mean, True)
        if "std" in stats:
            deviations = [x - mean for x in values]
            spread = math.sqrt(math.fsum(map(operator.mul, deviations, deviations)) / (n - 1)) if n > 1 else 0.0
            out["std"] = (spread, True)
    return out


def finish_vector(values: list[float], quantiles: Mapping[str, float],
                  summarized: Mapping[str, str]) -> list[tuple[str, float, bool]]:
    """(key, value, valid) of each quantile (key -> q) and summary (key -> stat) of one vector's non-NaN `values`,
    as `reduce_stats` finishes a gathered per-sample vector (`Stats.add_samples`): for a caller that gets its
    rows to the host another way (a per-row table), the same numbers."""
    out = []
    if quantiles:
        ordered = sorted(values)
        out += [(key, quantile(ordered, q), True) if ordered else (key, 0.0, False) for key, q in quantiles.items()]
    if summarized:
        of = summaries(values, set(summarized.values()))
        out += [(key, *of[stat]) for key, stat in summarized.items()]
    return out


def called_rows(calls: np.ndarray, n_row: np.ndarray) -> np.ndarray:
    """[R] bool: the rows of a finished table (`Stats.add_table`) whose call has a token at all: a call
    without one counts nowhere, as the seed's merge drops a rank without a valid token."""
    return np.bincount(calls, weights=n_row)[calls] > 0


ESS_EPS = 1e-8
"""The seed's: ESS = 1 / mean((w / (mean w + 1e-8))^2)."""


def std_from_sums(total: float, sumsq: float, count: float, unbiased: bool) -> float:
    """The standard deviation from sum x, sum x^2 and n (0 for n <= 1; a NaN stays NaN), as `reduce_stats`
    finishes a `Stats.add_std` part: the same float64 operations wherever the sums come from."""
    c1 = max(count, 1.0)
    mean = total / c1
    var = max(sumsq / c1 - mean * mean, 0.0)  # max(nan, 0.0) is nan, as torch's clamp
    if unbiased:
        var = var * count / max(count - 1, 1.0)
    return math.sqrt(var) if count > 1 else 0.0


def ess_from_sums(total: float, sumsq: float, count: float) -> float:
    """(mean w + 1e-8)^2 / mean(w^2) from sum w, sum w^2 and n (`Stats.add_ess`)."""
    c1 = max(count, 1.0)
    m = total / c1 + ESS_EPS
    return m * m / max(sumsq / c1, 1e-300)


ZERO_STD_ATOL = 1e-8
"""`torch.isclose(std, 0)` as TRL's `frac_reward_zero_std` uses it: |std| <= atol (rtol * 0 = 0)."""


def group_spread(values: Sequence[float], size: int) -> dict[str, tuple[float, bool]]:
    """(value, valid) of "std", the mean over the groups of `size` consecutive `values` that hold a non-NaN value
    of their unbiased std (0 for one value; two passes, `math.fsum`), and of "zero_std", the fraction of those
    groups whose std is 0 within `ZERO_STD_ATOL`; both invalid without such a group."""
    spreads = []
    for start in range(0, len(values), size):
        group = [x for x in values[start : start + size] if x == x]
        if not group:
            continue
        mean = math.fsum(group) / len(group)
        deviations = [x - mean for x in group]
        spreads.append(math.sqrt(math.fsum(map(operator.mul, deviations, deviations)) / (len(group) - 1))
                       if len(group) > 1 else 0.0)
    if not spreads:
        return {"std": (0.0, False), "zero_std": (0.0, False)}
    return {"std": (math.fsum(spreads) / len(spreads), True),
            "zero_std": (sum(s <= ZERO_STD_ATOL for s in spreads) / len(spreads), True)}
