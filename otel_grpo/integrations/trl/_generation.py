"""One generation batch of a GRPOTrainer -> its sample rows and what its stats need (still on device).

Captured once per `_generate_and_score_completions`, so a batch that TRL reuses for
`num_iterations` passes or splits over `steps_per_generation` steps is counted once;
the stats of every batch a logged step covers are computed together (`generation_stats`).
Plain tensors and `TrlSettings` in: `_capture` reads TRL's dicts into these.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor

from ... import signals
from ._chat import chat_text
from ._rows import cat_rows, held_bytes
from ._settings import TrlSettings


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
class SampleBatch:
    """A generation batch's rows, kept until the logged step: host columns here, their rewards and advantages
    on device (they reach the host as diagnostics columns, in the logged step's one copy)."""

    captured: Captured
    advantages: Tensor
    """TRL's advantages of this rank's rows: [B], or [B, T] (per token: each row's first is its own)."""
    lengths: list[int]
    truncated: list[bool]
    first_index: int
    """Global index of this rank's first row (groups are global)."""
    policy_version: int
    loss_numbers: dict[int, dict[str, float]] = field(default_factory=dict)
    """Row position -> the numbers of its first pass through the loss (`_micro_batch.row_numbers`), put here
    on the host when the logged step that reduced that pass comes back."""
    pending: int = 0
    """Rows not yet through their first loss pass (their per-sample diagnostics come from it)."""

    @property
    def size(self) -> int:
        return len(self.lengths)


@dataclass(slots=True)
class Generation:
    """What the stats of one generation batch need: TRL's tensors (on device) and host-side lengths."""

    rewards_per_func: Tensor
    """[N_all, F], every rank's."""
    advantages: Tensor
    """TRL's, this rank's rows: [B] or [B, T] (`row_advantages`)."""
    ids: Tensor
    mask: Tensor
    """[B, T] completion (and tool) tokens, 0/1 or bool."""
    lengths: list[int]
    truncated: list[bool]
    sampling: Tensor | None
    """[B, T] the sampler's log-probs (vLLM), with TRL's log-probs (`old`) beside them."""
    old: Tensor | None
    is_ratio: Tensor | None
    """TRL's corrected importance-sampling ratio: [B, T], or [B, 1] in sequence modes."""

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


def local_rewards(settings: TrlSettings, batch: SampleBatch) -> Tensor:
    """[B, F]: this rank's rows of the batch's gathered rewards (TRL gathers every rank's)."""
    rewards, b = batch.captured.rewards_per_func, batch.size
    return rewards if settings.world == 1 else rewards[settings.rank * b : (settings.rank + 1) * b]


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


def generation_stats(settings: TrlSettings, gens: Sequence[Generation]) -> signals.Stats:
    """Reward, advantage, length, diversity, mismatch and rollout-IS stats of generation batches of
    one kind, as one batch (one pass of torch ops for all of them)."""
    rewards_per_func = cat_rows([g.rewards_per_func for g in gens], math.nan)
    totals = weighted_totals(settings.reward_weights, rewards_per_func)  # once for every batch of the step
    stats = _reward_family(settings, rewards_per_func, totals)
    ids, mask = cat_rows([g.ids for g in gens], 0), cat_rows([g.mask for g in gens], 0)
    # the rows' lengths and truncation flags, known on the host: one copy for both
    host = [[n for g in gens for n in g.lengths], [t for g in gens for t in g.truncated]]
    lengths, truncated = signals.to_device(host, ids.device, torch.int64)
    width = ids.shape[1]
    length_mask = torch.arange(width, device=ids.device).unsqueeze(0) < lengths[:, None]
    # the n-gram payloads are gathered across ranks, which needs one size on every rank: the generation limit
    max_len = max(settings.max_completion_length, width) if settings.world > 1 else None
    stats.update(  # in place: each `|` would copy every part so far
        signals.advantage_stats(cat_rows([row_advantages(g.advantages) for g in gens], 0.0)),
        signals.length_stats(length_mask, truncated.bool()),
        signals.diversity_stats(ids, length_mask & mask.bool(), width=max_len), *_sampling_stats(settings, gens, mask))
    return stats


def _reward_family(settings: TrlSettings, rewards_per_func: Tensor, totals: Tensor) -> signals.Stats:
    """Reward stats over whole prompt groups, each counted on exactly one rank.

    A rank's rows need not hold whole groups (8 completions per GPU with num_generations=16),
    but TRL gathers every rank's rewards for its advantages: rank r takes groups r, r + world,
    ... of that gathered batch, so group std and zero-std fractions are exact after the one
    reduction. A rank left without a group adds one group of NaN rewards (rows no function
    scored count nowhere) and takes its rows back out of the completions counter.
    """
    group, world, names = settings.num_generations, settings.world, settings.reward_names
    if world == 1:  # every group is this rank's
        return signals.reward_stats(totals, group, {n: rewards_per_func[:, i] for i, n in enumerate(names)})
    rows = torch.arange(totals.shape[0], device=totals.device).view(-1, group)
    owned = rows[settings.rank :: world].reshape(-1)
    padded = owned.numel() == 0
    if padded:
        totals, rewards_per_func = totals.new_full((group,), math.nan), rewards_per_func.new_full((group, len(names)), math.nan)
        owned = torch.arange(group, device=totals.device)
    stats = signals.reward_stats(totals[owned], group, {n: rewards_per_func[owned, i] for i, n in enumerate(names)})
    if padded:
        stats.add_sum("samples", -float(group))
    return stats


def _sampling_stats(settings: TrlSettings, gens: Sequence[Generation], mask: Tensor) -> list[signals.Stats]:
    """Mismatch and rollout-IS sets whenever TRL holds the sampler's log-probs; TRL's corrected IS ratio."""
    found = []
    first = gens[0]
    if first.sampling is not None and first.old is not None:
        train = cat_rows([g.old for g in gens], 0.0)
        sampling = cat_rows([g.sampling for g in gens], 0.0)
        sampling = torch.where(torch.isnan(sampling), train, sampling)  # vLLM's unscored tokens: no mismatch, as TRL
        _, _, is_stats = signals.rollout_correction(train, sampling, mask, level=settings.is_level,
                                                    mode=settings.is_mode, threshold=settings.is_threshold,
                                                    with_mismatch=True)
        found.append(is_stats)
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


# Each sample row's reward, advantage and per-function rewards travel as diagnostics columns (`_diagnostics`)
REWARD_COLUMN, ADVANTAGE_COLUMN, FN_COLUMN = "reward", "advantage", "rewards/"


def sample_rows(batch: SampleBatch, names: Sequence[str], group: int,
                diagnostics: Iterator[dict[str, float]] = iter(())) -> list[dict[str, Any]]:
    """The rows of one generation batch; each takes the next of `diagnostics` (its generation's per-sample
    numbers, already on the host: `ReducedStats.column_rows`), its rewards and advantage among them, and its
    loss pass's numbers (`SampleBatch.loss_numbers`), under its own columns. No device read: the numbers came
    in the logged steps' one copy each."""
    cap, rows = batch.captured, []
    for i in range(batch.size):
        numbers = next(diagnostics, {})
        numbers.update(batch.loss_numbers.get(i, ()))
        rewards = {n: numbers.pop(FN_COLUMN + n, math.nan) for n in names}  # NaN: the function scored no value
        reward, advantage = numbers.pop(REWARD_COLUMN, math.nan), numbers.pop(ADVANTAGE_COLUMN, math.nan)
        rows.append({**numbers,
            "prompt": chat_text(cap.prompts[i]), "completion": chat_text(cap.completions[i]),
            "reward": reward, "rewards": rewards, "advantage": advantage,
            "completion_length": batch.lengths[i], "terminated": not batch.truncated[i],
            "group": (batch.first_index + i) // group, "policy_version": batch.policy_version,
        })
    return rows
