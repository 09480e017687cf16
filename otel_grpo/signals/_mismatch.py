"""Rollout-vs-training mismatch: seed 004's compute_mismatch_metrics, plus IS-ratio and chi-square stats.

Measured whenever rollout log-probs exist, whether or not a correction is applied.

The [B, T] passes run on the device into one [B, 10] per-row table (`COLUMNS`), which rides in
`reduce_stats`' one gather and one copy; `finish_mismatch` makes every stat from every rank's rows
on the host, in float64 (a handful of numpy operations where the stats as device partials took
some forty tiny torch ops).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from . import _validate as v
from ._host import called_rows
from ._masked import INF, SAFETY_BOUND, TokenMask, workspace
from ._partial import Stats

_F64 = torch.float64
TABLE = "mismatch"
"""The per-row table's name (`Stats.add_table`)."""
COLUMNS = ("n_row", "train_row", "ratio_row", "abs_diff_row", "abs_diff_max", "k3_row", "rho_row", "rho_max",
           "rho_sq_row", "rho_min")
"""Per row: tokens, sums of log pi_train and of the log ratios, sum and max of |log ratio|, sum of the k3
terms, sum, max, sum of squares and min of the safety-bounded token ratios (+inf without a token). The
table's one param a call: 1.0 with rollout log-probs, 0.0 for `_training_perplexity` (only the first two
columns hold numbers there)."""

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


def finish_mismatch(rows: np.ndarray, params: np.ndarray, calls: np.ndarray):
    """Every mismatch stat and `sample_is_ratio` from the gathered tables (`Stats.add_table`'s finish).

    Token means count the tokens of calls with rollout log-probs; seed 004's per-sequence means count
    every row of a call that has a token (its `valid`: the seed's merge leaves out a rank without one),
    and a call without rollout log-probs only in the training perplexity.
    """
    called = called_rows(calls, rows[:, 0])
    rollout = params[:, 0] > 0
    every = rollout.all()
    r = rows if every else rows[rollout]  # the rows with rollout log-probs
    n_row, ratio_row = r[:, 0], r[:, 2]
    n = float(n_row.sum())
    col = r[:, 2:8].sum(0)
    # sum rho^2 - 1 row by row: each row's difference keeps its digits, where sum rho^2 - n over the batch
    # cancelled them (at a mismatch of 1e-5, E[rho^2] - 1 came out 4e-9 off, relative)
    chi2_token = (r[:, 8] - n_row).sum()
    # seed 004's per-sequence means over every row of the calls with a token
    p = r if called.all() else r[called if every else called[rollout]]
    den = p[:, 0] + 1e-8  # the seed's masked_mean denominator
    neg = np.stack([p[:, 1], p[:, 1] - p[:, 2]]) / -den  # -mean log pi_train, -mean log pi_rollout
    diff = neg[0] - neg[1]  # log(training ppl / rollout ppl)
    e = np.exp(np.stack([neg[1], diff, 2 * np.minimum(np.maximum(p[:, 2], -SAFETY_BOUND), SAFETY_BOUND)]))
    k = len(p)
    ppl = np.stack([e[0], e[1], neg[1], diff, np.abs(diff), e[2] - 1.0]).sum(1) / max(k, 1)
    train_neg = neg[0] if every else np.concatenate([neg[0], -rows[~rollout & called, 1] /
                                                     (rows[~rollout & called, 0] + 1e-8)])
    k_all = len(train_neg)
    n1, tokens = max(n, 1.0), n > 0
    values = {
        "mismatch_kl": (-col[0] / n1, tokens),
        "mismatch_logprob_abs_diff": (col[1] / n1, tokens),
        "mismatch_logprob_abs_diff_max": (r[:, 4].max(initial=-INF), tokens),
        "mismatch_k3_kl": (col[3] / n1, tokens),
        "is_ratio_mean": (col[4] / n1, tokens),
        "is_ratio_max": (r[:, 7].max(initial=-INF), tokens),
        "mismatch_chi2_token": (chi2_token / n1, tokens),  # E[rho^2] - 1
        "is_ratio_min": (r[:, 9].min(initial=INF), tokens),
        "mismatch_training_ppl": (np.exp(train_neg).sum() / max(k_all, 1), k_all > 0),
        "mismatch_training_log_ppl": (train_neg.sum() / max(k_all, 1), k_all > 0),
        "mismatch_log_ppl_diff_max": (diff.max(initial=-INF), k > 0),
        "mismatch_log_ppl_diff_min": (diff.min(initial=INF), k > 0),
    }
    values.update((key, (x, k > 0)) for key, x in zip(_PPL_KEYS, ppl.tolist()))
    if not rollout.any():  # only calls without rollout log-probs: the training perplexity alone
        return {key: values[key] for key in _TRAINING_KEYS}, {}
    has = n_row > 0
    geometric = np.exp(np.minimum(np.maximum(ratio_row[has] / n_row[has], -SAFETY_BOUND), SAFETY_BOUND))
    return values, {"sample_is_ratio": geometric.tolist()}


_TRAINING_KEYS = ("mismatch_training_ppl", "mismatch_training_log_ppl")
# the rows of finish_mismatch's per-sequence means over the rows with rollout log-probs
_PPL_KEYS = ("mismatch_rollout_ppl", "mismatch_ppl_ratio", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff",
             "mismatch_log_ppl_abs_diff", "mismatch_chi2_seq")
