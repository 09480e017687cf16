"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from ._masked import SAFETY_BOUND, RowSums, TokenMask, tmax, tmin, workspace
from ._partial import Stats

# exp(-20) and exp(20) as torch rounds them in each dtype (Python floats: clamping to
# tensor bounds is ten times slower on CPU). Computed once, on CPU, at import.
_EXP_BOUNDS = {
    dt: tuple(torch.tensor([-SAFETY_BOUND, SAFETY_BOUND], dtype=dt).exp().tolist())
    for dt in (torch.float32, torch.float64)
}


@torch.no_grad()
def mismatch_stats(train_logprobs: Tensor, rollout_logprobs: Tensor | None, mask: Tensor) -> Stats:
    """Mismatch between the training and the rollout policy on the sampled tokens.

    Args:
        train_logprobs: [B, T] float, log pi_train.
        rollout_logprobs: [B, T] float, log pi_rollout; None when the rollout engine
            returned none: then only the training policy's perplexity,
            `mismatch_training_ppl` and `mismatch_training_log_ppl` (as seed 004 and
            verl, which compute it always).
        mask: [B, T] bool or 0/1, completion tokens.

    Seed 004's keys with its definitions: token means for `mismatch_kl`,
    `mismatch_k3_kl` and `mismatch_logprob_abs_diff`; means over all rows of the
    batch of the per-sequence perplexities, log perplexities, log-ppl difference
    and ppl ratio (a row without tokens counts with mean log-prob 0, as there).
    Ours besides: `mismatch_logprob_abs_diff_max`, the token IS ratio
    rho = exp(clamp(log ratio, +-20)) as `is_ratio_mean/min/max`,
    `mismatch_chi2_token` (verl 0.9.1's E[rho^2] - 1 over tokens), `mismatch_chi2_seq`
    (verl's E[rho_seq^2] - 1 over all rows, rho_seq the safety-bounded sequence ratio) and the per-sample geometric-mean ratio `sample_is_ratio`
    (NaN for rows without tokens).
    """
    stats = Stats()
    train = v.floating(train_logprobs, "train_logprobs", dim=2)
    shape = tuple(train.shape)
    if rollout_logprobs is None:
        return _training_perplexity(stats, train, mask, shape)
    rollout = v.floating(rollout_logprobs, "rollout_logprobs", shape=shape)
    dtype = v.compute_dtype(train, rollout)
    tm = TokenMask(v.mask_like(mask, "mask", shape), "mask", stats, dtype)
    # exactly 0 on padding whatever it held, as the seed's zero-padded tensors
    log_ratio = tm.zero_(torch.sub(train, rollout, out=workspace("log_ratio", tm.mf, dtype)))  # train - rollout
    rs = RowSums(stats)
    shared = add_mismatch(rs, tm, train, log_ratio, fresh=False)  # neither buffer leaves the call
    rho_tok = shared.weights.mul_(tm.mf)  # in place: +0 on padding
    add_token_ratio(rs, tm, rho_tok, rho_tok.sum(-1), tmax(rho_tok), None)
    rs.flush()
    return stats


class Shared(NamedTuple):
    """What `add_mismatch` computed that the IS correction needs too (`rollout_correction(with_mismatch=True)`)."""

    ratio_row: Tensor
    """[B] summed log ratios (0 for rows without tokens)."""
    weights: Tensor
    """[B, T] exp(clamp(log ratio, +-20)), 1 on padding: fresh or the former scratch; the caller may overwrite it."""


