"""One generation batch of a GRPOTrainer -> its sample rows and what its stats need (still on device).

Captured once per `_generate_and_score_completions`, so a batch that TRL reuses for
`num_iterations` passes or splits over `steps_per_generation` steps is counted once;
the stats of every batch a logged step covers are computed together (`generation_stats`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from ... import signals
from ._rows import cat_rows, held_bytes

# TRL's vllm_importance_sampling_mode -> (level, mode) of signals.rollout_correction
_IS_MODES = {
    "token_truncate": ("token", "truncate"), "token_mask": ("token", "mask"),
    "sequence_truncate": ("sequence", "truncate"), "sequence_mask": ("sequence", "mask"),
}


@dataclass(slots=True)
class Captured:
    """What `_calculate_rewards` saw: this rank's prompts and completions, and every rank's rewards."""

    prompts: list[Any]
    completions: list[Any]
    completion_ids: list[list[int]]
    rewards_per_func: Tensor
    """[N_all, F] gathered over ranks (TRL gathers it for group normalization)."""


@dataclass(slots=True)
class SampleBatch:
    """A generation batch's rows, kept on device until the logged step converts them."""

    captured: Captured
    values: Tensor
    """[B, F + 2]: per-function rewards, total weighted reward, advantage (this rank's rows)."""
    lengths: list[int]
    truncated: list[bool]
    first_index: int
    """Global index of this rank's first row (groups are global)."""
    policy_version: int


@dataclass(slots=True)
class Generation:
    """What the stats of one generation batch need: TRL's tensors (on device) and host-side lengths."""

    rewards_per_func: Tensor
    """[N_all, F], every rank's."""
    totals: Tensor
    """[N_all], the total reward of each row as TRL weights it."""
    advantages: Tensor
    """[B], this rank's rows."""
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
        return held_bytes(self.rewards_per_func, self.totals, self.advantages, self.ids, self.mask, self.sampling,
                          self.old, self.is_ratio)


def fn_name(name: str) -> str:
    """A reward function's name as a stat-key label (no '/': model rewards are named after their path)."""
    return name.replace("/", "_") or "reward"


def capture_generation(trainer: Any, out: dict, cap: Captured) -> tuple[Generation, SampleBatch]:
    """The batch's tensors for its stats, and its sample rows' values ([B, F + 2], a few tiny device ops)."""
    ids = out["completion_ids"]
    batch = ids.shape[0]
    rank = trainer.accelerator.process_index
    mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
    advantages = out["advantages"].reshape(batch, -1)[:, 0]
    lengths, truncated = _lengths(trainer, cap.completion_ids, out)
    totals = _weighted_totals(trainer, cap.rewards_per_func)  # every rank's: the stats need them too
    rows = slice(rank * batch, (rank + 1) * batch)
    local = cap.rewards_per_func[rows]
    values = torch.cat([local, totals[rows, None], advantages[:, None].to(local.dtype)], dim=1)
    gen = Generation(cap.rewards_per_func, totals, advantages, ids, mask, lengths, truncated,
                     out.get("sampling_per_token_logps"), out.get("old_per_token_logps"),
                     out.get("importance_sampling_ratio"))
    step = int(trainer.state.global_step)
    return gen, SampleBatch(cap, values.detach(), lengths, truncated, rank * batch, step)


def generation_stats(trainer: Any, gens: Sequence[Generation]) -> signals.Stats:
    """Reward, advantage, length, diversity, mismatch and rollout-IS stats of generation batches of
    one kind, as one batch (one pass of torch ops for all of them)."""
    rewards_per_func = cat_rows([g.rewards_per_func for g in gens], math.nan)
    names = [fn_name(n) for n in trainer.reward_func_names]
    stats = _reward_family(trainer, rewards_per_func, cat_rows([g.totals for g in gens], math.nan), names)
    ids, mask = cat_rows([g.ids for g in gens], 0), cat_rows([g.mask for g in gens], 0)
    lengths = [n for g in gens for n in g.lengths]
    truncated = [t for g in gens for t in g.truncated]
    width = ids.shape[1]
    length_mask = torch.arange(width, device=ids.device).unsqueeze(0) < torch.tensor(lengths, device=ids.device)[:, None]
    max_len = max(int(getattr(trainer, "max_completion_length", 0) or 0), width)
    stats.update(  # in place: each `|` would copy every part so far
        signals.advantage_stats(cat_rows([g.advantages for g in gens], 0.0)),
        signals.length_stats(length_mask, torch.tensor(truncated, device=ids.device)),
        signals.diversity_stats(ids, length_mask & mask.bool(), width=max_len), *_sampling_stats(trainer, gens, mask))
    return stats


