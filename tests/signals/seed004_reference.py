"""Seed 004's IS-correction and mismatch formulas, re-written step by step for comparison.

This follows verl/xtuner's mismatch helper literally (one metric at a time, the
xtuner `masked_mean` with its +1e-8, the same denominators) on padded tensors whose
padding holds 0, which is what the seed sees after converting packed sequences.
Thresholds here are the seed's `(upper, lower)` order. Used by the tests and the
benchmark; never by the package.
"""

from __future__ import annotations

import torch

SAFETY_BOUND = 20.0


def masked_sum(x, mask, axis=None):
    return (torch.where(mask.bool(), x, 0.0) * mask).sum(axis)


def masked_mean(x, mask, axis=None):
    return masked_sum(x, mask, axis) / (mask.sum(axis) + 1e-8)


def rollout_is(old, rollout, mask, level, mode, threshold, mask_threshold=None, veto_threshold=None):
    """-> (weights, modified_mask, metrics as tensors). `mask` is float 0/1."""
    upper, lower = threshold
    mask_upper, mask_lower = mask_threshold if mask_threshold is not None else threshold
    log_ratio = old - rollout
    log_upper = torch.log(torch.tensor(upper))
    log_lower = torch.log(torch.tensor(lower))
    if level == "token":
        log_for_metrics = log_ratio
        weights = torch.exp(torch.clamp(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
    elif level == "sequence":
        log_for_metrics = masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)
        weights = torch.exp(torch.clamp(log_for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(old)
    else:
        log_for_metrics = masked_mean(log_ratio, mask, axis=-1).unsqueeze(-1)
        weights = torch.exp(torch.clamp(log_for_metrics, -SAFETY_BOUND, SAFETY_BOUND)).expand_as(old)
    if veto_threshold is not None:
        veto_upper, veto_lower = veto_threshold
        catastrophic = (
            (log_ratio < torch.log(torch.tensor(veto_lower))) | (log_ratio > torch.log(torch.tensor(veto_upper)))
        ) & mask.bool()
        has_catastrophic = catastrophic.any(dim=-1, keepdim=True)
        veto_mask = (~has_catastrophic).float()
    else:
        catastrophic = torch.zeros_like(mask, dtype=torch.bool)
        has_catastrophic = torch.zeros((old.size(0), 1), dtype=torch.bool)
        veto_mask = torch.ones((old.size(0), 1))
    metrics = _is_metrics(weights, log_for_metrics, mask, level, upper, lower, log_upper, log_lower,
                          has_catastrophic, catastrophic)
    modified = mask
    if mode in ("mask", "both"):
        keep = ((weights >= mask_lower) & (weights <= mask_upper)).float()
        metrics["rollout_is_masked_fraction"] = masked_mean(1 - keep, mask)
        if level in ("sequence", "geometric"):
            metrics["rollout_is_seq_masked_fraction"] = (1 - keep[:, 0]).mean()
        else:
            metrics["rollout_is_seq_masked_fraction"] = (masked_sum(1 - keep, mask, axis=-1) > 0).float().mean()
        modified = mask * keep
    if mode in ("truncate", "both"):
        weights = weights.clamp(max=upper, min=lower)
    modified = modified * veto_mask
    weights = weights * mask
    return weights, modified, metrics


def _is_metrics(w, log_m, mask, level, upper, lower, log_upper, log_lower, has_cat, cat):
    metrics = {}
    seq_valid = mask.sum(dim=-1, keepdim=True) > 0
    metrics["rollout_is_valid"] = mask.any().float()  # the seed's `valid`, as a number
    metrics["rollout_is_veto_fraction"] = masked_mean(has_cat.float(), seq_valid)
    metrics["rollout_is_catastrophic_token_fraction"] = masked_mean(cat.float(), mask)
    if level in ("sequence", "geometric"):
        metrics["rollout_is_max"] = torch.exp(torch.clamp(log_m.max(), max=SAFETY_BOUND))
        metrics["rollout_is_min"] = torch.exp(log_m.min())
        metrics["rollout_is_mean"] = masked_mean(w, mask)
        above, below = log_m > log_upper, log_m < log_lower
        if level == "sequence":
            metrics["rollout_is_ratio_fraction_high"] = above.float().mean()
            metrics["rollout_is_ratio_fraction_low"] = below.float().mean()
        else:
            metrics["rollout_is_ratio_fraction_high"] = masked_mean(above.expand_as(mask).float(), mask)
            metrics["rollout_is_ratio_fraction_low"] = masked_mean(below.expand_as(mask).float(), mask)
    else:
        metrics["rollout_is_mean"] = masked_mean(w, mask)
        metrics["rollout_is_ratio_fraction_high"] = masked_mean((w > upper).float(), mask)
        metrics["rollout_is_ratio_fraction_low"] = masked_mean((w < lower).float(), mask)
        metrics["rollout_is_max"] = w.masked_fill(~mask.bool(), float("-inf")).max()
        metrics["rollout_is_min"] = w.masked_fill(~mask.bool(), float("inf")).min()
    if mask.sum() > 1:
        clamped = w.clamp(min=lower, max=upper)
        var = masked_mean(clamped.square(), mask) - masked_mean(clamped, mask).square()
        metrics["rollout_is_std"] = torch.sqrt(torch.clamp(var, min=0.0))
    else:
        metrics["rollout_is_std"] = torch.tensor(0.0)
    clamped = w.clamp(min=lower, max=upper)
    normalized = clamped / (masked_mean(clamped, mask) + 1e-8)
    metrics["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalized.square(), mask)
    seq_w = masked_mean(w, mask, axis=-1)[seq_valid.squeeze(-1)]
    if seq_w.numel() > 0:
        metrics["rollout_is_seq_mean"] = seq_w.mean()
        metrics["rollout_is_seq_std"] = seq_w.std() if seq_w.numel() > 1 else torch.tensor(0.0)
        metrics["rollout_is_seq_max"] = seq_w.max()
        metrics["rollout_is_seq_min"] = seq_w.min()
        metrics["rollout_is_seq_max_deviation"] = (seq_w - 1.0).abs().max()
        metrics["rollout_is_seq_fraction_high"] = (seq_w > upper).float().mean()
        metrics["rollout_is_seq_fraction_low"] = (seq_w < lower).float().mean()
    return metrics


def mismatch(old, rollout, mask):
    """compute_mismatch_metrics, tensors instead of floats."""
    metrics = {}
    mean_train = masked_mean(old, mask, axis=-1)
    metrics["mismatch_training_ppl"] = torch.exp(-mean_train).mean()
    metrics["mismatch_training_log_ppl"] = (-mean_train).mean()
    metrics["mismatch_kl"] = masked_mean(rollout - old, mask)
    log_ratio = old - rollout
    metrics["mismatch_k3_kl"] = masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask)
    mean_rollout = masked_mean(rollout, mask, axis=-1)
    metrics["mismatch_rollout_ppl"] = torch.exp(-mean_rollout).mean()
    metrics["mismatch_rollout_log_ppl"] = (-mean_rollout).mean()
    diff = mean_rollout - mean_train
    metrics["mismatch_log_ppl_diff"] = diff.mean()
    metrics["mismatch_log_ppl_abs_diff"] = diff.abs().mean()
    metrics["mismatch_log_ppl_diff_max"] = diff.max()
    metrics["mismatch_log_ppl_diff_min"] = diff.min()
    metrics["mismatch_ppl_ratio"] = torch.exp(diff).mean()
    metrics["mismatch_logprob_abs_diff"] = masked_mean(log_ratio.abs(), mask)
    return metrics


def merge_per_key(per_rank: list[dict[str, float]], dist) -> dict[str, float]:
    """The seed's merge: one all-reduce (and one .item()) per key over per-rank values."""
    count = torch.tensor(float(len(per_rank)))
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    ranks = count.item()
    out = {}
    for key in per_rank[0]:
        values = torch.tensor([m[key] for m in per_rank], dtype=torch.float32)
        if "max" in key:
            t = values.max()
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            out[key] = t.item()
        elif "min" in key:
            t = values.min()
            dist.all_reduce(t, op=dist.ReduceOp.MIN)
            out[key] = t.item()
        else:
            t = values.sum()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            out[key] = t.item() / ranks
    return out
