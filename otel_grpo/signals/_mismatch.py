"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from ._masked import SAFETY_BOUND, TokenMask, count, tmax, tmin, total, workspace
from ._partial import Stats

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
    # exactly 0 on padding whatever it held, as the seed's zero-padded tensors
    log_ratio = tm.zero_(torch.sub(train, rollout, out=workspace("log_ratio", tm.mf, dtype)))  # train - rollout
    shared = add_mismatch(stats, tm, train, log_ratio, workspace("ratio", tm.mf, dtype))  # neither leaves
    rho_tok = shared.weights.mul_(tm.mf)  # in place: +0 on padding
    add_token_ratio(stats, tm, rho_tok, total(rho_tok), tmax(rho_tok), None)
    return stats


class Shared(NamedTuple):
    """What `add_mismatch` computed that the IS correction needs too (`rollout_correction(with_mismatch=True)`)."""

    ratio_row: Tensor
    """[B] summed log ratios (0 for rows without tokens)."""
    weights: Tensor
    """[B, T] exp(clamp(log ratio, +-20)), 1 on padding: a fresh buffer the caller may overwrite."""


def add_mismatch(stats: Stats, tm: TokenMask, train: Tensor, log_ratio: Tensor, out: Tensor | None) -> Shared:
    """Every mismatch stat but the token IS-ratio ones (see `add_token_ratio`).

    `log_ratio` ([B, T] train - rollout, exactly 0 on padding) is left untouched; the
    mask's scratch buffer is used; `tm` must not have had `inf_()` yet. The token
    ratios go to `out` (None: a fresh tensor).
    """
    n, n_row, rows, s = tm.n, tm.n_row, tm.rows, tm.scratch
    # in place on the scratch buffer (fresh multi-MB tensors cost page faults on CPU)
    train_row = tm.zeroed(train, out=s).sum(-1)
    ratio_row = log_ratio.sum(-1)
    _perplexities(stats, train_row, train_row - ratio_row, n_row, tm.all_rows())
    stats.add_mean("mismatch_kl", -ratio_row.sum(dtype=_F64), n)
    abs_diff = torch.abs(log_ratio, out=s)
    stats.add_mean("mismatch_logprob_abs_diff", total(abs_diff), n)
    stats.add_max("mismatch_logprob_abs_diff_max", tmax(abs_diff), n)  # padding's 0 never exceeds a valid |x|

    ratio = torch.exp(log_ratio, out=out)  # 1 on padding; unbounded for k3, as the seed
    stats.add_mean("mismatch_k3_kl", total(torch.sub(ratio, log_ratio, out=s).sub_(1.0)), n)  # 0 on padding
    # exp is monotonic: clamping exp(x) to exp(+-20) equals exp(clamp(x, +-20)), one exp fewer
    weights = ratio.clamp_(*_EXP_BOUNDS[ratio.dtype])

    rho_seq = ratio_row.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    # a row without tokens has ratio_row exactly 0, so (rho_seq - 1)^2 exactly 0: no selection needed
    stats.add_mean("mismatch_chi2_seq", (rho_seq - 1.0).square().sum(dtype=_F64), count(rows))
    geometric = (ratio_row / n_row.clamp(min=1)).clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    stats.add_samples("sample_is_ratio", torch.where(rows, geometric, float("nan")))
    return Shared(ratio_row, weights)


def add_token_ratio(stats: Stats, tm: TokenMask, rho_tok: Tensor, rho_sum: Tensor, rho_max: Tensor, rho_min) -> None:
    """is_ratio_mean / max / min and mismatch_chi2_token from the masked token ratios.

    `rho_tok`: [B, T] safety-bounded ratios, +0 on padding; `rho_sum`, `rho_max`: its
    total and max; `rho_min`: its min over tokens, or None to compute it here
    (lifting `rho_tok`'s padding to +inf in place).
    """
    n, s = tm.n, tm.scratch
    stats.add_mean("is_ratio_mean", rho_sum, n)
    stats.add_max("is_ratio_max", rho_max, n)
    stats.add_mean("mismatch_chi2_token", total(torch.sub(rho_tok, tm.mf, out=s).square_()), n)  # (rho-1)^2
    stats.add_min("is_ratio_min", tmin(tm.inf_(rho_tok)) if rho_min is None else rho_min, n)


def _perplexities(stats: Stats, train_row: Tensor, rollout_row: Tensor, n_row: Tensor, all_rows: Tensor) -> None:
    """Seed 004's per-sequence perplexity stats, averaged over all rows ([B] inputs)."""
    # one [7, B] tensor summed once: a dozen fewer small ops than one reduction per stat
    means = torch.stack([train_row, rollout_row]).div_(n_row + _EPS)  # mean_train, mean_rollout
    diff = means[1] - means[0]  # = log(training ppl / rollout ppl)
    logs = torch.cat([means.neg_(), diff.unsqueeze(0)])  # -mean_train, -mean_rollout, diff
    totals = torch.cat([logs.exp(), logs, diff.abs().unsqueeze(0)]).sum(-1, dtype=_F64)
    # all_rows: 0 on a rank without any valid token, which the seed's merge leaves out
    for key, total_ in zip(_PPL_KEYS, totals.unbind()):
        stats.add_mean(key, total_, all_rows)
    low, high = torch.aminmax(diff)
    stats.add_max("mismatch_log_ppl_diff_max", high, all_rows)
    stats.add_min("mismatch_log_ppl_diff_min", low, all_rows)


# the rows of _perplexities' [7, B] tensor
_PPL_KEYS = (
    "mismatch_training_ppl", "mismatch_rollout_ppl", "mismatch_ppl_ratio",
    "mismatch_training_log_ppl", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff", "mismatch_log_ppl_abs_diff",
)  # fmt: skip
