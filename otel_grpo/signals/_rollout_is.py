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
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from . import _validate as v
from ._masked import INF, SAFETY_BOUND, RowSums, TokenMask, rows_above, rows_below, workspace
from ._mismatch import Shared, add_table, mismatch_columns
from ._partial import Stats
LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask", "both")
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
    tok = _Tokens.of(train, rollout, TokenMask(m, "mask", stats, dtype), internal=with_mismatch or level != "token")
    rs = RowSums(stats)  # every sum over rows of the call in a few reductions, at the end
    # seed 004's per-rank `valid` (this rank has a token), as a fraction of ranks
    stats.add_mean("rollout_is_valid", torch.clamp(tok.tm.n, max=1.0), 1.0)
    vetoed = _veto(rs, tok, veto)  # first: the mismatch pass uses up the log ratios
    if with_mismatch:  # before anything lifts padding to inf
        # the token path returns the ratios as its weights (a fresh tensor); the row paths do not
        tok.shared = mismatch_columns(tok.tm, train, tok.log_ratio, fresh=level == "token")
    step = _token_level if level == "token" else _row_level
    weights, keep = step(rs, tok, bounds, mask_bounds, mode, level)  # 0 on padding
    if tok.shared is not None and level != "token":  # the token path adds them from its own weights
        rho_tok = tok.shared.weights.mul_(tok.tm.mf)
        add_table(stats, tok.tm, tok.shared, rho_tok, rho_tok.sum(-1), rho_tok.amax(-1), None)
    rs.flush()
    if keep is None and vetoed is None:
        return RolloutCorrection(weights, mask, stats)  # nothing rejected: the caller's mask as is
    if level != "token":  # [B] kept rows, the veto folded in: one [B, T] pass
        kept = ~vetoed if keep is None else keep if vetoed is None else keep & ~vetoed
        keep = kept.unsqueeze(-1).to(tok.tm.mf.dtype)
    elif vetoed is not None:  # fold the per-sequence veto into the keep factor: one [B, T] pass
        kept_rows = (~vetoed).unsqueeze(-1).to(tok.tm.mf.dtype)
        keep = kept_rows if keep is None else keep * kept_rows
    new_mask = tok.tm.mf * keep
    return RolloutCorrection(weights, new_mask if new_mask.dtype == mask.dtype else new_mask.to(mask.dtype), stats)


@dataclass(slots=True)
class _Tokens:
    """The shared [B, T] / [B] intermediates of one call."""

    log_ratio: Tensor  # [B, T] log pi_train - log pi_rollout, exactly 0 on padding (used up by add_mismatch)
    tm: TokenMask
    all_rows: Tensor  # 0-d float64: B, or 0 when no row has a token
    shared: Shared | None = None  # with_mismatch: the mismatch pass's row sums and token ratios

    @classmethod
    def of(cls, train: Tensor, rollout: Tensor, tm: TokenMask, internal: bool) -> _Tokens:
        """`internal`: the log ratios' buffer never leaves the call (a workspace buffer)."""
        out = workspace("log_ratio", tm.mf, tm.mf.dtype) if internal else torch.empty_like(tm.mf)
        # the seed sees 0 on padding (packed sequences padded with 0): so do we
        log_ratio = tm.zero_(torch.sub(train, rollout, out=out))
        return cls(log_ratio, tm, tm.all_rows())


def _veto(rs: RowSums, tok: _Tokens, veto) -> Tensor | None:
    """Veto stats; [B] True for sequences with a token ratio outside `veto` (None: no veto)."""
    stats, tm = rs.stats, tok.tm
    rows = tm.k()
    if veto is None:  # the seed reports zeros without a veto
        zero = 0.0 * tm.n
        stats.add_mean("rollout_is_veto_fraction", zero, rows)
        stats.add_mean("rollout_is_catastrophic_token_fraction", zero, tm.n)
        return None
    log_lower = math.log(veto[0]) if veto[0] > 0 else -INF
    log_upper = math.log(veto[1])
    x = tok.log_ratio
    if not log_lower <= 0.0 <= log_upper:  # padding's 0 would be catastrophic: move it inside
        x = torch.sub(1.0, tm.mf).mul_((max(log_lower, -1e30) + log_upper) / 2).add_(x)
    # per-row counts of tokens outside [log_lower, log_upper] (exact integers in float): x differs
    # from its clamp exactly there; NaN stays NaN (as the row's count), like -inf - -inf with no lower bound
    s = tm.scratch
    bad_row = torch.sub(x, torch.clamp(x, log_lower, log_upper, out=s), out=s).abs_().sign_().sum(-1)
    vetoed = bad_row > 0  # [B]
    rs.mean("rollout_is_veto_fraction", vetoed, rows)
    rs.mean("rollout_is_catastrophic_token_fraction", bad_row, tm.n)
    return vetoed


