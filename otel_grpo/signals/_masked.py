"""Small masked reductions shared by the stat families (device tensors in, 0-d tensors out)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._partial import Stats

_F64 = torch.float64
INF = float("inf")


def count(valid: Tensor) -> Tensor:
    """Number of True entries as a 0-d float64 tensor."""
    return valid.sum(dtype=_F64)


def describe(
    stats: Stats,
    values: Tensor,
    valid: Tensor,
    *,
    mean: str | None = None,
    std: str | None = None,
    min: str | None = None,  # noqa: A002 - reads like the stat it names
    max: str | None = None,  # noqa: A002
    unbiased: bool = True,
) -> Stats:
    """Add mean / std / min / max of `values[valid]` (any shape, same shape as `valid`).

    Invalid entries may hold anything (NaN, inf): they are selected away, never
    multiplied by zero.
    """
    n = count(valid)
    if mean or std:
        x = torch.where(valid, values, 0.0).to(_F64)
        total = x.sum()
        if mean:
            stats.add_mean(mean, total, n)
        if std:
            stats.add_std(std, total, (x * x).sum(), n, unbiased=unbiased)
    if min:
        stats.add_min(min, torch.where(valid, values, INF).min(), n)
    if max:
        stats.add_max(max, torch.where(valid, values, -INF).max(), n)
    return stats


def row_counts(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """Valid tokens per row: [B, T] bool -> [B] of `dtype`."""
    return mask.sum(-1, dtype=dtype)


def masked_max(x: Tensor, pad: Tensor) -> Tensor:
    """Max of `x` where `pad` is False (-inf if none): [B, T] -> 0-d."""
    return x.masked_fill(pad, -INF).max()


def masked_min(x: Tensor, pad: Tensor) -> Tensor:
    """Min of `x` where `pad` is False (+inf if none): [B, T] -> 0-d."""
    return x.masked_fill(pad, INF).min()
