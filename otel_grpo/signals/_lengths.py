"""Completion length signals: sampled and terminated lengths, truncation, token counter."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import count, describe_rows
from ._partial import Stats


_NAMES = [
    {"mean": "completion_length_mean", "std": "completion_length_std", "min": "completion_length_min",
     "max": "completion_length_max"},
    {"mean": "terminated_length_mean", "min": "terminated_length_min", "max": "terminated_length_max"},
]


@torch.no_grad()
def length_stats(completion_mask: Tensor, truncated: Tensor) -> Stats:
    """Length stats of a batch of padded completions.

    Args:
        completion_mask: [B, T] bool or 0/1, True on completion tokens.
        truncated: [B] bool or 0/1, True where the completion hit the length
            limit without EOS (TRL's "clipped").

    Adds `completion_length_mean/std/min/max` over all completions (std
    unbiased), `completions_clipped_ratio`, `terminated_length_mean/min/max`
    over completions that ended with EOS (invalid when there are none), the
    per-sample vector `sample_completion_length` and the counter `tokens`.
    """
    stats = Stats()
    mask = v.binary(completion_mask, "completion_mask", stats, dim=2)
    batch = mask.shape[0]
    done_early = v.binary(truncated, "truncated", stats, shape=(batch,))
    lengths = mask.sum(-1, dtype=torch.float64)  # [B]
    # all completions, then those that ended with EOS: one pass over [2, B]
    valid = torch.stack([torch.ones_like(done_early), ~done_early])
    describe_rows(stats, lengths.expand(2, batch), valid, _NAMES)
    every = torch.full((), batch, dtype=torch.float64, device=lengths.device)
    stats.add_mean("completions_clipped_ratio", count(done_early), every)
    stats.add_samples("sample_completion_length", lengths)
    stats.add_sum("tokens", lengths.sum())
    return stats
