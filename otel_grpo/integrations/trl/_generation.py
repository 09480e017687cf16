"""One generation batch of a GRPOTrainer -> its sample rows and what its stats need (still on device).

    stats = generation_stats(settings, gens)            # device: one per-row table, diversity, the sampler's sets
    ...                                                 # the logged step's one gather and host copy carry it
    values, invalid, samples = generation_values(settings, rows, sizes)  # host: every reward/length stat
    attach_generation(rows, segments)                   # host: each sample row's rewards and advantage

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
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor

from ... import signals
from ...signals._host import finish_vector, group_spread
from ...signals._lengths import LENGTH_SUMMARIES, TERMINATED_SUMMARIES
from ...signals._rewards import (ADVANTAGE_SUMMARIES, REWARD_GROUPS, REWARD_QUANTILES, REWARD_SUMMARIES,
                                 fn_quantiles, fn_summaries)
from ._chat import chat_text
from ._rows import cat_rows, held_bytes
from ._sampler import sampler_stats
from ._settings import TrlSettings

_F64 = torch.float64
GENERATION_TABLE = "trl_generation"
"""The table's name in `Stats.add_table` / `ReducedStats.tables`."""
# The table's columns, per row: its total reward as TRL weights it (NaN: no function scored it), its
# advantage, length and truncation (1.0: it hit the length limit), then each reward function's reward
# (NaN where the function scored none): `generation_columns(settings)`
ROW_COLUMNS = ("reward", "advantage", "length", "truncated")
# Each sample row's reward, advantage and per-function rewards come from its table row (`attach_generation`)
REWARD_COLUMN, ADVANTAGE_COLUMN, FN_COLUMN = "reward", "advantage", "rewards/"


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
    """A generation batch's rows, kept until every row has been through the loss once: host columns here, their
    numbers (`numbers`) as the logged steps' copies bring them."""

    captured: Captured
    advantages: Tensor
    """TRL's advantages of this rank's rows: [B], or [B, T] (per token: each row's first is its own)."""
    lengths: list[int]
    truncated: list[bool]
    first_index: int
    """Global index of this rank's first row (groups are global)."""
    policy_version: int
    numbers: dict[int, dict[str, float]] = field(default_factory=dict)
    """Row position -> its numbers, put here on the host when the logged step that reduced them comes back: its
    generation's (`attach_generation`: rewards, advantage, truncation) and its first pass through the loss's
    (`_micro_batch.row_numbers`)."""
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


def generation_columns(settings: TrlSettings) -> tuple[str, ...]:
    """The generation table's columns: `ROW_COLUMNS`, then each reward function's."""
    return ROW_COLUMNS + tuple(FN_COLUMN + name for name in settings.reward_names)


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


def generation_values(settings: TrlSettings, table: Sequence[float],
                      sizes: Sequence[int]) -> tuple[dict[str, float], set[str], dict[str, list[float]]]:
    """Every reward, advantage and length stat of the rows of every rank (`generation_stats`' table, flat from
    the host copy, rank by rank; `sizes`: the rows of each generation batch in a rank's part, the same on every
    rank): (values, keys with no valid element, per-sample vectors for the histograms). The keys and
    arithmetic of `signals.reward_stats`, `advantage_stats` and `length_stats` on the batches taken together,
    finished as `reduce_stats` finishes per-sample vectors."""
    names = generation_columns(settings)
    width = len(names)
    col = {name: table[j::width] for j, name in enumerate(names)}
    out: dict[str, float] = {}
    invalid: set[str] = set()
    samples: dict[str, list[float]] = {}

    def vector(key: str | None, values: Sequence[float], quantiles: dict, summaries: dict) -> None:
        """Finish `values`' quantiles and summaries; `key`: its histogram's per-sample signal (None: none)."""
        kept = [x for x in values if x == x]  # x == x: not NaN (a row without that number)
        if key is not None:
            samples[key] = kept
        for name, value, ok in finish_vector(kept, quantiles, summaries):
            if ok:
                out[name] = value
            else:
                invalid.add(name)

    vector("sample_reward", col["reward"], REWARD_QUANTILES, REWARD_SUMMARIES)
    for name in settings.reward_names:
        vector(f"sample_reward_fn/{name}", col[FN_COLUMN + name], fn_quantiles(name), fn_summaries(name))
    vector("sample_advantage", col["advantage"], {}, ADVANTAGE_SUMMARIES)
    lengths, truncated = col["length"], col["truncated"]
    vector("sample_completion_length", lengths, {}, LENGTH_SUMMARIES)
    vector(None, [n for n, t in zip(lengths, truncated) if not t], {}, TERMINATED_SUMMARIES)
    rows = len(lengths)
    out["samples"] = float(rows)
    if rows:
        out["completions_clipped_ratio"] = math.fsum(truncated) / rows
    else:
        invalid.add("completions_clipped_ratio")
    _group_spread(settings, col["reward"], sizes, out, invalid)
    return out, invalid, samples


