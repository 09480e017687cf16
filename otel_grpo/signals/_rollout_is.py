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

The [B, T] passes run on the device into one [B, 11] per-row table per call (`COLUMNS`), the
call's level, thresholds and mode riding beside it as the table's params; `finish_rollout_is`
makes every `rollout_is_*` stat from every rank's rows on the host, so that calls merged with
different parameters keep each its own (`rollout_is_valid` and the mask check stay partials).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from . import _validate as v
from . import _mismatch
from ._host import called_rows, ess_from_sums, std_from_sums
from ._masked import INF, SAFETY_BOUND, TokenMask, rows_above, rows_below, workspace
from ._partial import Stats

LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask", "both")
_F64 = torch.float64
TABLE = "rollout_is"
"""The per-row table's name (`Stats.add_table`)."""
COLUMNS = ("n_row", "veto_row", "w_row", "w_max", "w_min", "high_row", "low_row", "masked_row", "rejected",
           "shifted_row", "shifted_sq_row")
"""Per row: tokens and tokens outside the veto band (0 without a veto); then at the token level the sum,
max and min (+inf without a token) of the token ratios, the tokens above the upper and below the lower
threshold, the tokens rejected by mask mode, whether the row has one, and the sums of w - 1 and (w - 1)^2
of the threshold-clamped ratios; at the row levels the row's log weight (summed or averaged log ratio)
and whether mask mode rejected the row (in the `w_max` column), the rest 0. Params a call: the level's
index in `LEVELS`, the thresholds, and 1.0 in mask or both mode."""


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
    with_mismatch: bool = False,
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
        with_mismatch: also add `mismatch_stats(train_logprobs, rollout_logprobs, mask)`'s
            stats (the same values) to `stats`, sharing the mask check, the log ratios
            and the token ratios instead of computing them a second time.
    """
    stats = Stats()
    train = v.floating(train_logprobs, "train_logprobs", dim=2)
    shape = tuple(train.shape)
    rollout = v.floating(rollout_logprobs, "rollout_logprobs", shape=shape)
    dtype = v.compute_dtype(train, rollout)
    m = v.mask_like(mask, "mask", shape)
    v.choice(level, "level", LEVELS)
    v.choice(mode, "mode", MODES)
    bounds = v.bounds(threshold, "threshold")
    mask_bounds = bounds if mask_threshold is None else v.bounds(mask_threshold, "mask_threshold")
    veto = None if veto_threshold is None else v.bounds(veto_threshold, "veto_threshold")

    # the token path without the mismatch pass turns the log ratios into the returned weights
    tm = TokenMask(m, "mask", stats, dtype)
    tok = _Tokens.of(train, rollout, tm, stats, internal=with_mismatch or level != "token")
    # seed 004's per-rank `valid` (this rank has a token), as a fraction of ranks
    stats.add_mean("rollout_is_valid", torch.clamp(tm.n, max=1.0), 1.0)
    veto_row = _veto_row(tok, veto)  # first: the mismatch pass uses up the log ratios
    if with_mismatch:  # before anything lifts padding to inf
        # the token path returns the ratios as its weights (a fresh tensor); the row paths do not
        tok.shared = _mismatch.mismatch_columns(tm, train, tok.log_ratio, fresh=level == "token")
    masked = mode in ("mask", "both")
    step = _token_level if level == "token" else _row_level
    weights, keep, columns = step(tok, bounds, mask_bounds, mode, level)  # weights 0 on padding
    if tok.shared is not None and level != "token":  # the token path adds them from its own weights
        rho_tok = tok.shared.weights.mul_(tm.mf)
        _mismatch.add_mismatch_table(stats, tm, tok.shared, rho_tok, rho_tok.sum(-1), rho_tok.amax(-1), None)
    columns = [tm.n_row, veto_row] + columns
    table = torch.stack([tok.zero() if c is None else c for c in columns], -1)  # None: a column the call leaves 0
    stats.add_table(TABLE, table.to(_F64), finish=finish_rollout_is,
                    params=(LEVELS.index(level), *bounds, float(masked)))
    vetoed = None if veto_row is None else veto_row > 0  # [B]
    if keep is None and vetoed is None:
        return RolloutCorrection(weights, mask, stats)  # nothing rejected: the caller's mask as is
    if level != "token":  # [B] kept rows, the veto folded in: one [B, T] pass
        kept = ~vetoed if keep is None else keep if vetoed is None else keep & ~vetoed
        keep = kept.unsqueeze(-1).to(tm.mf.dtype)
    elif vetoed is not None:  # fold the per-sequence veto into the keep factor: one [B, T] pass
        kept_rows = (~vetoed).unsqueeze(-1).to(tm.mf.dtype)
        keep = kept_rows if keep is None else keep * kept_rows
    new_mask = tm.mf * keep
    return RolloutCorrection(weights, new_mask if new_mask.dtype == mask.dtype else new_mask.to(mask.dtype), stats)


@dataclass(slots=True)
class _Tokens:
    """The shared [B, T] / [B] intermediates of one call."""

    log_ratio: Tensor  # [B, T] log pi_train - log pi_rollout, exactly 0 on padding (used up by mismatch_columns)
    tm: TokenMask
    stats: Stats
    shared: _mismatch.Shared | None = None  # with_mismatch: the mismatch pass's row sums and token ratios
    _zero: Tensor | None = None

    @classmethod
    def of(cls, train: Tensor, rollout: Tensor, tm: TokenMask, stats: Stats, internal: bool) -> _Tokens:
        """`internal`: the log ratios' buffer never leaves the call (a workspace buffer)."""
        out = workspace("log_ratio", tm.mf, tm.mf.dtype) if internal else torch.empty_like(tm.mf)
        # the seed sees 0 on padding (packed sequences padded with 0): so do we
        log_ratio = tm.zero_(torch.sub(train, rollout, out=out))
        return cls(log_ratio, tm, stats)

    def zero(self) -> Tensor:
        """[B] zeros: the table's columns a call leaves empty. Made once, on first use."""
        if self._zero is None:
            self._zero = torch.zeros_like(self.tm.n_row)
        return self._zero


