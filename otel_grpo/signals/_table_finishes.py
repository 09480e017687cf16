"""The host finishes of the IS and mismatch tables (`Stats.add_table(..., finish=)`): each call's [B, K] rows
of every rank -> the stats, with numpy. No torch here: `GatheredStats.finish` may run them in the telemetry
process. The device halves (`_rollout_is`, `_mismatch`) make the tables these columns describe."""

from __future__ import annotations

import math

import numpy as np

from ._host import INF, SAFETY_BOUND, called_rows, ess_from_sums, std_from_sums

ROLLOUT_IS_TABLE = "rollout_is"
"""The per-row table's name (`Stats.add_table`)."""
ROLLOUT_IS_COLUMNS = ("n_row", "veto_row", "w_row", "w_max", "w_min", "high_row", "low_row", "masked_row", "rejected",
           "shifted_row", "shifted_sq_row")
"""Per row: tokens and tokens outside the veto band (0 without a veto); then at the token level the sum,
max and min (+inf without a token) of the token ratios, the tokens above the upper and below the lower
threshold, the tokens rejected by mask mode, whether the row has one, and the sums of w - 1 and (w - 1)^2
of the threshold-clamped ratios; at the row levels the row's log weight (summed or averaged log ratio)
and whether mask mode rejected the row (in the `w_max` column), the rest 0. Params a call: the level's
index in `LEVELS`, the thresholds, and 1.0 in mask or both mode."""

MISMATCH_TABLE = "mismatch"
"""The per-row table's name (`Stats.add_table`)."""
MISMATCH_COLUMNS = ("n_row", "train_row", "ratio_row", "abs_diff_row", "abs_diff_max", "k3_row", "rho_row", "rho_max",
           "rho_sq_row", "rho_min")
"""Per row: tokens, sums of log pi_train and of the log ratios, sum and max of |log ratio|, sum of the k3
terms, sum, max, sum of squares and min of the safety-bounded token ratios (+inf without a token). The
table's one param a call: 1.0 with rollout log-probs, 0.0 for `_training_perplexity` (only the first two
columns hold numbers there)."""


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
