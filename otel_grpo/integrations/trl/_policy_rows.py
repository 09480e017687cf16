"""The host half of the micro-batches' policy stats: the per-row table's columns, every policy stat finished
from every rank's rows, and each sample row's loss-pass numbers. No torch: `policy_values` may run in the
telemetry process (`_logged`); `_micro_batch` makes the table on the device.

    values, invalid = policy_values(settings, rows)  # every policy stat from every rank's rows (flat)
    numbers = row_numbers(row)                       # one first-pass row's sample diagnostics
    attach(rows, segments)                           # this rank's first-pass rows to their sample batches
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Sequence

from ...signals._summaries import LENGTH_BUCKETS, bucket_labels
from ._settings import TrlSettings

# The table's columns, per row. Counts of tokens (exact in float64):
COUNTS = ("tokens", "low", "high", "region", "dual", "neg_adv", "pos_adv")
# sums over the row's tokens (0 on padding; the b_ ones against the behaviour policy, the sampler's
# log-probs with vLLM, else pi_old), NaN where the micro-batch lacks the tensor (no reference, no entropy;
# `kind` says which, as a NaN of the data itself must not read as absent):
SUMS = ("ratio", "log_ratio_sq", "log_ratio_clamped", "log_ratio", "advantage", "b_log_ratio", "b_weight",
        "k3", "ref_log_ratio", "ref", "k3_ratio", "entropy")
# maxes over the row's tokens (-inf for a row without tokens; -ratio's max is the ratio's min):
MAXES = ("ratio_max", "neg_ratio_max", "b_abs_log_ratio_max", "b_weight_max", "k3_max")
# the row's position in its generation batch on that batch's first loss pass (-1 on later passes), and its
# micro-batch's kind: the sum of the `KIND_*` flags of what it had
COLUMNS = COUNTS + SUMS + MAXES + ("position", "kind")
KIND_REF, KIND_ENTROPY, KIND_TOKEN_ADVANTAGES = 1, 2, 4
C = {name: i for i, name in enumerate(COLUMNS)}
TABLE = "trl_policy"
"""The table's name in `Stats.add_table` / `ReducedStats.tables`."""

CLIP_KEYS = ("clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean", "clip_ratio_low_min",
             "clip_ratio_high_max")


