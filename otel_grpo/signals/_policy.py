"""Policy-update signals: PPO/GRPO clip ratios, policy ratio, approximate KL, KL to the reference, entropy, loss parts."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import INF, SAFETY_BOUND, count, describe, masked_max, total
from ._partial import Stats

# Completion-length buckets of `kl_by_length` (upper bounds, tokens); the last bucket is open.
LENGTH_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096)


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
    clip_ratio_c: float = 3.0,
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
        clip_ratio_c: dual-clip bound (verl's `clip_ratio_c`, default 3.0) of
            `dual_clip_fraction`: tokens with negative advantage and ratio > c.

    As TRL: a token is low-clipped when ratio < 1 - eps_low and its advantage
    is negative, high-clipped when ratio > 1 + eps_high and the advantage is
    positive; region = either. Means are over tokens; `clip_ratio_low_min` /
    `clip_ratio_high_max` are the min / max over sequences of the per-sequence
    fraction (sequences without tokens are skipped). `kl` is the k3 estimator
    exp(r) - r - 1 with r = log pi_ref - log pi_theta, `kl_k1` is
    log pi_theta - log pi_ref, `kl_seq_mean` the mean over sequences of the
    summed k3 KL, `approx_kl` the mean of 0.5 * (log pi_theta - log pi_old)^2,
    `ppo_kl` verl's k1 mean of log pi_old - log pi_theta (clamped to +-20),
    `advantage_token_mean` the token-weighted advantage (verl's), `ref_logp_mean`
    the mean of log pi_ref, `kl_k1_seq_mean` the mean over sequences of the summed
    k1, `kl_by_length/<bucket>` the k3 mean over the tokens of completions whose
    length falls in the bucket and `kl_by_length_tokens/<bucket>` their tokens.
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
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (verl's dual-clip bound), got {clip_ratio_c!r}")

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
    stats.add_mean("ppo_kl", -total(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)), n)  # padding is 0
    stats.add_mean("dual_clip_fraction", count((ratio > clip_ratio_c) & (adv < 0) & m), n)
    stats.add_mean("advantage_token_mean", total(torch.where(m, adv, 0.0)), n)

    if ref_logprobs is not None:
        ref = v.floating(ref_logprobs, "ref_logprobs", shape=shape)
        _reference_kl(stats, (ref - logprobs).masked_fill_(pad, 0.0), pad, n)
        stats.add_mean("ref_logp_mean", total(torch.where(m, ref, 0.0)), n)
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
    k3_row = k3.sum(-1)
    stats.add_mean("kl_seq_mean", torch.where(rows, k3_row, 0.0).sum(dtype=torch.float64), count(rows))
    stats.add_mean("kl_k1_seq_mean", -r.sum(-1).sum(dtype=torch.float64), count(rows))  # empty rows add 0
    _kl_by_length(stats, k3_row, (~pad).sum(-1))


def _kl_by_length(stats: Stats, k3_row: Tensor, lengths: Tensor) -> None:
    """k3 per token over the completions of each length bucket (every bucket, so ranks share keys)."""
    edges = torch.tensor(LENGTH_BUCKETS, device=lengths.device)
    one_hot = torch.nn.functional.one_hot(torch.bucketize(lengths, edges), len(LENGTH_BUCKETS) + 1)  # [B, K]
    # one product for every bucket's KL and token sums: [K, B] @ [B, 2] (few tiny ops per call)
    sums = one_hot.T.to(torch.float64) @ torch.stack([k3_row.to(torch.float64), lengths.to(torch.float64)], -1)
    for label, (kl, tokens) in zip(bucket_labels(), sums.unbind()):
        stats.add_mean(f"kl_by_length/{label}", kl, tokens)
        stats.add_sum(f"kl_by_length_tokens/{label}", tokens)


def bucket_labels() -> list[str]:
    """Label values of `kl_by_length`: `le_64`, ..., `le_4096`, `gt_4096`."""
    return [f"le_{b}" for b in LENGTH_BUCKETS] + [f"gt_{LENGTH_BUCKETS[-1]}"]


@torch.no_grad()
def loss_stats(
    total_loss: Tensor | float,
    policy: Tensor | float | None = None,
    kl: Tensor | float | None = None,
    entropy: Tensor | float | None = None,
) -> Stats:
    """The loss of one micro-batch and its parts, averaged over micro-batches and ranks.

    Args:
        total_loss: the loss backpropagated (0-d).
        policy: its policy-gradient term (verl's `actor/pg_loss`).
        kl: its KL term as added to the loss, beta * KL (MaxEnt's `loss/weighted_kl`).
        entropy: its entropy term as added to the loss, e.g. -coef * H (0 without a bonus).

    Pass the values before any division for gradient accumulation; each call
    counts once in the mean (`loss`, `loss_policy`, `loss_kl`, `loss_entropy`).
    """
    stats = Stats()
    parts = (("loss", total_loss), ("loss_policy", policy), ("loss_kl", kl), ("loss_entropy", entropy))
    device = next((x.device for _, x in parts if isinstance(x, Tensor)), None)  # floats join the tensors' device
    for key, value in parts:
        if value is None:
            continue
        if isinstance(value, Tensor):
            value = v.floating(value, key, shape=()).detach().to(torch.float64)
        else:
            value = torch.tensor(float(value), dtype=torch.float64, device=device)
        stats.add_mean(key, value, 1.0)
    return stats
