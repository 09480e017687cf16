"""Policy-update signals: PPO/GRPO clip ratios, policy ratio, approximate KL, KL to the reference, entropy."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import INF, count, describe, masked_max, total
from ._partial import Stats


@torch.no_grad()
def policy_stats(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    epsilon_low: float,
    epsilon_high: float,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
) -> Stats:
    """Clip, ratio and KL stats of one (micro-)batch of the policy update.

    Args:
        logprobs: [B, T] float, log pi_theta of the sampled tokens.
        old_logprobs: [B, T] float, log pi_old (the policy that generated them).
        advantages: [B] or [B, T] float.
        mask: [B, T] bool or 0/1, completion tokens.
        epsilon_low, epsilon_high: the clip range [1 - eps_low, 1 + eps_high].
        ref_logprobs: [B, T] float, log pi_ref; adds the KL-to-reference stats.
        entropy: [B, T] float, per-token entropy of pi_theta; adds `entropy`.

    As TRL: a token is low-clipped when ratio < 1 - eps_low and its advantage
    is negative, high-clipped when ratio > 1 + eps_high and the advantage is
    positive; region = either. Means are over tokens; `clip_ratio_low_min` /
    `clip_ratio_high_max` are the min / max over sequences of the per-sequence
    fraction (sequences without tokens are skipped). `kl` is the k3 estimator
    exp(r) - r - 1 with r = log pi_ref - log pi_theta, `kl_k1` is
    log pi_theta - log pi_ref, `kl_seq_mean` the mean over sequences of the
    summed k3 KL, `approx_kl` the mean of 0.5 * (log pi_theta - log pi_old)^2.
    """
    stats = Stats()
    logprobs = v.floating(logprobs, "logprobs", dim=2)
    shape = tuple(logprobs.shape)
    old_logprobs = v.floating(old_logprobs, "old_logprobs", shape=shape)
    m = v.binary(mask, "mask", stats, shape=shape)
    adv = v.floating(advantages, "advantages")
    if tuple(adv.shape) == shape[:1]:
        adv = adv.unsqueeze(-1)
    elif tuple(adv.shape) != shape:
        raise ValueError(f"advantages has shape {tuple(adv.shape)}, expected {shape[:1]} or {shape}")
    eps_low = v.nonnegative(epsilon_low, "epsilon_low")
    eps_high = v.nonnegative(epsilon_high, "epsilon_high")

    pad = ~m
    n = count(m)
    log_ratio = (logprobs - old_logprobs).masked_fill_(pad, 0.0)
    ratio = log_ratio.exp()
    low = (ratio < 1.0 - eps_low) & (adv < 0) & m
    high = (ratio > 1.0 + eps_high) & (adv > 0) & m
    stats.add_mean("clip_ratio_low_mean", count(low), n)
    stats.add_mean("clip_ratio_high_mean", count(high), n)
    stats.add_mean("clip_ratio_region_mean", count(low | high), n)
    _per_sequence_clip(stats, low, high, m)
    describe(stats, ratio, m, mean="policy_ratio_mean", min="policy_ratio_min", max="policy_ratio_max")
    stats.add_mean("approx_kl", 0.5 * total(log_ratio.square()), n)

    if ref_logprobs is not None:
        ref = v.floating(ref_logprobs, "ref_logprobs", shape=shape)
        _reference_kl(stats, (ref - logprobs).masked_fill_(pad, 0.0), pad, n)
    if entropy is not None:
        ent = v.floating(entropy, "entropy", shape=shape)
        stats.add_mean("entropy", total(torch.where(m, ent, 0.0)), n)
    return stats


def _per_sequence_clip(stats: Stats, low: Tensor, high: Tensor, m: Tensor) -> None:
    """Min / max over sequences with tokens of the per-sequence clip fractions."""
    per_row = m.sum(-1)
    rows = per_row > 0
    denom = per_row.clamp(min=1)
    low_frac = low.sum(-1) / denom
    high_frac = high.sum(-1) / denom
    n_rows = count(rows)
    stats.add_min("clip_ratio_low_min", torch.where(rows, low_frac, INF).min(), n_rows)
    stats.add_max("clip_ratio_high_max", torch.where(rows, high_frac, -INF).max(), n_rows)


def _reference_kl(stats: Stats, r: Tensor, pad: Tensor, n: Tensor) -> None:
    """k3 / k1 KL to the reference from r = log pi_ref - log pi_theta ([B, T], 0 on padding)."""
    k3 = r.exp().sub_(r).sub_(1.0)  # exactly 0 where r == 0, so padding adds nothing
    stats.add_mean("kl", total(k3), n)
    stats.add_mean("kl_k1", -total(r), n)
    stats.add_max("kl_max", masked_max(k3, pad), n)
    rows = ~pad.all(-1)
    stats.add_mean("kl_seq_mean", torch.where(rows, k3.sum(-1), 0.0).sum(dtype=torch.float64), count(rows))
