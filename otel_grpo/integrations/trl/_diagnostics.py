"""Each sample row's own numbers (`signals.sample_diagnostics`) from its generation batch's first loss pass.

    batch.passes.append(micro_batch)          # a first-pass micro-batch; `rows`: its rows' positions
    columns = diagnose(settings, [a, b])      # Stats with one column per diagnostic, rows of a then of b

TRL shuffles a generation batch before splitting it into micro-batches, so each first-pass
micro-batch carries its rows' positions (`MicroBatch.rows`) and the columns' rows are put back
in order on the device. The columns ride in the logged step's `reduce_stats` (no extra host
read) and are, per row: its rewards, total reward and advantage, `completion_length` and
`length_clipped` (from the generation), and from that pass `log_ratio_mean/absmax` and `is_weight_mean/max` of pi_theta against the
behaviour policy (the sampler's log-probs with vLLM, else pi_old: 1 on-policy), `kl_ref_mean/max`
(k3 to the reference, when `beta != 0`) and `entropy_mean`. A row no pass reached (training
ended first) has only the generation's columns.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ... import signals
from ._generation import (ADVANTAGE_COLUMN, FN_COLUMN, REWARD_COLUMN, SampleBatch, local_rewards,
                          row_advantages, weighted_totals)
from ._micro_batch import MicroBatch
from ._rows import cat_rows
from ._settings import TrlSettings


def diagnose(settings: TrlSettings, batches: Sequence[SampleBatch]) -> signals.Stats:
    """The batches' per-row diagnostics in one pass of torch ops (device ops only); the same columns for
    every batch of a run."""
    passes, positions, size = [], [], 0
    for batch in batches:  # each pass's rows, as positions among every row of `batches`
        for p in batch.passes:
            passes.append(p)
            positions.append(p.rows if size == 0 else p.rows + size)
        size += batch.size
    stats = signals.Stats()  # training ended before any row went through the loss: no loss numbers
    if passes:
        mask, logps, behaviour, ref, entropy = _in_pass_order(settings, passes)
        # computed on the passes' rows as TRL shuffled them, then moved to their places: one move for
        # every column, where putting each tensor in row order first took one per pass and tensor
        stats = signals.sample_diagnostics(mask, logprobs=logps, rollout_logprobs=behaviour, ref_logprobs=ref,
                                           entropy=entropy)
        stats.move_rows(torch.cat(positions), size)
    device = batches[0].advantages.device
    truncated = signals.to_device([t for b in batches for t in b.truncated], device, torch.float64)
    stats.add_column("length_clipped", truncated)
    _add_values(settings, batches, stats)
    return stats


def _in_pass_order(settings: TrlSettings, passes: Sequence[MicroBatch]) -> list[torch.Tensor | None]:
    """Mask, log-probs, behaviour log-probs, reference log-probs (None at beta 0) and entropy (NaN where a pass
    has none) of the passes' rows, concatenated (narrower passes right-padded, masked out)."""
    mask = cat_rows([p.mask for p in passes], False).bool()  # TRL's 0/1 (as policy_stats reads it)
    logps = cat_rows([p.logps for p in passes], 0.0)
    behaviour = cat_rows([_behaviour(p) for p in passes], 0.0)
    ref = None
    if settings.beta != 0.0:
        ref = cat_rows([torch.zeros_like(p.logps) if p.ref is None else p.ref for p in passes], 0.0)
    # NaN: a pass without entropy; padding is masked out, so 0 (NaN * 0 would be NaN)
    entropy = cat_rows([torch.full_like(p.logps, math.nan) if p.entropy is None else p.entropy for p in passes], 0.0)
    return [mask, logps, behaviour, ref, entropy]


def _add_values(settings: TrlSettings, batches: Sequence[SampleBatch], stats: signals.Stats) -> None:
    """Each row's per-function rewards, total reward (as TRL weights it) and advantage, as columns: they
    reach the host in the logged step's one copy, with the diagnostics."""
    rewards = cat_rows([local_rewards(settings, b) for b in batches], math.nan)  # [N, F]
    for i, name in enumerate(settings.reward_names):
        stats.add_column(FN_COLUMN + name, rewards[:, i])
    stats.add_column(REWARD_COLUMN, weighted_totals(settings.reward_weights, rewards))  # TRL's dtype, as TRL's
    stats.add_column(ADVANTAGE_COLUMN, cat_rows([row_advantages(b.advantages) for b in batches], 0.0))


def _behaviour(p: MicroBatch) -> torch.Tensor:
    """The policy that sampled the rows: the sampler's log-probs (vLLM; its unscored tokens: pi_old, as TRL),
    else pi_old."""
    if p.sampling is None:
        return p.old
    return torch.where(torch.isnan(p.sampling), p.old, p.sampling)