def policy_values(settings: TrlSettings, table: Sequence[float]) -> tuple[dict[str, float], set[str]]:
    """Every policy stat of the rows of every rank (`policy_table`'s, flat from the host copy): (values, keys
    with no valid element). Means are over tokens (`kl_seq_mean`, `kl_k1_seq_mean`: over rows with tokens),
    `clip_ratio_low_min` / `clip_ratio_high_max` over the rows' clip fractions, `kl_by_length/<bucket>` over
    the tokens of the rows whose length falls in the bucket; the keys of `signals.policy_stats`, less the token
    clips where TRL clips none (`loss_type`) or clips sequences (then TRL's sequence clips), plus TRL's `kl`.
    Columns are slices of the flat table and sums `math.fsum`s of them: C loops, not Python ones per row."""
    out: dict[str, float] = {}
    invalid: set[str] = set()

    def mean(key: str, total: float, count: float) -> None:
        if count > 0:
            out[key] = total / count
        else:
            invalid.add(key)

    def extreme(key: str, values: Sequence[float], pick, valid: bool) -> None:
        """`pick` of `values` (rows without tokens hold -inf in max columns: never picked while `valid`)."""
        if not valid:
            invalid.add(key)
        elif sum(values) != sum(values) and any(v != v for v in values):  # NaN wins, as in torch's max
            out[key] = math.nan  # (Python's min and max would depend on the order)
        else:
            out[key] = pick(values)

    width = len(COLUMNS)
    col = {name: table[j::width] for j, name in enumerate(COLUMNS)}
    fsum = math.fsum
    tokens = col["tokens"]
    n = fsum(tokens)
    for key, name in (("clip_ratio_low_mean", "low"), ("clip_ratio_high_mean", "high"),
                      ("clip_ratio_region_mean", "region"), ("dual_clip_fraction", "dual"),
                      ("policy_ratio_mean", "ratio"), ("advantage_token_mean", "advantage")):
        mean(key, fsum(col[name]), n)
    mean("approx_kl", fsum(col["log_ratio_sq"]) * 0.5, n)
    mean("ppo_kl", -fsum(col["log_ratio_clamped"]), n)
    if settings.clipped and not settings.sequence:
        fractions = [(lo / t, hi / t) for lo, hi, t in zip(col["low"], col["high"], tokens) if t > 0]
        extreme("clip_ratio_low_min", [lo for lo, _ in fractions], min, n > 0)
        extreme("clip_ratio_high_max", [hi for _, hi in fractions], max, n > 0)
    else:  # TRL clipped no token ratio: the token-level fractions would be of nothing it did
        for key in CLIP_KEYS[:3]:
            out.pop(key, None)
            invalid.discard(key)
        if settings.clipped:  # it clipped sequences
            _sequence_clips(settings, col, mean, extreme)
    extreme("policy_ratio_min", col["neg_ratio_max"], lambda v: -max(v), n > 0)
    extreme("policy_ratio_max", col["ratio_max"], max, n > 0)
    with_ref = _rows_of(col, KIND_REF)
    if with_ref is not None:
        _reference(settings, with_ref, mean, extreme, out)
    with_entropy = _rows_of(col, KIND_ENTROPY)
    if with_entropy is not None:
        mean("entropy", fsum(with_entropy["entropy"]), fsum(with_entropy["tokens"]))
    return out, invalid


def _rows_of(col: dict[str, Sequence[float]], flag: int) -> dict[str, Sequence[float]] | None:
    """`col` restricted to the rows whose micro-batch had `flag` (`col` itself when all had: one run, one kind);
    None when none had."""
    has = [int(k) & flag for k in col["kind"]]
    if all(has):
        return col
    if not any(has):
        return None
    return {name: [x for x, h in zip(values, has) if h] for name, values in col.items()}


def _reference(settings: TrlSettings, col: dict, mean, extreme, out: dict[str, float]) -> None:
    """The KL-to-reference stats over `col`'s rows (those whose micro-batch had the reference), and TRL's `kl`:
    k3 times the policy ratio with `use_bias_correction_kl` (the sequence's ratio at the sequence level)."""
    fsum, tokens, k3 = math.fsum, col["tokens"], col["k3"]
    n = fsum(tokens)
    rows = sum(t > 0 for t in tokens)  # with tokens
    kl, k1 = fsum(k3), -fsum(col["ref_log_ratio"])
    mean("kl", kl, n)
    mean("kl_k1", k1, n)
    mean("ref_logp_mean", fsum(col["ref"]), n)
    mean("kl_seq_mean", kl, rows)  # rows without tokens sum to 0
    mean("kl_k1_seq_mean", k1, rows)
    extreme("kl_max", col["k3_max"], max, n > 0)
    if not settings.use_bias_correction_kl:
        trl = kl
    elif settings.sequence:
        trl = fsum(k * math.exp(lr / max(t, 1.0)) for k, lr, t in zip(k3, col["log_ratio"], tokens))
    else:
        trl = fsum(col["k3_ratio"])
    mean("trl_kl", trl, n)
    buckets = [[0.0] * (len(LENGTH_BUCKETS) + 1) for _ in range(2)]  # kl, tokens per bucket (the last open)
    for k, t in zip(k3, tokens):
        b = bisect.bisect_left(LENGTH_BUCKETS, t)  # torch.bucketize's: length <= the bucket's bound
        buckets[0][b] += k
        buckets[1][b] += t
    for label, kl_b, n_b in zip(bucket_labels(), *buckets):
        mean(f"kl_by_length/{label}", kl_b, n_b)
        out[f"kl_by_length_tokens/{label}"] = n_b


