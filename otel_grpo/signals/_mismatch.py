"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import count, masked_max, masked_min
from ._partial import Stats
from ._rollout_is import SAFETY_BOUND

_EPS = 1e-8  # the seed's masked_mean epsilon (per-row means of rows without tokens are 0)
_F64 = torch.float64


@torch.no_grad()
def mismatch_stats(train_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> Stats:
    """Mismatch between the training and the rollout policy on the sampled tokens.

    Args:
        train_logprobs: [B, T] float, log pi_train.
        rollout_logprobs: [B, T] float, log pi_rollout.
        mask: [B, T] bool or 0/1, completion tokens.

    Seed 004's keys with its definitions: token means for `mismatch_kl`,
    `mismatch_k3_kl` and `mismatch_logprob_abs_diff`; means over all rows of the
    batch of the per-sequence perplexities, log perplexities, log-ppl difference
    and ppl ratio (a row without tokens counts with mean log-prob 0, as there).
    Ours besides: `mismatch_logprob_abs_diff_max`, the token IS ratio
    rho = exp(clamp(log ratio, +-20)) as `is_ratio_mean/min/max`,
    `mismatch_chi2_token` (mean of (rho - 1)^2 over tokens), `mismatch_chi2_seq`
    (mean over sequences with tokens of (rho_seq - 1)^2, rho_seq the safety-bounded
    sequence ratio) and the per-sample geometric-mean ratio `sample_is_ratio`
    (NaN for rows without tokens).
    """
    stats = Stats()
    train = v.floating(train_logprobs, "train_logprobs", dim=2)
    shape = tuple(train.shape)
    rollout = v.floating(rollout_logprobs, "rollout_logprobs", shape=shape)
    m = v.binary(mask, "mask", stats, shape=shape)
    dtype = v.compute_dtype(train, rollout)
    pad = ~m
    n = count(m)
    n_row = m.sum(-1, dtype=dtype)
    rows = n_row > 0

    train_row = train.to(dtype).masked_fill(pad, 0.0).sum(-1)  # [B]
    log_ratio = (train.to(dtype) - rollout.to(dtype)).masked_fill_(pad, 0.0)  # train - rollout
    ratio_row = log_ratio.sum(-1)  # [B]
    _perplexities(stats, train_row, train_row - ratio_row, n_row, rows)

    stats.add_mean("mismatch_kl", -ratio_row.sum(dtype=_F64), n)
    k3 = log_ratio.exp().sub_(log_ratio).sub_(1.0)  # 0 on padding; unbounded, as the seed
    stats.add_mean("mismatch_k3_kl", k3.sum(dtype=_F64), n)
    abs_diff = log_ratio.abs()
    stats.add_mean("mismatch_logprob_abs_diff", abs_diff.sum(dtype=_F64), n)
    stats.add_max("mismatch_logprob_abs_diff_max", abs_diff.max(), n)  # padding's 0 never exceeds a valid |x|

    rho = log_ratio.clamp_(-SAFETY_BOUND, SAFETY_BOUND).exp_()  # reuses log_ratio's memory; 1 on padding
    stats.add_mean("is_ratio_mean", rho.masked_fill(pad, 0.0).sum(dtype=_F64), n)
    stats.add_max("is_ratio_max", masked_max(rho, pad), n)
    stats.add_min("is_ratio_min", masked_min(rho, pad), n)
    stats.add_mean("mismatch_chi2_token", rho.sub_(1.0).square_().sum(dtype=_F64), n)  # 0 on padding

    rho_seq = ratio_row.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    stats.add_mean("mismatch_chi2_seq", torch.where(rows, (rho_seq - 1.0).square(), 0.0).sum(dtype=_F64), count(rows))
    geometric = (ratio_row / n_row.clamp(min=1)).clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    stats.add_samples("sample_is_ratio", torch.where(rows, geometric, float("nan")))
    return stats


def _perplexities(stats: Stats, train_row: Tensor, rollout_row: Tensor, n_row: Tensor, rows: Tensor) -> None:
    """Seed 004's per-sequence perplexity stats, averaged over all rows ([B] inputs)."""
    mean_train = train_row / (n_row + _EPS)
    mean_rollout = rollout_row / (n_row + _EPS)
    # a rank without any valid token is left out, as the seed's merge leaves it out
    all_rows = count(rows.any()) * len(n_row)
    diff = mean_rollout - mean_train  # = log(training ppl / rollout ppl)

    def mean(key: str, x: Tensor) -> None:
        stats.add_mean(key, x.sum(dtype=_F64), all_rows)

    mean("mismatch_training_ppl", (-mean_train).exp())
    mean("mismatch_training_log_ppl", -mean_train)
    mean("mismatch_rollout_ppl", (-mean_rollout).exp())
    mean("mismatch_rollout_log_ppl", -mean_rollout)
    mean("mismatch_log_ppl_diff", diff)
    mean("mismatch_log_ppl_abs_diff", diff.abs())
    mean("mismatch_ppl_ratio", diff.exp())
    stats.add_max("mismatch_log_ppl_diff_max", diff.max(), all_rows)
    stats.add_min("mismatch_log_ppl_diff_min", diff.min(), all_rows)
