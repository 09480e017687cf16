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

import torch
from torch import Tensor

from . import _validate as v
from . import _mismatch
from ._host import INF, SAFETY_BOUND
from ._masked import TokenMask, rows_above, rows_below, workspace
from ._partial import Stats
from ._table_finishes import ROLLOUT_IS_TABLE as TABLE
from ._table_finishes import finish_rollout_is

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