def _sequence_clips(settings: TrlSettings, col: dict, mean, extreme) -> None:
    """TRL's clip ratios with `importance_sampling_level="sequence"` (GSPO, luspo): the sequence's ratio
    exp(mean over its tokens of log pi_theta - log pi_old) is clipped, so each sequence counts once, those
    without tokens included (TRL's means divide by the number of sequences); with per-token advantages the
    sequence's ratio meets each token's advantage, and the means are over tokens, as TRL's."""
    tokens, log_ratio = col["tokens"], col["log_ratio"]
    low_at, high_at = 1.0 - settings.epsilon_low, 1.0 + settings.epsilon_high
    flags = []  # per row: (low, high) as counts of the tokens (per-token advantages) or 0/1 (one per sequence)
    per_token = any(int(k) & KIND_TOKEN_ADVANTAGES for k in col["kind"])  # one shape per run: TRL's
    cap = math.inf if settings.delta is None else settings.delta  # TRL's two-sided bound, as on tokens
    for i, t in enumerate(tokens):
        weight = min(math.exp(log_ratio[i] / max(t, 1.0)), cap)
        neg, pos = col["neg_adv"][i], col["pos_adv"][i]
        if not per_token:  # the sequence's advantage: each of its tokens carries it
            neg, pos = float(neg > 0), float(pos > 0)
        flags.append((neg if weight < low_at else 0.0, pos if weight > high_at else 0.0))
    if per_token:
        count = math.fsum(tokens)
        fractions = [(lo / t, hi / t) for (lo, hi), t in zip(flags, tokens) if t > 0]  # a row without tokens: none
    else:
        count = float(len(tokens))
        fractions = flags
    lows, highs = [lo for lo, _ in flags], [hi for _, hi in flags]
    mean("clip_ratio_low_mean", math.fsum(lows), count)
    mean("clip_ratio_high_mean", math.fsum(highs), count)
    mean("clip_ratio_region_mean", math.fsum(lows) + math.fsum(highs), count)  # a ratio clips one side at most
    extreme("clip_ratio_low_min", [lo for lo, _ in fractions], min, bool(fractions))
    extreme("clip_ratio_high_max", [hi for _, hi in fractions], max, bool(fractions))


def row_numbers(row: Sequence[float]) -> dict[str, float]:
    """One row's loss-pass numbers for its sample (`signals.sample_diagnostics`' columns): means over its tokens
    and maxes of the log ratio and IS weight against the behaviour policy, of k3 to the reference and of the
    entropy; none for a row without tokens, none of a tensor its micro-batch lacked."""
    n, kind = row[C["tokens"]], int(row[C["kind"]])
    if not n > 0:
        return {}
    out = {"log_ratio_mean": row[C["b_log_ratio"]] / n, "log_ratio_absmax": row[C["b_abs_log_ratio_max"]],
           "is_weight_mean": row[C["b_weight"]] / n, "is_weight_max": row[C["b_weight_max"]]}
    if kind & KIND_REF:
        out |= {"kl_ref_mean": row[C["k3"]] / n, "kl_ref_max": row[C["k3_max"]]}
    if kind & KIND_ENTROPY:
        out["entropy_mean"] = row[C["entropy"]] / n
    return {k: v for k, v in out.items() if v == v}  # a NaN goes out as no value, as sample_diagnostics' columns


def attach(table: Any, segments: Sequence[tuple[int, Any]]) -> None:
    """Give each first-pass micro-batch's rows to their sample batch: `table` is this rank's rows ([rows, K]
    numpy), `segments` the (row count, generation batch or None) of each micro-batch behind them, in the same
    order. One slice a micro-batch: the rows' numbers are made later (`SampleBatch.numbers`: `row_numbers`)."""
    at = 0
    for count, batch in segments:
        if batch is not None:
            batch.loss_rows.append(table[at : at + count])
        at += count