def _veto_row(tok: _Tokens, veto) -> Tensor | None:
    """[B] tokens of each row whose ratio lies outside `veto` (None: no veto)."""
    if veto is None:  # the seed reports zeros without a veto: the table's zero column
        return None
    tm = tok.tm
    log_lower = math.log(veto[0]) if veto[0] > 0 else -INF
    log_upper = math.log(veto[1])
    x = tok.log_ratio
    if not log_lower <= 0.0 <= log_upper:  # padding's 0 would be catastrophic: move it inside
        x = torch.sub(1.0, tm.mf).mul_((max(log_lower, -1e30) + log_upper) / 2).add_(x)
    # per-row counts of tokens outside [log_lower, log_upper] (exact integers in float): x differs
    # from its clamp exactly there; NaN stays NaN (as the row's count), like -inf - -inf with no lower bound
    s = tm.scratch
    return torch.sub(x, torch.clamp(x, log_lower, log_upper, out=s), out=s).abs_().sign_().sum(-1)


def _token_level(tok: _Tokens, bounds, mask_bounds, mode: str, level: str):
    """rho_t = exp(clamp(log ratio, +-20)): the table's token-level columns from the [B, T] passes.

    Works in place on the ratios' buffer (which becomes the returned weights) and
    the mask's scratch buffer; the token weights get a fresh tensor only in mask
    mode, where they are returned, and a workspace buffer otherwise.
    """
    lower, upper = bounds
    tm, s = tok.tm, tok.tm.scratch
    if tok.shared is None:
        w = tok.log_ratio.clamp_(-SAFETY_BOUND, SAFETY_BOUND).exp_()  # 1 on padding
    else:  # the same values (exp is monotonic), computed once by the mismatch pass
        w = tok.shared.weights
    # +0 on padding: never above a (positive) upper bound; returned as the weights in mask mode only
    w_tok = torch.mul(w, tm.mf, out=torch.empty_like(w) if mode == "mask" else workspace("w_tok", w, w.dtype))
    row_sum, w_max = w_tok.sum(-1), w_tok.amax(-1)
    high = rows_above(w_tok, upper, s)
    tm.inf_(w)  # +inf on padding: never below a lower bound
    low = rows_below(w, lower, s)
    w_min = w.amin(-1)
    if tok.shared is not None:  # over tokens, rollout_is_mean/max/min are is_ratio_mean/max/min
        _mismatch.add_mismatch_table(tok.stats, tm, tok.shared, w_tok, row_sum, w_max, w_min)
    keep = masked_row = rejected = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        masked_row = rows_above(w_tok, mup, s) + rows_below(w, mlow, s)
        # the seed: a row with any rejected token, averaged over all rows
        rejected = ((w_max > mup) | (w_min < mlow)).to(w.dtype)
        keep = (w >= mlow) & (w_tok <= mup)  # padding kept; the mask zeroes it anyway
    clamped_tok = w.clamp_(lower, upper).mul_(tm.mf)  # in place; w_tok keeps the unclamped weights
    # w - 1 on tokens, 0 on padding: the spread's sums keep their digits (see finish_rollout_is)
    shifted = torch.sub(clamped_tok, tm.mf, out=s)
    shifted_row = shifted.sum(-1)
    columns = [row_sum, w_max, w_min, high, low, masked_row, rejected, shifted_row, shifted.mul_(shifted).sum(-1)]
    # mask mode: weights stay safety-bounded only (the seed clamps in truncate modes)
    return (w_tok if mode == "mask" else clamped_tok), keep, columns


