"""Rollout importance-sampling correction with the semantics of verl's mismatch helper (seed 004).

Weights are pi_train / pi_rollout at token, sequence or geometric-mean level,
safety-bounded at exp(+-20); "truncate" clamps them into the thresholds, "mask"
rejects tokens (or sequences) outside the mask thresholds through the returned
mask, "both" does both; the veto rejects whole sequences holding a token whose
ratio lies outside the veto thresholds. Metrics follow the seed: sequence and
geometric max / min / fractions from the unclamped log ratios, std and ESS from
weights clamped to the thresholds, and the seed's denominators, including the
ones over all rows of the batch. Only the cross-rank combination differs: ours
is exact (token-weighted), where the seed averages per-rank values.

Padding is treated as the seed sees it (its padded tensors come from packed
sequences padded with 0): log ratios are 0 there, whatever the inputs hold.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from ._masked import INF, count, masked_max, masked_min
from ._partial import Stats

SAFETY_BOUND = 20.0  # exp(20) ~ 4.9e8: no overflow in float32
LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask", "both")
_EPS = 1e-8  # the seed's masked_mean denominator epsilon, kept where it changes a per-row value
_F64 = torch.float64


class RolloutCorrection(NamedTuple):
    """What `rollout_correction` returns (unpacks as `weights, mask, stats`)."""

    weights: Tensor
    """[B, T] IS weights, 0 on padding (truncated into the thresholds in truncate/both mode)."""
    mask: Tensor
    """[B, T] the input mask with mask-mode rejections and vetoed sequences removed (input dtype)."""
    stats: Stats
    """`rollout_is_*` partial aggregates for `reduce_stats`."""


@torch.no_grad()
def rollout_correction(
    train_logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    *,
    level: str = "token",
    mode: str = "truncate",
    threshold: tuple[float, float] = (0.5, 2.0),
    mask_threshold: tuple[float, float] | None = None,
    veto_threshold: tuple[float, float] | None = None,
) -> RolloutCorrection:
    """IS weights, rejection mask and `rollout_is_*` stats for rollout/training mismatch.

    Args:
        train_logprobs: [B, T] float, log pi_train of the sampled tokens.
        rollout_logprobs: [B, T] float, log pi_rollout (the inference engine's).
        mask: [B, T] bool or 0/1, completion tokens.
        level: "token" (rho_t), "sequence" (prod rho_t) or "geometric" ((prod rho_t)^(1/T)).
        mode: "truncate", "mask" or "both".
        threshold: (lower, upper) truncation thresholds. Note the order: verl and
            xtuner write (upper, lower).
        mask_threshold: (lower, upper) for mask mode; defaults to `threshold`.
        veto_threshold: (lower, upper); a sequence with any token ratio outside
            it is rejected in every mode. None disables the veto.
    """
    stats = Stats()
    train = v.floating(train_logprobs, "train_logprobs", dim=2)
    shape = tuple(train.shape)
    rollout = v.floating(rollout_logprobs, "rollout_logprobs", shape=shape)
    m = v.binary(mask, "mask", stats, shape=shape)
    v.choice(level, "level", LEVELS)
    v.choice(mode, "mode", MODES)
    bounds = v.bounds(threshold, "threshold")
    mask_bounds = bounds if mask_threshold is None else v.bounds(mask_threshold, "mask_threshold")
    veto = None if veto_threshold is None else v.bounds(veto_threshold, "veto_threshold")

    dtype = v.compute_dtype(train, rollout)
    pad = ~m
    log_ratio = (train.to(dtype) - rollout.to(dtype)).masked_fill_(pad, 0.0)
    n_row = m.sum(-1, dtype=dtype)  # [B]
    has_rows = n_row > 0
    # Seed denominators "over all rows" count a rank only if it has any valid token,
    # as the seed's merge drops ranks whose batch has none.
    all_rows = count(has_rows.any()) * len(n_row)
    n = count(m)
    vetoed = _veto(stats, log_ratio, m, has_rows, n, veto)
    if level == "token":
        weights, keep = _token_level(stats, log_ratio, m, pad, n, n_row, has_rows, all_rows, bounds, mask_bounds, mode)
    else:
        weights, keep = _row_level(stats, log_ratio, m, n, n_row, has_rows, all_rows, bounds, mask_bounds, mode, level)
    out_mask = m if keep is None else m & keep
    if vetoed is not None:
        out_mask = out_mask & ~vetoed.unsqueeze(-1)
    weights = weights.masked_fill_(pad, 0.0)
    corrected = out_mask if mask.dtype == torch.bool else out_mask.to(mask.dtype)
    return RolloutCorrection(weights, corrected, stats)


def _veto(stats: Stats, log_ratio: Tensor, m: Tensor, has_rows: Tensor, n: Tensor, veto) -> Tensor | None:
    """Veto stats; [B] True for sequences with a token ratio outside `veto` (None: no veto)."""
    if veto is None:  # the seed reports zeros without a veto
        stats.add_mean("rollout_is_veto_fraction", 0.0 * n, count(has_rows))
        stats.add_mean("rollout_is_catastrophic_token_fraction", 0.0 * n, n)
        return None
    lower, upper = veto
    log_lower = math.log(lower) if lower > 0 else -INF
    bad = ((log_ratio < log_lower) | (log_ratio > math.log(upper))) & m
    vetoed = bad.any(-1)
    stats.add_mean("rollout_is_veto_fraction", count(vetoed), count(has_rows))
    stats.add_mean("rollout_is_catastrophic_token_fraction", count(bad), n)
    return vetoed


def _token_level(stats, log_ratio, m, pad, n, n_row, has_rows, all_rows, bounds, mask_bounds, mode):
    """rho_t = exp(clamp(log ratio, +-20)); metrics straight from the weights."""
    lower, upper = bounds
    w = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp_()  # 1 on padding
    w_masked = w.masked_fill(pad, 0.0)
    stats.add_mean("rollout_is_mean", w_masked.sum(dtype=_F64), n)
    stats.add_mean("rollout_is_ratio_fraction_high", count((w > upper) & m), n)
    stats.add_mean("rollout_is_ratio_fraction_low", count((w < lower) & m), n)
    stats.add_max("rollout_is_max", masked_max(w, pad), n)
    stats.add_min("rollout_is_min", masked_min(w, pad), n)
    clamped = w.clamp(lower, upper)
    clamped_masked = clamped.masked_fill(pad, 0.0)
    _spread(stats, clamped_masked.sum(dtype=_F64), (clamped_masked * clamped).sum(dtype=_F64), n)
    _per_sequence(stats, w_masked.sum(-1) / (n_row + _EPS), has_rows, bounds)

    keep = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        keep = (w >= mlow) & (w <= mup)
        rejected = m & ~keep
        stats.add_mean("rollout_is_masked_fraction", count(rejected), n)
        # the seed: any token of the row rejected, averaged over all rows
        stats.add_mean("rollout_is_seq_masked_fraction", count(rejected.any(-1)), all_rows)
    weights = clamped if mode in ("truncate", "both") else w
    return weights, keep


def _row_level(stats, log_ratio, m, n, n_row, has_rows, all_rows, bounds, mask_bounds, mode, level):
    """One weight per sequence from the summed (sequence) or averaged (geometric) log ratio."""
    lower, upper = bounds
    log_w = log_ratio.sum(-1)  # [B]; 0 for rows without tokens
    if level == "geometric":
        log_w = log_w / (n_row + _EPS)
    w = log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()  # [B]
    # max / min / fractions from the unclamped log ratios, over all rows (the seed's choice)
    stats.add_max("rollout_is_max", log_w.max().clamp(max=SAFETY_BOUND).exp(), all_rows)
    stats.add_min("rollout_is_min", log_w.min().exp(), all_rows)
    stats.add_mean("rollout_is_mean", (w * n_row).sum(dtype=_F64), n)
    high, low = log_w > math.log(upper), log_w < (math.log(lower) if lower > 0 else -INF)
    if level == "sequence":
        stats.add_mean("rollout_is_ratio_fraction_high", count(high), all_rows)
        stats.add_mean("rollout_is_ratio_fraction_low", count(low), all_rows)
    else:  # geometric: token-weighted over valid tokens
        stats.add_mean("rollout_is_ratio_fraction_high", (high * n_row).sum(dtype=_F64), n)
        stats.add_mean("rollout_is_ratio_fraction_low", (low * n_row).sum(dtype=_F64), n)
    clamped = w.clamp(lower, upper)
    _spread(stats, (clamped * n_row).sum(dtype=_F64), (clamped * clamped * n_row).sum(dtype=_F64), n)
    _per_sequence(stats, w * n_row / (n_row + _EPS), has_rows, bounds)

    keep = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        keep_row = (w >= mlow) & (w <= mup)
        stats.add_mean("rollout_is_masked_fraction", (~keep_row * n_row).sum(dtype=_F64), n)
        stats.add_mean("rollout_is_seq_masked_fraction", count(~keep_row), all_rows)
        keep = keep_row.unsqueeze(-1)
    weights = clamped if mode in ("truncate", "both") else w
    return weights.unsqueeze(-1).expand_as(log_ratio).clone(), keep


def _spread(stats: Stats, total: Tensor, sumsq: Tensor, n: Tensor) -> None:
    """Population std and ESS of the threshold-clamped weights (from the same sums)."""
    stats.add_std("rollout_is_std", total, sumsq, n, unbiased=False)
    stats.add_ess("rollout_is_eff_sample_size", total, sumsq, n)


def _per_sequence(stats: Stats, seq_w: Tensor, rows: Tensor, bounds: tuple[float, float]) -> None:
    """Stats over sequences with tokens of the per-sequence mean weight [B] (unbiased std)."""
    lower, upper = bounds
    k = count(rows)
    x = torch.where(rows, seq_w, 0.0).to(_F64)
    stats.add_mean("rollout_is_seq_mean", x.sum(), k)
    stats.add_std("rollout_is_seq_std", x.sum(), (x * x).sum(), k, unbiased=True)
    stats.add_max("rollout_is_seq_max", torch.where(rows, seq_w, -INF).max(), k)
    stats.add_min("rollout_is_seq_min", torch.where(rows, seq_w, INF).min(), k)
    stats.add_max("rollout_is_seq_max_deviation", torch.where(rows, (seq_w - 1.0).abs(), -INF).max(), k)
    stats.add_mean("rollout_is_seq_fraction_high", count((seq_w > upper) & rows), k)
    stats.add_mean("rollout_is_seq_fraction_low", count((seq_w < lower) & rows), k)
