"""One generation batch of a GRPOTrainer -> its sample rows and what its stats need (still on device).

    stats = generation_stats(settings, gens)            # device: one per-row table, diversity, the sampler's sets
    ...                                                 # the logged step's one gather and host copy carry it
    values, invalid, samples = generation_values(settings, rows, sizes)  # host (`_generation_rows`)
    attach_generation(settings, rows, segments)         # host (`_generation_rows`): each row's rewards, advantage

Captured once per `_generate_and_score_completions`, so a batch that TRL reuses for
`num_iterations` passes or splits over `steps_per_generation` steps is counted once;
the stats of every batch a logged step covers are computed together. Every reward,
advantage and length stat is a summary of one number per row, so the device makes one
table of those numbers (a few ops for all the batches, where the per-stat functions took a
few per stat: benchmarks/README.md, trl_hooks_flush) and the host finishes the stats from every rank's rows with the
same float64 arithmetic `reduce_stats` applies to per-sample vectors; the rows' numbers
also become their sample rows' rewards and advantage, with no pass of their own.
Plain tensors and `TrlSettings` in: `_capture` reads TRL's dicts into these.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from ... import signals
from ._generation_rows import GENERATION_TABLE, SampleBatch
from ._rows import cat_rows, held_bytes
from ._sampler import sampler_stats
from ._settings import TrlSettings

_F64 = torch.float64


@dataclass(slots=True)
class Captured:
    """What `_calculate_rewards` saw: this rank's prompts and completions (TRL's own lists, not copied), and every
    rank's rewards."""

    prompts: list[Any]
    completions: list[Any]
    completion_ids: list[list[int]]
    rewards_per_func: Tensor
    """[N_all, F] gathered over ranks (TRL gathers it for group normalization)."""


@dataclass(slots=True)
class Generation:
    """What the stats of one generation batch need: TRL's tensors (on device) and host-side lengths."""

    rewards_per_func: Tensor
    """[N_all, F], every rank's."""
    advantages: Tensor
    """TRL's, this rank's rows: [B] or [B, T] (`row_advantages`)."""
    ids: Tensor
    mask: Tensor
    """[B, T] TRL's loss mask: completion tokens less a tool's answers (and, `mask_truncated_completions`, the
    truncated rows), 0/1 or bool."""
    lengths: list[int]
    """Each row's tokens that the model wrote, as TRL counts them (its tool mask's ones, with tools)."""
    truncated: list[bool]
    sampling: Tensor | None
    """[B, T] the sampler's log-probs (vLLM's or a `rollout_func`'s), NaN where it scored no token."""
    old: Tensor | None
    """[B, T] TRL's pi_old (`old_per_token_logps`), None where TRL computed none (its loss then takes its own
    log-probs: the mismatch is measured there)."""
    is_ratio: Tensor | None
    """TRL's corrected importance-sampling ratio: [B, T], or [B, 1] in sequence modes."""
    batch: SampleBatch | None = None
    """Its sample rows: they get the table's numbers of this batch's rows."""
    tool_spans: Sequence[tuple[int, int, int]] = ()
    """(row, start, end) of each run of a tool's answer tokens in the rows (`tool_spans`)."""

    @property
    def kind(self) -> tuple:
        """Batches of one kind are concatenated: the same optional tensors."""
        return (self.sampling is not None and self.old is not None,
                None if self.is_ratio is None else self.is_ratio.shape[-1] == 1)

    @property
    def nbytes(self) -> int:
        return held_bytes(self.rewards_per_func, self.advantages, self.ids, self.mask, self.sampling,
                          self.old, self.is_ratio)


def row_advantages(advantages: Tensor) -> Tensor:
    """[B] from TRL's [B] or [B, T] advantages (per-token ones: each row's first token's)."""
    return advantages if advantages.dim() == 1 else advantages.reshape(advantages.shape[0], -1)[:, 0]


def weighted_totals(weights: Sequence[float], rewards_per_func: Tensor) -> Tensor:
    """[N] total reward as TRL weights it; NaN where no function scored the row (TRL's unscorable rows)."""
    w = _weights(tuple(weights), rewards_per_func.dtype, rewards_per_func.device)
    total = (rewards_per_func * w).nansum(dim=1)
    return torch.where(torch.isnan(rewards_per_func).all(dim=1), math.nan, total)