def _row_level(tok: _Tokens, bounds, mask_bounds, mode: str, level: str):
    """One weight per sequence from the summed (sequence) or averaged (geometric) log ratio.

    Everything here is [B] but the returned weights: the per-row log-ratio sums come from the
    log-ratio pass (or the mismatch pass); the stats are finished from the log weights on the host.
    """
    lower, upper = bounds
    tm = tok.tm
    log_w = tok.log_ratio.sum(-1) if tok.shared is None else tok.shared.ratio_row  # [B]; 0 for rows without tokens
    if level == "geometric":
        log_w = log_w / tm.den()
    w = log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()  # [B]
    keep = rejected = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        keep = (w >= mlow) & (w <= mup)  # [B]
        rejected = (~keep).to(w.dtype)
    weights = w.clamp(lower, upper) if mode in ("truncate", "both") else w
    return weights.unsqueeze(-1) * tm.mf, keep, [log_w, rejected] + [None] * 7


def finish_rollout_is(rows: np.ndarray, params: np.ndarray, calls: np.ndarray):
    """Every `rollout_is_*` stat but `rollout_is_valid` from the gathered tables (`Stats.add_table`'s finish).

    Each row counts with its call's level and thresholds, as the call's own partials would: token means
    over tokens; at the row levels the weight exp(clamp(log w, +-20)) of each row counts once per token,
    the max / min / fractions of the sequence level once per row over all rows of the call (the seed's
    denominators; a call without any token counts nowhere, as the seed's merge drops such a rank); the
    per-sequence stats over rows with tokens. The std and ESS come from the sums of d = w - 1 and d^2 of
    the threshold-clamped weights: the weights sit near 1, where E[w^2] - E[w]^2 cancels nearly all its
    digits (at a mismatch of 1e-2 the std came out 7% low); ESS takes sum w = sum d + n and
    sum w^2 = sum d^2 + 2 sum d + n.
    """
    n_row, veto_row = rows[:, 0], rows[:, 1]
    called = called_rows(calls, n_row).astype(np.float64)  # 1.0 on the rows of calls with a token
    n, k = float(n_row.sum()), int(np.count_nonzero(n_row))
    parts = [_group_parts(rows if sel is None else rows[sel], called if sel is None else called[sel], *group)
             for group, sel in _param_groups(params)]
    if len(parts) == 1:  # the usual step: one setup
        total, high, low = parts[0][:_SUMS], parts[0][_SUMS::2], parts[0][_SUMS + 1:-1:2]
    else:  # the groups' sums, then their extremes (NaN kept, as torch.maximum)
        total = [sum(p[i] for p in parts) for i in range(_SUMS)]
        high = [np.maximum.reduce([p[i] for p in parts]) for i in (_SUMS, _SUMS + 2, _SUMS + 4)]
        low = [np.minimum.reduce([p[i] for p in parts]) for i in (_SUMS + 1, _SUMS + 3)]
    mean_w, shifted, shifted_sq, above, below, per_n, extreme_n, masked_tokens, masked_n, rejected, masked_rows, \
        seq_sum, seq_sq, seq_above, seq_below = total
    n1, k1 = max(n, 1.0), max(k, 1)
    w_total = shifted + n
    values = {
        "rollout_is_mean": (mean_w / n1, n > 0),
        "rollout_is_std": (std_from_sums(shifted, shifted_sq, n, unbiased=False), n > 0),
        "rollout_is_eff_sample_size": (ess_from_sums(w_total, shifted_sq + shifted + w_total, n),
                                       n > 0 and shifted_sq + shifted + w_total > 0),
        "rollout_is_max": (high[0], extreme_n > 0),
        "rollout_is_min": (low[0], extreme_n > 0),
        "rollout_is_ratio_fraction_high": (above / max(per_n, 1.0), per_n > 0),
        "rollout_is_ratio_fraction_low": (below / max(per_n, 1.0), per_n > 0),
        "rollout_is_veto_fraction": (np.count_nonzero(veto_row > 0) / k1, k > 0),
        "rollout_is_catastrophic_token_fraction": (veto_row.sum() / n1, n > 0),
        "rollout_is_seq_mean": (seq_sum / k1, k > 0),
        "rollout_is_seq_std": (std_from_sums(seq_sum, seq_sq, k, unbiased=True), k > 0),
        "rollout_is_seq_fraction_high": (seq_above / k1, k > 0),
        "rollout_is_seq_fraction_low": (seq_below / k1, k > 0),
        "rollout_is_seq_max": (high[1], k > 0),
        "rollout_is_seq_min": (low[1], k > 0),
        "rollout_is_seq_max_deviation": (high[2], k > 0),
    }
    if any(p[-1] for p in parts):  # keys of mask and both mode, over those calls' rows only
        values["rollout_is_masked_fraction"] = (masked_tokens / max(masked_n, 1.0), masked_n > 0)
        values["rollout_is_seq_masked_fraction"] = (rejected / max(masked_rows, 1.0), masked_rows > 0)
    return values, {}