def _token_level(rs: RowSums, tok: _Tokens, bounds, mask_bounds, mode: str, level: str):
    """rho_t = exp(clamp(log ratio, +-20)); metrics straight from the weights.

    Works in place on the ratios' buffer (which becomes the returned weights) and
    the mask's scratch buffer; the token weights get a fresh tensor only in mask
    mode, where they are returned, and a workspace buffer otherwise.
    """
    lower, upper = bounds
    stats, tm, s = rs.stats, tok.tm, tok.tm.scratch
    n = tm.n
    if tok.shared is None:
        w = tok.log_ratio.clamp_(-SAFETY_BOUND, SAFETY_BOUND).exp_()  # 1 on padding
    else:  # the same values (exp is monotonic), computed once by the mismatch pass
        w = tok.shared.weights
    # +0 on padding: never above a (positive) upper bound; returned as the weights in mask mode only
    w_tok = torch.mul(w, tm.mf, out=torch.empty_like(w) if mode == "mask" else workspace("w_tok", w, w.dtype))
    row_sum = w_tok.sum(-1)
    w_max_row = w_tok.amax(-1)
    w_max = w_max_row.amax()
    rs.mean("rollout_is_mean", row_sum, n)
    rs.mean("rollout_is_ratio_fraction_high", rows_above(w_tok, upper, s), n)
    stats.add_max("rollout_is_max", w_max, n)
    tm.inf_(w)  # +inf on padding: never below a lower bound
    rs.mean("rollout_is_ratio_fraction_low", rows_below(w, lower, s), n)
    w_min_row = w.amin(-1)
    stats.add_min("rollout_is_min", w_min_row.amin(), n)
    if tok.shared is not None:  # over tokens, rollout_is_mean/max/min are is_ratio_mean/max/min
        add_table(stats, tm, tok.shared, w_tok, row_sum, w_max_row, w_min_row)
    keep = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        row_rejected = (w_tok.amax(-1) > mup) | (w.amin(-1) < mlow)
        rs.mean("rollout_is_masked_fraction", rows_above(w_tok, mup, s) + rows_below(w, mlow, s), n)
        # the seed: a row with any rejected token, averaged over all rows
        rs.mean("rollout_is_seq_masked_fraction", row_rejected, tok.all_rows)
        keep = (w >= mlow) & (w_tok <= mup)  # padding kept; the mask zeroes it anyway
    clamped_tok = w.clamp_(lower, upper).mul_(tm.mf)  # in place; w_tok keeps the unclamped weights
    shifted = torch.sub(clamped_tok, tm.mf, out=s)  # w - 1 on tokens, 0 on padding: see _add_spread
    _spread(rs, shifted.sum(-1), shifted.mul_(shifted).sum(-1), n)
    _per_sequence(rs, row_sum / tm.den(), tm, bounds)
    # mask mode: weights stay safety-bounded only (the seed clamps in truncate modes)
    return (w_tok if mode == "mask" else clamped_tok), keep


def _row_level(rs: RowSums, tok: _Tokens, bounds, mask_bounds, mode: str, level: str):
    """One weight per sequence from the summed (sequence) or averaged (geometric) log ratio.

    Everything here is [B]: the per-row log-ratio sums come from the log-ratio pass (or the
    mismatch pass), every sum over rows is queued on `rs` (one float64 reduction), and the
    weights become [B, T] only once, as the returned tensor.
    """
    lower, upper = bounds
    stats, tm = rs.stats, tok.tm
    n_row, all_rows = tm.n_row, tok.all_rows
    log_w = tok.log_ratio.sum(-1) if tok.shared is None else tok.shared.ratio_row  # [B]; 0 for rows without tokens
    den = tm.den()
    if level == "geometric":
        log_w = log_w / den
    w = log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()  # [B]
    # max / min / fractions from the unclamped log ratios, over all rows (the seed's choice)
    log_min, log_max = torch.aminmax(log_w)
    stats.add_max("rollout_is_max", log_max.clamp(max=SAFETY_BOUND).exp(), all_rows)
    stats.add_min("rollout_is_min", log_min.exp(), all_rows)
    flags = [log_w > math.log(upper), log_w < (math.log(lower) if lower > 0 else -INF)]  # high, low
    clamped = w.clamp(lower, upper)
    # clamped - 1 for the spread (see _add_spread), from the log weights: expm1 keeps its digits near 0
    log_lower = math.log(lower) if lower > 0 else -INF
    shifted = torch.expm1(log_w.clamp(-SAFETY_BOUND, SAFETY_BOUND).clamp(log_lower, math.log(upper)))
    keep = None
    if mode in ("mask", "both"):
        mlow, mup = mask_bounds
        keep = (w >= mlow) & (w <= mup)  # [B]
        flags.append(~keep)  # rejected
    flags_f = torch.stack(flags).to(w.dtype)  # [F, B]: high, low (, rejected)
    # token-weighted rows: w, clamped - 1, (clamped - 1)^2, then the geometric fractions and the rejections
    weighted = [torch.stack([w, shifted, shifted * shifted])]
    weighted.append(flags_f if level == "geometric" else flags_f[2:])
    weighted = torch.cat(weighted).mul_(n_row)
    masked = keep is not None
    rs.block(lambda *sums: _add_row_level(stats, tm, level, masked, sums), weighted)
    if level == "sequence":  # the fractions over all rows
        rs.mean("rollout_is_ratio_fraction_high", flags[0], all_rows)
        rs.mean("rollout_is_ratio_fraction_low", flags[1], all_rows)
    if keep is not None:
        rs.mean("rollout_is_seq_masked_fraction", flags[2], all_rows)
    _per_sequence(rs, w * n_row / den, tm, bounds)
    weights = clamped if mode in ("truncate", "both") else w
    return weights.unsqueeze(-1) * tm.mf, keep


