"""Completion length signals: sampled and terminated lengths, truncation, token counter."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _validate as v
from ._masked import count
from ._partial import Stats
from ._summaries import LENGTH_SUMMARIES, TERMINATED_SUMMARIES


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
    # summaries of the gathered lengths (host): of every completion, and of those that ended with EOS
    stats.add_samples("sample_completion_length", lengths, summaries=LENGTH_SUMMARIES)
    stats.add_summarized("terminated_length", torch.where(done_early, math.nan, lengths), TERMINATED_SUMMARIES)
    every = torch.full((), batch, dtype=torch.float64, device=lengths.device)
    stats.add_mean("completions_clipped_ratio", count(done_early), every)
    return stats