def _param_groups(params: np.ndarray):
    """(params, rows) of each distinct params row: None for all rows when every call shares them (the usual step)."""
    if len(params) == 0 or (params == params[0]).all():
        return [(tuple(params[0].tolist()) if len(params) else (0.0, 1.0, 1.0, 0.0), None)]
    distinct, which = np.unique(params, axis=0, return_inverse=True)
    return [(tuple(p.tolist()), which.reshape(-1) == i) for i, p in enumerate(distinct)]


_SUMS = 15  # _group_parts' sums, before its extremes


def _group_parts(r: np.ndarray, called: np.ndarray, level: float, lower: float, upper: float, masked: float):
    """The sums and extremes of the rows `r` of calls that share level, thresholds and mode (see COLUMNS):
    [sum w, sum d, sum d^2, above, below, what the fractions count, what the extremes count, masked tokens,
    their calls' tokens, rejected rows, their calls' rows, sum, sum of squares, above and below of the
    per-sequence weights; max, min of the weights; max, min, max |w - 1| of the per-sequence weights;
    masked]."""
    n_row = r[:, 0]
    n = n_row.sum()
    if level == 0:  # the token level: the device summed every token already
        sums = r[:, 2:].sum(0)
        mean_w, above, below, shifted, shifted_sq = sums[0], sums[3], sums[4], sums[7], sums[8]
        per_n = extreme_n = n
        w_max, w_min = r[:, 3].max(initial=-INF), r[:, 4].min(initial=INF)
        masked_tokens, rejected = sums[5], r[:, 8] @ called
        seq = r[:, 2] / (n_row + 1e-8)
    else:  # the row levels: one log weight per row
        lw = r[:, 2]
        bounded = np.minimum(np.maximum(lw, -SAFETY_BOUND), SAFETY_BOUND)
        wn = np.exp(bounded) * n_row
        log_lower, log_upper = math.log(lower) if lower > 0 else -INF, math.log(upper)
        d = np.expm1(np.minimum(np.maximum(bounded, log_lower), log_upper))
        dn = d * n_row
        mean_w, shifted, shifted_sq = wn.sum(), dn.sum(), dn @ d
        per = called if level == 1 else n_row  # the sequence level counts rows, the geometric level tokens
        per_n, extreme_n = per.sum(), called.sum()
        above, below = (lw > log_upper) @ per, (lw < log_lower) @ per
        # max / min from the unclamped log ratios, over all rows of the calls with a token (the seed's choice)
        of_calls = lw if extreme_n == len(lw) else lw[called > 0]
        w_max = np.exp(np.minimum(of_calls.max(initial=-INF), SAFETY_BOUND))
        w_min = np.exp(of_calls.min(initial=INF))
        masked_tokens, rejected = r[:, 3] @ n_row, r[:, 3] @ called
        seq = wn / (n_row + 1e-8)
    seq = seq[n_row > 0]
    return (mean_w, shifted, shifted_sq, above, below, per_n, extreme_n,
            masked_tokens * masked, n * masked, rejected * masked, called.sum() * masked,
            seq.sum(), seq @ seq, np.count_nonzero(seq > upper), np.count_nonzero(seq < lower),
            w_max, w_min, seq.max(initial=-INF), seq.min(initial=INF), np.abs(seq - 1.0).max(initial=-INF), masked)