@functools.lru_cache(maxsize=16)
def _weights(weights: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """[1, F] on the rewards' device: made once (a host-to-device copy), the same weights every step."""
    return torch.tensor([weights], dtype=dtype, device=device)


def truncated_flags(completion_ids: Sequence[Sequence[int]], stop_ids: frozenset[int]) -> list[bool]:
    """Whether each completion hit the length limit: it ends on neither EOS nor pad (TRL's host-side id lists)."""
    return [bool(ids) and ids[-1] not in stop_ids for ids in completion_ids]


def tool_spans(tool_mask: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """(row, start, end) of each run of 0s in TRL's host tool mask (`tool_mask[row]`: 1 a token the model wrote,
    0 one a tool's answer put in the completion). A few list scans per tool call, in C: no per-token Python."""
    spans = []
    for row, mask in enumerate(tool_mask):
        mask, end = list(mask), 0
        while True:
            try:
                start = mask.index(0, end)
            except ValueError:  # no more answers in this row
                break
            try:
                end = mask.index(1, start)
            except ValueError:  # the row ends in an answer
                end = len(mask)
            spans.append((row, start, end))
    return spans


def generation_stats(settings: TrlSettings, gens: Sequence[Generation]) -> signals.Stats:
    """Generation batches of one kind, as one batch: their per-row table (`GENERATION_TABLE`, this rank's rows,
    `generation_columns`), distinct-n, and the mismatch and rollout-IS sets where TRL holds the sampler's log-probs.
    Device ops only; the lengths, truncation flags and tool answers' spans, known on the host, go over in one copy."""
    sizes = [len(g.lengths) for g in gens]
    total, at = sum(sizes), settings.rank
    # TRL gathers every rank's rewards (for its advantages): this rank's rows of each batch
    rewards = cat_rows([g.rewards_per_func if settings.world == 1 else g.rewards_per_func[at * n : (at + 1) * n]
                        for g, n in zip(gens, sizes)], math.nan)  # [R, F]
    ids, mask = cat_rows([g.ids for g in gens], 0), cat_rows([g.mask for g in gens], 0)
    firsts = [sum(sizes[:i]) for i in range(len(gens))]  # each batch's first row in the concatenation
    spans = [x for g, first in zip(gens, firsts) for row, start, end in g.tool_spans for x in (first + row, start, end)]
    host = [n for g in gens for n in g.lengths] + [float(t) for g in gens for t in g.truncated] + spans
    flat = signals.to_device(host, ids.device, _F64)  # one copy: lengths, truncation flags, tool answers' spans
    lengths, truncated = flat[:total], flat[total : 2 * total]
    totals = weighted_totals(settings.reward_weights, rewards)  # TRL's dtype, as TRL's
    advantages = cat_rows([row_advantages(g.advantages) for g in gens], 0.0)
    table = torch.cat([torch.stack([totals.to(_F64), advantages.to(_F64), lengths, truncated], 1), rewards.to(_F64)], 1)
    stats = signals.Stats().add_table(GENERATION_TABLE, table)
    width = ids.shape[1]
    # the n-gram payloads are gathered across ranks, which needs one size on every rank: the generation limit
    max_len = max(settings.max_completion_length, width) if settings.world > 1 else None
    return stats.update(signals.diversity_stats(ids, _model_tokens(lengths, flat[2 * total :].view(-1, 3), width),
                                                width=max_len),
                        *_sampling_stats(settings, gens, mask))


def _model_tokens(lengths: Tensor, spans: Tensor, width: int) -> Tensor:
    """[N, width] the tokens the model wrote, whatever TRL's loss masks (`mask_truncated_completions` zeroes the
    truncated rows, which the model wrote as well): each row's first `length` tokens, and a tool's answers
    (`spans`: [S, 3] row, start, end) between them. Device ops only."""
    positions = torch.arange(width, device=lengths.device, dtype=lengths.dtype)
    if spans.shape[0] == 0:  # no tool answered (every run without tools): the rows' first `length` tokens
        return positions < lengths[:, None]
    in_span = ((positions >= spans[:, 1:2]) & (positions < spans[:, 2:3])).to(lengths.dtype)  # [S, width]
    answer = torch.zeros(lengths.shape[0], width, device=lengths.device, dtype=lengths.dtype)
    answer.index_add_(0, spans[:, 0].long(), in_span)
    return (positions < (lengths + answer.sum(1))[:, None]) & (answer == 0)


def _sampling_stats(settings: TrlSettings, gens: Sequence[Generation], mask: Tensor) -> list[signals.Stats]:
    """Mismatch and rollout-IS sets where TRL holds the sampler's log-probs and computed pi_old (without pi_old
    the rows' first loss pass measures them: `_micro_batch.sampler_batch_stats`); TRL's corrected IS ratio."""
    found = []
    first = gens[0]
    if first.sampling is not None and first.old is not None:
        found.append(sampler_stats(settings, cat_rows([g.old for g in gens], 0.0),
                                   cat_rows([g.sampling for g in gens], 0.0), mask))
    if first.is_ratio is not None:
        found.append(_trl_is_ratio(cat_rows([g.is_ratio for g in gens], 1.0), mask))
    return found


def _trl_is_ratio(ratio: Tensor, mask: Tensor) -> signals.Stats:
    """TRL's corrected ratio as it logs it: over completion tokens, or over rows in sequence modes ([B, 1])."""
    valid = torch.ones_like(ratio, dtype=torch.bool) if ratio.shape[-1] == 1 else mask.bool()
    r = ratio.detach().double()
    n = valid.sum(dtype=torch.float64)
    st = signals.Stats()
    st.add_mean("trl_is_ratio_mean", torch.where(valid, r, 0.0).sum(), n)
    st.add_min("trl_is_ratio_min", torch.where(valid, r, math.inf).min(), n)
    st.add_max("trl_is_ratio_max", torch.where(valid, r, -math.inf).max(), n)
    return st
