"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.

The [B, T] passes run on the device into one [B, 10] per-row table (`COLUMNS`), which rides in
`reduce_stats`' one gather and one copy; `finish_mismatch` makes every stat from every rank's rows
on the host, in float64 (a handful of numpy operations where the stats as device partials took
some forty tiny torch ops).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from ._host import INF, SAFETY_BOUND
from ._masked import TokenMask, workspace
from ._partial import Stats
from ._table_finishes import MISMATCH_TABLE as TABLE
from ._table_finishes import finish_mismatch

_F64 = torch.float64
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
    shared = mismatch_columns(tm, train, log_ratio, fresh=False)  # neither buffer leaves the call
    rho_tok = shared.weights.mul_(tm.mf)  # in place: +0 on padding
    add_mismatch_table(stats, tm, shared, rho_tok, rho_tok.sum(-1), rho_tok.amax(-1), None)
    return stats


class Shared(NamedTuple):
    """What `mismatch_columns` computed, which the IS correction needs too
    (`rollout_correction(with_mismatch=True)`)."""

    ratio_row: Tensor
    """[B] summed log ratios (0 for rows without tokens)."""
    weights: Tensor
    """[B, T] exp(clamp(log ratio, +-20)), 1 on padding: fresh or the former scratch; the caller may overwrite it."""
    columns: list[Tensor]
    """The table's first six columns ([B] each)."""


def mismatch_columns(tm: TokenMask, train: Tensor, log_ratio: Tensor, fresh: bool) -> Shared:
    """The table's columns up to the token ratios' (see `add_mismatch_table`), from the [B, T] passes.

    `log_ratio` ([B, T] train - rollout, exactly 0 on padding) is used up: its buffer
    ends up holding the k3 terms. The token ratios go to a fresh tensor if `fresh`,
    else to the mask's scratch buffer, and the spent log-ratio buffer becomes the
    scratch (one [B, T] buffer fewer to touch per call). `tm` must not have had
    `inf_()` yet.
    """
    s = tm.scratch
    # in place on the scratch buffer (fresh multi-MB tensors cost page faults on CPU)
    train_row = tm.zeroed(train, out=s).sum(-1)
    ratio_row = log_ratio.sum(-1)
    abs_diff = torch.abs(log_ratio, out=s)  # padding's 0 never exceeds a valid |x|
    abs_row, abs_max = abs_diff.sum(-1), abs_diff.amax(-1)
    ratio = torch.exp(log_ratio) if fresh else torch.exp(log_ratio, out=s)  # 1 on padding; unbounded for k3
    k3 = torch.sub(ratio, log_ratio, out=log_ratio).sub_(1.0)  # 0 on padding; the log ratios are spent
    k3_row = k3.sum(-1)
    if not fresh:
        tm.scratch = log_ratio
    # exp is monotonic: clamping exp(x) to exp(+-20) equals exp(clamp(x, +-20)), one exp fewer
    weights = ratio.clamp_(*_EXP_BOUNDS[ratio.dtype])
    return Shared(ratio_row, weights, [tm.n_row, train_row, ratio_row, abs_row, abs_max, k3_row])


def add_mismatch_table(stats: Stats, tm: TokenMask, shared: Shared, rho_tok: Tensor, rho_row: Tensor,
                       rho_max: Tensor, rho_min: Tensor | None) -> None:
    """The mismatch table of one call onto `stats`, from `shared` and the masked token ratios.

    `rho_tok`: [B, T] safety-bounded ratios, +0 on padding; `rho_row`, `rho_max`: its per-row
    sums and maxima; `rho_min`: its per-row minima over tokens, or None to compute them here
    (lifting `rho_tok`'s padding to +inf in place).
    """
    rho_sq = torch.mul(rho_tok, rho_tok, out=tm.scratch).sum(-1)
    if rho_min is None:
        rho_min = tm.inf_(rho_tok).amin(-1)
    table = torch.stack(shared.columns + [rho_row, rho_max, rho_sq, rho_min], -1).to(_F64)
    stats.add_table(TABLE, table, finish=finish_mismatch, params=(1.0,))


def _training_perplexity(stats: Stats, train: Tensor, mask: Tensor, shape: tuple) -> Stats:
    """Seed 004's training perplexity alone: the table's first two columns, the others empty."""
    tm = TokenMask(v.mask_like(mask, "mask", shape), "mask", stats, train.dtype)
    train_row = tm.zeroed(train, out=tm.scratch).sum(-1)
    zero = torch.zeros_like(train_row)
    table = torch.stack([tm.n_row, train_row] + [zero] * 7 + [zero + INF], -1).to(_F64)
    stats.add_table(TABLE, table, finish=finish_mismatch, params=(0.0,))
    return stats
