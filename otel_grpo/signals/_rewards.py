"""Reward and advantage signals: means, spreads, quantiles, per-function stats, group health."""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor

from . import _validate as v
from ._partial import Stats
from ._summaries import (ADVANTAGE_SUMMARIES, REWARD_GROUPS, REWARD_QUANTILES, REWARD_SUMMARIES, fn_quantiles,
                         fn_summaries)

@torch.no_grad()
def reward_stats(
    rewards: Tensor,
    group_size: int,
    components: Mapping[str, Tensor] | None = None,
    advantages: Tensor | None = None,
) -> Stats:
    """Reward, per-reward-function and advantage stats of one batch of completions.

    Args:
        rewards: [B] float, total (weighted) reward per completion; NaN marks a
            completion without a reward (excluded, as TRL's nan-aware means do).
        group_size: completions per prompt; B must be a multiple, and this rank's
            batch must hold whole groups (rows g*G .. g*G+G-1 share a prompt).
        components: reward function name -> [B] float, that function's reward
            (NaN where it does not apply). Keys become `reward_fn_mean/<name>`.
        advantages: [B] float, the advantage of each completion.

    Adds `reward`, `reward_std`, `reward_min`, `reward_max`, `reward_p00/p05/p25/p50/
    p75/p95/p100`, `reward_group_std`, `frac_reward_zero_std`, `reward_fn_mean/<fn>`,
    `reward_fn_std/<fn>`, the same quantiles per function (`reward_fn_p25/<fn>`, ...)
    with the per-sample vector `sample_reward_fn/<fn>`, `advantage_mean/std/min/max`, the per-sample vectors
    `sample_reward` and `sample_advantage`, and the counter `samples` (B).
    Standard deviations are unbiased (n - 1), as torch's and TRL's; every one is of the rewards in
    float64, on the host (TRL's per-group std is in the rewards' dtype).
    """
    stats = Stats()
    rewards = v.floating(rewards, "rewards", dim=1)
    (batch,) = rewards.shape
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if batch % group_size:
        raise ValueError(f"group_size {group_size} does not divide the batch size {batch} of rewards")

    parts = {}
    for name, values in (components or {}).items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"components keys must be non-empty names without '/', got {name!r}")
        parts[name] = v.floating(values, f"components[{name!r}]", shape=(batch,))
    # the total and every function's rewards: [1 + F, B] in float64 (the vectors' dtype, one conversion for
    # all); their means, spreads, extremes and quantiles are summaries of the gathered vectors (host)
    rows = (torch.stack([rewards, *parts.values()]) if parts else rewards.unsqueeze(0)).to(torch.float64)
    # the groups' spread too, on the host: each rank's rows are whole groups
    stats.add_samples("sample_reward", rows[0], REWARD_QUANTILES, REWARD_SUMMARIES, REWARD_GROUPS, group_size)
    for i, name in enumerate(parts, start=1):
        stats.add_samples(f"sample_reward_fn/{name}", rows[i], fn_quantiles(name), fn_summaries(name))
    if advantages is not None:
        v.floating(advantages, "advantages", shape=(batch,))
        stats.update(advantage_stats(advantages))
    stats.add_sum("samples", torch.full((), batch, dtype=torch.float64, device=rewards.device))
    return stats


def advantage_stats(advantages: Tensor) -> Stats:
    """`advantage_mean/std/min/max` and the per-sample vector `sample_advantage` of [B] advantages.

    What `reward_stats(..., advantages=...)` adds; on its own where the advantages of a
    rank's rows and the rewards of whole groups are not the same rows (TRL, groups
    straddling ranks).
    """
    return Stats().add_samples("sample_advantage", v.floating(advantages, "advantages", dim=1),
                               summaries=ADVANTAGE_SUMMARIES)
