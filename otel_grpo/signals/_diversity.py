"""Completion diversity: distinct-1 / distinct-2 over the whole step's batch (every rank), and within prompt groups."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import count
from ._partial import Stats, pad_ids

_ID_LIMIT = 2**31  # token ids below this pack two to an int64 without collision


@torch.no_grad()
def diversity_stats(
    completion_ids: Tensor, mask: Tensor, *, width: int | None = None, group_size: int | None = None
) -> Stats:
    """Distinct unigrams / bigrams over the completions of every rank.

    Args:
        completion_ids: [B, T] integer token ids, 0 <= id < 2**31 on valid tokens.
        mask: [B, T] bool or 0/1, completion tokens. Bigrams are pairs of
            adjacent positions that are both valid.
        width: pad each rank's payload to B * width n-grams. The n-gram ids are
            gathered (reduce_stats' one all_gather), which needs the same payload
            size on every rank: pass the maximum completion length when ranks pad
            their batches to different T. Defaults to T.
        group_size: completions per prompt (rows g*G .. g*G+G-1 share a prompt, whole
            groups on each rank); adds `distinct_1_group`, `distinct_2_group` (mean
            over groups of the distinct-n ratio among the group's completions) and
            `jaccard_group` (mean over groups of the mean pairwise Jaccard similarity
            of the completions' token sets; pairs of two empty completions skipped).

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
    stats.add_distinct("distinct_1", pad_ids(unigrams, batch * width))
    stats.add_distinct("distinct_2", pad_ids(bigrams, batch * width))
    if group_size is not None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or batch % group_size:
            raise ValueError(f"group_size must be a positive int dividing the batch size {batch}, got {group_size!r}")
        for key, grams in (("distinct_1_group", unigrams), ("distinct_2_group", bigrams)):
            distinct, total = _per_group_distinct(grams, group_size)[:2]
            has = total > 0
            stats.add_mean(key, torch.where(has, distinct / total.clamp(min=1), 0.0).sum(dtype=torch.float64), count(has))
        _jaccard(stats, unigrams, group_size)
    return stats


def _per_group_distinct(grams: Tensor, group_size: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Distinct and total n-grams per group of [B, W] ids (-1: none), with no host sync.

    Returns (distinct [N], total [N], sorted group of each id, its flat index, its new-(group, id) flag),
    ids sorted by (group, id) with two stable sorts (ids up to 2**63 leave no room to pack the group in).
    """
    batch, width = grams.shape
    groups = batch // group_size
    flat = grams.reshape(-1)
    group_of = torch.arange(batch, device=grams.device).div(group_size, rounding_mode="floor").repeat_interleave(width)
    by_id = torch.sort(flat, stable=True).indices
    by_group = torch.sort(group_of[by_id], stable=True).indices
    order = by_id[by_group]
    g, ids = group_of[order], flat[order]
    real = ids != -1
    new = torch.ones_like(real)
    new[1:] = (ids[1:] != ids[:-1]) | (g[1:] != g[:-1])
    new &= real
    zeros = torch.zeros(groups, dtype=torch.float64, device=grams.device)
    distinct = zeros.scatter_add(0, g, new.to(torch.float64))
    total = zeros.scatter_add(0, g, real.to(torch.float64))
    return distinct, total, g, order, new


def _jaccard(stats: Stats, unigrams: Tensor, group_size: int) -> None:
    """Mean over groups of the mean pairwise Jaccard similarity of token sets, from a [N, G, V] incidence."""
    batch, width = unigrams.shape
    groups, size = batch // group_size, group_size
    distinct, _, g, order, new = _per_group_distinct(unigrams, group_size)
    column = torch.cumsum(new.to(torch.int64), 0) - 1  # running index of (group, token) over the sorted ids
    start = (torch.cumsum(distinct, 0) - distinct).to(torch.int64)  # first column of each group
    real = unigrams.reshape(-1)[order] != -1
    vocab = size * width
    local = torch.where(real, column - start[g], vocab)  # padding goes to a spare column
    row = (order // width) % size
    incidence = torch.zeros(groups, size, vocab + 1, device=unigrams.device)
    # index_fill_ takes the 1 as a kernel argument; an indexed assignment (`incidence[g, row, local] = 1.0`)
    # would copy it from the host, which on a GPU waits for every kernel already queued
    incidence.view(-1).index_fill_(0, (g * size + row) * (vocab + 1) + local, 1.0)
    incidence = incidence[:, :, :vocab]
    inter = torch.bmm(incidence, incidence.transpose(1, 2))  # [N, G, G] shared tokens
    sizes = incidence.sum(-1)
    union = sizes.unsqueeze(-1) + sizes.unsqueeze(-2) - inter
    pairs = torch.ones(size, size, dtype=torch.bool, device=unigrams.device).triu(1) & (union > 0)
    n_pairs = pairs.sum((-1, -2))
    per_group = torch.where(pairs, inter / union.clamp(min=1), 0.0).sum((-1, -2)) / n_pairs.clamp(min=1)
    has = n_pairs > 0
    stats.add_mean("jaccard_group", torch.where(has, per_group, 0.0).sum(dtype=torch.float64), count(has))
