"""Each sample row's generation numbers, as columns of the logged step's reduction.

    columns = diagnose(settings, [a, b])      # Stats with one column per number, rows of a then of b

The columns ride in the logged step's `reduce_stats` (no extra host read) and are, per row: its
rewards, total reward and advantage, and `length_clipped`. Its loss pass's numbers (`log_ratio_mean`,
`is_weight_max`, `kl_ref_mean`, ...) come from the micro-batches' table (`_micro_batch.row_numbers`).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ... import signals
from ._generation import (ADVANTAGE_COLUMN, FN_COLUMN, REWARD_COLUMN, SampleBatch, local_rewards, row_advantages,
                          weighted_totals)
from ._rows import cat_rows
from ._settings import TrlSettings


def diagnose(settings: TrlSettings, batches: Sequence[SampleBatch]) -> signals.Stats:
    """The batches' per-row generation columns in one pass of torch ops (device ops only); the same columns for
    every batch of a run."""
    stats = signals.Stats()
    device = batches[0].advantages.device
    truncated = signals.to_device([t for b in batches for t in b.truncated], device, torch.float64)
    stats.add_column("length_clipped", truncated)
    rewards = cat_rows([local_rewards(settings, b) for b in batches], math.nan)  # [N, F]
    for i, name in enumerate(settings.reward_names):
        stats.add_column(FN_COLUMN + name, rewards[:, i])
    stats.add_column(REWARD_COLUMN, weighted_totals(settings.reward_weights, rewards))  # TRL's dtype, as TRL's
    stats.add_column(ADVANTAGE_COLUMN, cat_rows([row_advantages(b.advantages) for b in batches], 0.0))
    return stats