def _group_spread(settings: TrlSettings, totals: Sequence[float], sizes: Sequence[int], out: dict[str, float],
                  invalid: set[str]) -> None:
    """`reward_group_std` and `frac_reward_zero_std` as `signals.reward_stats` finishes them, over groups of
    `num_generations` consecutive rows of one generation batch in TRL's order, which is rank by rank: the table
    holds each rank's rows of every batch in turn, so a batch's rows are gathered from every rank's part."""
    n = sum(sizes)
    world = len(totals) // n if n else 0
    ordered, at = [], 0
    for size in sizes:
        ordered += [x for r in range(world) for x in totals[r * n + at : r * n + at + size]]
        at += size
    spreads = group_spread(ordered, settings.num_generations)
    for key, spread in REWARD_GROUPS.items():
        value, ok = spreads[spread]
        if ok:
            out[key] = value
        else:
            invalid.add(key)


def attach_generation(settings: TrlSettings, table: Sequence[float], segments: Sequence[tuple[int, Any]]) -> None:
    """Give each row of this rank's part of the table (flat) its numbers, in its sample batch (`segments`: the
    (row count, sample batch or None) of each generation batch behind the rows, in the same order): its
    rewards, advantage and truncation, a number it lacks (NaN) left out."""
    names = generation_columns(settings)
    width, at = len(names), 0
    keep = [(j, "length_clipped" if name == "truncated" else name) for j, name in enumerate(names) if name != "length"]
    for count, batch in segments:
        if batch is not None:
            for i in range(count):
                row = table[(at + i) * width : (at + i + 1) * width]
                batch.numbers.setdefault(i, {}).update({name: row[j] for j, name in keep if row[j] == row[j]})
        at += count


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


def sample_rows(batch: SampleBatch, names: Sequence[str], group: int) -> list[dict[str, Any]]:
    """The rows of one generation batch, each with its numbers (`SampleBatch.numbers`: its generation's rewards,
    advantage and truncation, its first loss pass's diagnostics) under its own columns. No device read: the
    numbers came in the logged steps' one copy each."""
    cap, rows = batch.captured, []
    for i in range(batch.size):
        numbers = dict(batch.numbers.get(i, ()))
        rewards = {n: numbers.pop(FN_COLUMN + n, math.nan) for n in names}  # NaN: the function scored no value
        reward, advantage = numbers.pop(REWARD_COLUMN, math.nan), numbers.pop(ADVANTAGE_COLUMN, math.nan)
        rows.append({**numbers,
            "prompt": chat_text(cap.prompts[i]), "completion": chat_text(cap.completions[i]),
            "reward": reward, "rewards": rewards, "advantage": advantage,
            "completion_length": batch.lengths[i], "terminated": not batch.truncated[i],
            "group": (batch.first_index + i) // group, "policy_version": batch.policy_version,
        })
    return rows
