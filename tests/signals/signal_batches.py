"""One random training-step batch and every stat family on it (shared by tests and the 2-rank worker)."""

import torch

from otel_grpo.signals import (
    Stats,
    diversity_stats,
    length_stats,
    mismatch_stats,
    policy_stats,
    reward_stats,
    rollout_correction,
    sample_diagnostics,
)


def everything(B: int, T: int, seed: int = 0, mask: torch.Tensor | None = None, rows=slice(None),
               device: str = "cpu") -> Stats:
    """Every stat family on rows `rows` of one random batch (the shape a training step produces), drawn on
    the CPU and computed on `device`."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    if mask is None:
        mask = torch.arange(T) < lengths.unsqueeze(-1)
    lp = -torch.rand(B, T, generator=g)
    old = lp + 0.1 * torch.randn(B, T, generator=g)
    rewards = torch.rand(B, generator=g)
    truncated = torch.rand(B, generator=g) < 0.3
    ids = torch.randint(0, 50, (B, T), generator=g)
    m, lp, old, rw, truncated, ids = (t[rows].to(device) for t in (mask, lp, old, rewards, truncated, ids))
    group = 1 if len(rw) % 2 else 2
    stats = reward_stats(rw, group, {"acc": rw.round()}, advantages=rw - 0.5)
    stats |= length_stats(m, truncated)
    stats |= policy_stats(lp, old, rw - 0.5, m, 0.2, 0.28, ref_logprobs=old, entropy=-lp)
    stats |= rollout_correction(lp, old, m, level="token", mode="both", veto_threshold=(1e-3, 1e3)).stats
    # a second call at another level, thresholds and mode: each call keeps its own (a micro-batch of another setup)
    stats |= rollout_correction(lp, old, m, level="geometric", mode="mask", threshold=(0.95, 1.05)).stats
    stats |= mismatch_stats(lp, old, m)
    stats |= sample_diagnostics(m, logprobs=lp, rollout_logprobs=old, ref_logprobs=old, entropy=-lp, truncated=truncated)
    return stats | diversity_stats(ids, m, group_size=group)
