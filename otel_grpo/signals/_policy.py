"""Policy-update signals: PPO/GRPO clip ratios, policy ratio, approximate KL, KL to the reference, entropy, loss parts."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import _validate as v
from ._host import INF, SAFETY_BOUND
from ._masked import masked_max
from ._partial import Stats, device_scalar
from ._summaries import LENGTH_BUCKETS, bucket_labels

# Completion-length buckets of `kl_by_length` (upper bounds, tokens); the last bucket is open.
_F64 = torch.float64


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
    log_ratio = (logprobs - old_logprobs).masked_fill_(pad, 0.0)
    ratio = log_ratio.exp()  # exactly 1 on padding: inside [1 - eps_low, 1 + eps_high] and below c, so no
    negative = adv < 0  # clip flag below needs the mask
    low = (ratio < 1.0 - eps_low) & negative
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    dual = (ratio > clip_ratio_c) & negative
    # Per-row sums of every token quantity in two reductions: on [B, T] tensors of a micro-batch,
    # each torch op costs more in dispatch than in arithmetic on CPU (benchmarks/README.md, costs).
    counts = torch.stack([low, high, low | high, dual, m]).sum(-1)  # [5, B] int64, exact
    floats = [torch.where(m, ratio, 0.0), log_ratio.square(), log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND),
              torch.where(m, adv, 0.0)]
    if ref_logprobs is not None:
        ref = v.floating(ref_logprobs, "ref_logprobs", shape=shape)
        r = (ref - logprobs).masked_fill_(pad, 0.0)  # r = log pi_ref - log pi_theta, 0 on padding
        k3 = r.exp().sub_(r).sub_(1.0)  # exactly 0 where r == 0, so padding adds nothing
        floats += [k3, r, torch.where(m, ref, 0.0)]
    if entropy is not None:
        ent = v.floating(entropy, "entropy", shape=shape)
        floats.append(torch.where(m, ent, 0.0))
    row_sums = torch.stack(torch.broadcast_tensors(*floats)).sum(-1)  # [K, B] in the inputs' dtype
    per_row = counts[4]
    rows = per_row > 0
    # as `total`: per-row sums in the inputs' dtype, then float64 across rows; the row count
    # rides along, and one product applies the signs and the 1/2 of the means' numerators
    table = torch.cat([counts.to(_F64), row_sums.to(_F64), rows.to(_F64).unsqueeze(0)])
    sums = (table.sum(-1) * _coefficients(ref_logprobs is not None, entropy is not None, table.device)).unbind()
    n, n_rows = sums[4], sums[-1]
    keys = ["clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean", "dual_clip_fraction",
            "policy_ratio_mean", "approx_kl", "ppo_kl", "advantage_token_mean"]
    totals = [*sums[:4], *sums[5:9]]
    counts_of = [n] * 8
    if ref_logprobs is not None:
        kl, k1, ref_sum = sums[9:12]
        keys += ["kl", "kl_k1", "ref_logp_mean", "kl_seq_mean", "kl_k1_seq_mean"]  # rows without tokens sum to 0
        totals += [kl, k1, ref_sum, kl, k1]
        counts_of += [n, n, n, n_rows, n_rows]
    if entropy is not None:
        keys.append("entropy")
        totals.append(sums[-2])
        counts_of.append(n)
    stats._add_means(keys, totals, counts_of)

    fractions = counts[:2] / per_row.clamp(min=1)  # per-sequence low / high clip fractions
    lows = [torch.where(rows, fractions[0], INF).min(), torch.where(m, ratio, INF).min()]
    highs = [torch.where(rows, fractions[1], -INF).max(), torch.where(m, ratio, -INF).max()]
    if ref_logprobs is not None:
        highs.append(masked_max(k3, pad))
    lows, highs = torch.stack(lows).to(_F64).unbind(), torch.stack(highs).to(_F64).unbind()
    stats.add_min("clip_ratio_low_min", lows[0], n_rows)
    stats.add_max("clip_ratio_high_max", highs[0], n_rows)
    stats.add_min("policy_ratio_min", lows[1], n)
    stats.add_max("policy_ratio_max", highs[1], n)
    if ref_logprobs is not None:
        stats.add_max("kl_max", highs[2], n)
        _kl_by_length(stats, row_sums[4], per_row)
    return stats


@functools.lru_cache(maxsize=64)
def _coefficients(reference: bool, entropy: bool, device: torch.device) -> Tensor:
    """Factors of the summed table's rows: 5 counts, ratio, 0.5 * log-ratio^2, -clamped log-ratio,
    advantage, [k3, -r = k1, ref], [entropy], rows with tokens."""
    factors = [1.0] * 5 + [1.0, 0.5, -1.0, 1.0] + ([1.0, -1.0, 1.0] if reference else [])
    factors += ([1.0] if entropy else []) + [1.0]
    return torch.tensor(factors, dtype=_F64, device=device)


def _kl_by_length(stats: Stats, k3_row: Tensor, lengths: Tensor) -> None:
    """k3 per token over the completions of each length bucket (every bucket, so ranks share keys)."""
    edges = _bucket_edges(lengths.device)
    # every bucket's KL and token sums in one scatter: [K + 1, 2]
    rows = torch.stack([k3_row.to(_F64), lengths.to(_F64)], -1)
    sums = rows.new_zeros(len(LENGTH_BUCKETS) + 1, 2).index_add_(0, torch.bucketize(lengths, edges), rows)
    kl, tokens = sums.T.unbind()
    tokens = tokens.unbind()
    stats._add_means(_KL_BY_LENGTH_KEYS, kl.unbind(), tokens)
    for key, n in zip(_KL_TOKENS_KEYS, tokens):
        stats.add_sum(key, n)


@functools.lru_cache(maxsize=16)
def _bucket_edges(device: torch.device) -> Tensor:
    return torch.tensor(LENGTH_BUCKETS, device=device)


_KL_BY_LENGTH_KEYS = tuple(f"kl_by_length/{label}" for label in bucket_labels())
_KL_TOKENS_KEYS = tuple(f"kl_by_length_tokens/{label}" for label in bucket_labels())


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
            value = device_scalar(value, device)
        stats.add_mean(key, value, 1.0)
    return stats