def _add_row_level(stats: Stats, tm: TokenMask, level: str, masked: bool, sums) -> None:
    """The token-weighted row-level stats from the sums of `_row_level`'s weighted rows."""
    n = tm.n
    stats.add_mean("rollout_is_mean", sums[0], n)
    _add_spread(stats, sums[1], sums[2], n)
    if level == "geometric":
        stats.add_mean("rollout_is_ratio_fraction_high", sums[3], n)
        stats.add_mean("rollout_is_ratio_fraction_low", sums[4], n)
    if masked:
        stats.add_mean("rollout_is_masked_fraction", sums[-1], n)


def _spread(rs: RowSums, rows: Tensor, squares: Tensor, n: Tensor) -> None:
    """Population std and ESS of the threshold-clamped weights ([B] per-row sums of w - 1 and (w - 1)^2 in)."""
    rs.call(lambda total_, sumsq: _add_spread(rs.stats, total_, sumsq, n), rows, squares)


def _add_spread(stats: Stats, shifted: Tensor, shifted_sq: Tensor, n: Tensor) -> None:
    """Std and ESS from the sums of d = w - 1 and d^2 (float64, over ranks alike).

    The weights sit near 1, so E[w^2] - E[w]^2 cancels nearly all its digits: at a mismatch of
    1e-2 the std came out 7% low. The variance does not move with a shift, and E[d^2] - E[d]^2
    keeps them. ESS has no such cancellation; it takes sum w = sum d + n, sum w^2 = sum d^2 + 2 sum d + n.
    """
    stats.add_std("rollout_is_std", shifted, shifted_sq, n, unbiased=False)
    total_ = shifted + n
    stats.add_ess("rollout_is_eff_sample_size", total_, shifted_sq + shifted + total_, n)


def _per_sequence(rs: RowSums, seq_w: Tensor, tm: TokenMask, bounds: tuple[float, float]) -> None:
    """Stats over sequences with tokens of the per-sequence mean weight [B] (unbiased std)."""
    lower, upper = bounds
    stats, rows, k = rs.stats, tm.rows, tm.k()
    x = torch.where(rows, seq_w, 0.0).to(_F64)
    # sums and squares (float64) and the fractions (bool), summed with the call's other rows
    rs.call(lambda *sums: _add_per_sequence(stats, k, *sums), x, x * x, (seq_w > upper) & rows, (seq_w < lower) & rows)
    # max of -w is -(min of w), exactly
    extremes = torch.stack([seq_w, seq_w.neg(), (seq_w - 1.0).abs()]).where(rows, -INF).amax(-1).to(_F64)
    seq_max, neg_min, deviation = extremes.unbind()
    stats.add_max("rollout_is_seq_max", seq_max, k)
    stats.add_min("rollout_is_seq_min", -neg_min, k)
    stats.add_max("rollout_is_seq_max_deviation", deviation, k)


def _add_per_sequence(stats: Stats, k: Tensor, total_: Tensor, sumsq: Tensor, high: Tensor, low: Tensor) -> None:
    stats.add_mean("rollout_is_seq_mean", total_, k)
    stats.add_std("rollout_is_seq_std", total_, sumsq, k, unbiased=True)
    stats.add_mean("rollout_is_seq_fraction_high", high, k)
    stats.add_mean("rollout_is_seq_fraction_low", low, k)