def add_mismatch(rs: RowSums, tm: TokenMask, train: Tensor, log_ratio: Tensor, fresh: bool) -> Shared:
    """Every mismatch stat but the token IS-ratio ones (see `add_token_ratio`).

    `log_ratio` ([B, T] train - rollout, exactly 0 on padding) is used up: its buffer
    ends up holding the k3 terms. The token ratios go to a fresh tensor if `fresh`,
    else to the mask's scratch buffer, and the spent log-ratio buffer becomes the
    scratch (one [B, T] buffer fewer to touch per call). `tm` must not have had
    `inf_()` yet. Sums over rows are queued on `rs`.
    """
    stats, n, n_row, rows, s = rs.stats, tm.n, tm.n_row, tm.rows, tm.scratch
    # in place on the scratch buffer (fresh multi-MB tensors cost page faults on CPU)
    train_row = tm.zeroed(train, out=s).sum(-1)
    ratio_row = log_ratio.sum(-1)
    _perplexities(rs, train_row, train_row - ratio_row, tm)
    rs.call(lambda total_: stats.add_mean("mismatch_kl", -total_, n), ratio_row)
    abs_diff = torch.abs(log_ratio, out=s)
    rs.mean("mismatch_logprob_abs_diff", abs_diff.sum(-1), n)
    stats.add_max("mismatch_logprob_abs_diff_max", tmax(abs_diff), n)  # padding's 0 never exceeds a valid |x|

    ratio = torch.exp(log_ratio) if fresh else torch.exp(log_ratio, out=s)  # 1 on padding; unbounded for k3
    k3 = torch.sub(ratio, log_ratio, out=log_ratio).sub_(1.0)  # 0 on padding; the log ratios are spent
    rs.mean("mismatch_k3_kl", k3.sum(-1), n)
    if not fresh:
        tm.scratch = log_ratio
    # exp is monotonic: clamping exp(x) to exp(+-20) equals exp(clamp(x, +-20)), one exp fewer
    weights = ratio.clamp_(*_EXP_BOUNDS[ratio.dtype])

    rho_seq = ratio_row.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    # verl's E[rho_seq^2] - 1 over all rows: a row without tokens has ratio_row exactly 0, so it adds 1 - 1 = 0
    rs.mean("mismatch_chi2_seq", rho_seq.square_().sub_(1.0), tm.all_rows())
    geometric = (ratio_row / n_row.clamp(min=1)).clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()
    stats.add_samples("sample_is_ratio", torch.where(rows, geometric, float("nan")))
    return Shared(ratio_row, weights)


def add_token_ratio(rs: RowSums, tm: TokenMask, rho_tok: Tensor, rho_rows: Tensor, rho_max: Tensor, rho_min) -> None:
    """is_ratio_mean / max / min and mismatch_chi2_token from the masked token ratios.

    `rho_tok`: [B, T] safety-bounded ratios, +0 on padding; `rho_rows`, `rho_max`: its
    per-row sums and max; `rho_min`: its min over tokens, or None to compute it here
    (lifting `rho_tok`'s padding to +inf in place).
    """
    stats, n, s = rs.stats, tm.n, tm.scratch
    rs.mean("is_ratio_mean", rho_rows, n)
    stats.add_max("is_ratio_max", rho_max, n)
    rs.mean("mismatch_chi2_token", torch.mul(rho_tok, rho_tok, out=s).sum(-1) - tm.n_row, n)  # E[rho^2] - 1
    stats.add_min("is_ratio_min", tmin(tm.inf_(rho_tok)) if rho_min is None else rho_min, n)


def _perplexities(rs: RowSums, train_row: Tensor, rollout_row: Tensor, tm: TokenMask) -> None:
    """Seed 004's per-sequence perplexity stats, averaged over all rows ([B] row sums in)."""
    stats, all_rows = rs.stats, tm.all_rows()
    means = torch.stack([train_row, rollout_row]).div_(tm.den())  # mean_train, mean_rollout
    diff = means.diff(dim=0)  # [1, B] mean_rollout - mean_train = log(training ppl / rollout ppl)
    logs = torch.cat([means.neg_(), diff])  # -mean_train, -mean_rollout, diff
    # all_rows: 0 on a rank without any valid token, which the seed's merge leaves out
    rs.block(lambda *totals: _add_means(stats, _PPL_KEYS, totals, all_rows), torch.cat([logs.exp(), logs, diff.abs()]))
    low, high = torch.aminmax(diff)
    stats.add_max("mismatch_log_ppl_diff_max", high, all_rows)
    stats.add_min("mismatch_log_ppl_diff_min", low, all_rows)


def _training_perplexity(stats: Stats, train: Tensor, mask: Tensor, shape: tuple) -> Stats:
    """Seed 004's training perplexity alone: mean over all rows of exp(-mean log pi_train)."""
    tm = TokenMask(v.mask_like(mask, "mask", shape), "mask", stats, train.dtype)
    neg_mean = tm.zeroed(train, out=tm.scratch).sum(-1).div_(tm.den()).neg_()  # [B] -mean log pi_train
    rs = RowSums(stats)
    keys = ("mismatch_training_ppl", "mismatch_training_log_ppl")
    rs.block(lambda *totals: _add_means(stats, keys, totals, tm.all_rows()), torch.stack([neg_mean.exp(), neg_mean]))
    rs.flush()
    return stats


def _add_means(stats: Stats, keys, totals, count: Tensor) -> None:
    for key, total_ in zip(keys, totals):
        stats.add_mean(key, total_, count)


# the rows of _perplexities' [7, B] tensor
_PPL_KEYS = (
    "mismatch_training_ppl", "mismatch_rollout_ppl", "mismatch_ppl_ratio",
    "mismatch_training_log_ppl", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff", "mismatch_log_ppl_abs_diff",
)  # fmt: skip
