"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import TokenMask, count, total
from ._partial import Stats
from ._rollout_is import SAFETY_BOUND

# exp(-20) and exp(20) as torch rounds them in each dtype (Python floats: clamping to
# tensor bounds is ten times slower on CPU). Computed once, on CPU, at import.
_EXP_BOUNDS = {
    dt: tuple(torch.tensor([-SAFETY_BOUND, SAFETY_BOUND], dtype=dt).exp().tolist())
    for dt in (torch.float32, torch.float64)
}
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
    dtype = v.compute_dtype(train, rollout)
    tm = TokenMask(v.mask_like(mask, "mask", shape), "mask", stats, dtype)
    n, n_row, rows, s = tm.n, tm.n_row, tm.rows, tm.scratch

    # exactly 0 on padding whatever it held, as the seed's zero-padded tensors; in place
    # on two buffers besides the scratch (fresh multi-MB tensors cost page faults on CPU)
    train_tok = tm.zeroed(train)
    log_ratio = tm.zero_(torch.sub(train_tok, rollout, out=torch.empty_like(train_tok)))  # train - rollout
    train_row = train_tok.sum(-1)
    ratio_row = log_ratio.sum(-1)
    _perplexities(stats, train_row, train_row - ratio_row, n_row, rows)
    stats.add_mean("mismatch_kl", -ratio_row.sum(dtype=_F64), n)
    abs_diff = torch.abs(log_ratio, out=s)
    stats.add_mean("mismatch_logprob_abs_diff", total(abs_diff), n)
    stats.add_max("mismatch_logprob_abs_diff_max", abs_diff.max(), n)  # padding's 0 never exceeds a valid |x|

    ratio = torch.exp(log_ratio, out=train_tok)  # 1 on padding; unbounded for k3, as the seed
    stats.add_mean("mismatch_k3_kl", total(torch.sub(ratio, log_ratio, out=s).sub_(1.0)), n)  # 0 on padding
    # exp is monotonic: clamping exp(x) to exp(+-20) equals exp(clamp(x, +-20)), one exp fewer
    rho_tok = ratio.clamp_(*_EXP_BOUNDS[dtype]).mul_(tm.mf)  # +0 on padding
    stats.add_mean("is_ratio_mean", total(rho_tok), n)
    stats.add_max("is_ratio_max", rho_tok.max(), n)
    stats.add_mean("mismatch_chi2_token", total(torch.sub(rho_tok, tm.mf, out=s).square_()), n)  # (rho-1)^2
    stats.add_min("is_ratio_min", tm.inf_(rho_tok).min(), n)

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
