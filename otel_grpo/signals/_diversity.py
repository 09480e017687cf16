"""Completion diversity: distinct-1 / distinct-2 over the whole step's batch (every rank)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._partial import Stats

_ID_LIMIT = 2**31  # token ids below this pack two to an int64 without collision


@torch.no_grad()
def diversity_stats(completion_ids: Tensor, mask: Tensor, *, width: int | None = None) -> Stats:
    """Distinct unigrams / bigrams over the completions of every rank.

    Args:
        completion_ids: [B, T] integer token ids, 0 <= id < 2**31 on valid tokens.
        mask: [B, T] bool or 0/1, completion tokens. Bigrams are pairs of
            adjacent positions that are both valid.
        width: pad each rank's payload to B * width n-grams. The n-gram ids are
            gathered (reduce_stats' one all_gather), which needs the same payload
            size on every rank: pass the maximum completion length when ranks pad
            their batches to different T. Defaults to T.

    Unigram ids are the token ids; a bigram (a, b) is a * 2**32 + b, so counts are
    exact (no hashing collisions). The payload is B * width int64 per n-gram order.
    """
    stats = Stats()
    ids = v.integer(completion_ids, "completion_ids", dim=2)
    m = v.binary(mask, "mask", stats, shape=tuple(ids.shape))
    batch, length = ids.shape
    width = length if width is None else int(width)
    if width < length:
        raise ValueError(f"width {width} is smaller than the completion length T={length}")
    ids = ids.to(torch.int64)
    out_of_range = (((ids < 0) | (ids >= _ID_LIMIT)) & m).sum()
    v.value_check(ids, "completion_ids", out_of_range, stats, "completion_ids must lie in [0, 2**31) on valid tokens")

    unigrams = torch.where(m, ids, -1)
    pair_ok = m[:, :-1] & m[:, 1:]
    bigrams = torch.where(pair_ok, ids[:, :-1] * _ID_LIMIT * 2 + ids[:, 1:], -1)
    stats.add_distinct("distinct_1", _pad(unigrams, batch * width))
    stats.add_distinct("distinct_2", _pad(bigrams, batch * width))
    return stats


def _pad(ngrams: Tensor, size: int) -> Tensor:
    flat = ngrams.reshape(-1)
    if flat.numel() == size:
        return flat
    return torch.cat([flat, flat.new_full((size - flat.numel(),), -1)])