def _weighted_totals(trainer: Any, rewards_per_func: Tensor) -> Tensor:
    """[N] total reward as TRL weights it; NaN where no function scored the row (TRL's unscorable rows)."""
    total = (rewards_per_func * trainer.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return torch.where(torch.isnan(rewards_per_func).all(dim=1), math.nan, total)


def _reward_family(trainer: Any, rewards_per_func: Tensor, totals: Tensor, names: list[str]) -> signals.Stats:
    """Reward stats over whole prompt groups, each counted on exactly one rank.

    A rank's rows need not hold whole groups (8 completions per GPU with num_generations=16),
    but TRL gathers every rank's rewards for its advantages: rank r takes groups r, r + world,
    ... of that gathered batch, so group std and zero-std fractions are exact after the one
    reduction. A rank left without a group adds one group of NaN rewards (rows no function
    scored count nowhere) and takes its rows back out of the completions counter.
    """
    group, world = trainer.num_generations, trainer.accelerator.num_processes
    if world == 1:  # every group is this rank's
        return signals.reward_stats(totals, group, {n: rewards_per_func[:, i] for i, n in enumerate(names)})
    rows = torch.arange(totals.shape[0], device=totals.device).view(-1, group)
    owned = rows[trainer.accelerator.process_index :: world].reshape(-1)
    padded = owned.numel() == 0
    if padded:
        totals, rewards_per_func = totals.new_full((group,), math.nan), rewards_per_func.new_full((group, len(names)), math.nan)
        owned = torch.arange(group, device=totals.device)
    stats = signals.reward_stats(totals[owned], group, {n: rewards_per_func[owned, i] for i, n in enumerate(names)})
    if padded:
        stats.add_sum("samples", -float(group))
    return stats


def _lengths(trainer: Any, completion_ids: Sequence[Sequence[int]], out: dict) -> tuple[list[int], list[bool]]:
    """TRL's completion lengths and truncation flags, from the host-side id lists TRL scored."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)  # a processor's
    eos_and_pad = {*trainer.eos_token_ids, tokenizer.pad_token_id}
    truncated = [bool(ids) and ids[-1] not in eos_and_pad for ids in completion_ids]
    if "tool_mask" in out:  # TRL counts only model-generated tokens then
        return out["tool_mask"].sum(-1).tolist(), truncated
    return [len(ids) for ids in completion_ids], truncated


def _sampling_stats(trainer: Any, gens: Sequence[Generation], mask: Tensor) -> list[signals.Stats]:
    """Mismatch and rollout-IS sets whenever TRL holds the sampler's log-probs; TRL's corrected IS ratio."""
    found = []
    first = gens[0]
    if first.sampling is not None and first.old is not None:
        train = cat_rows([g.old for g in gens], 0.0)
        sampling = cat_rows([g.sampling for g in gens], 0.0)
        sampling = torch.where(torch.isnan(sampling), train, sampling)  # vLLM's unscored tokens: no mismatch, as TRL
        args = trainer.args
        level, mode = _IS_MODES.get(getattr(args, "vllm_importance_sampling_mode", ""), ("token", "truncate"))
        low = getattr(args, "vllm_importance_sampling_clip_min", None) or 0.0
        high = getattr(args, "vllm_importance_sampling_clip_max", None) or math.inf
        _, _, is_stats = signals.rollout_correction(train, sampling, mask, level=level, mode=mode,
                                                    threshold=(low, high), with_mismatch=True)
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


def render(value: Any) -> str:
    """A prompt or completion as text: chat messages as `role: content` lines, content parts' text joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        lines = []
        for m in value:
            if not isinstance(m, dict):
                lines.append(str(m))
                continue
            content = m.get("content", "")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
            lines.append(f"{m.get('role', '')}: {content}")
        return "\n".join(lines)
    return str(value)


def sample_rows(batch: SampleBatch, names: list[str], group: int) -> list[dict[str, Any]]:
    """The rows of one generation batch (one device-to-host copy of its values)."""
    values = batch.values.tolist()  # host sync: this batch's rewards and advantages, at the logged step
    cap, n = batch.captured, len(names)
    rows = []
    for i, row in enumerate(values):
        rows.append({
            "prompt": render(cap.prompts[i]), "completion": render(cap.completions[i]),
            "reward": row[n], "rewards": dict(zip(names, row[:n])), "advantage": row[n + 1],
            "completion_length": batch.lengths[i], "terminated": not batch.truncated[i],
            "group": (batch.first_index + i) // group, "policy_version": batch.policy_version,
        })
    return rows
