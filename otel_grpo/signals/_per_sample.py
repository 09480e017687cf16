"""Per-completion diagnostics: token-level numbers of each completion, as sample-table columns.

    >>> stats = stats | signals.sample_diagnostics(mask, logprobs=old_lp, rollout_logprobs=rollout_lp,
    ...                                            ref_logprobs=ref_lp, entropy=ent, truncated=truncated)
    >>> reduced = signals.reduce_stats(stats, accelerator)      # the same one collective and host copy
    >>> rows = [{**r, **d} for r, d in zip(rows, reduced.column_rows(rank, world))]

Which completions drove a step's KL spike or IS blow-up is then a sort of the sample table.
Everything stays on the device; the columns travel in `reduce_stats`' one pack.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _validate as v
from ._masked import as_f64
from ._partial import Stats

_F64 = torch.float64
_NAN = float("nan")


class _Rows:
    """Where each input row's numbers go: to itself, or pooled into its sample's row (`rows`, `size`)."""

    def __init__(self, n: Tensor, rows: Tensor | None, size: int | None) -> None:
        self.rows, self.size = rows, size
        self.n = n if rows is None else self.sum(n.unsqueeze(0))[0]  # tokens per output row

    def sum(self, per_row: Tensor) -> Tensor:
        """[K, N] -> [K, size]: summed over the input rows of each sample."""
        if self.rows is None:
            return per_row
        return per_row.new_zeros(per_row.shape[0], self.size).index_add_(1, self.rows, per_row)

    def max(self, per_row: Tensor) -> Tensor:
        if self.rows is None:
            return per_row
        index = self.rows.expand(per_row.shape[0], -1)
        return per_row.new_full((per_row.shape[0], self.size), -torch.inf).scatter_reduce_(1, index, per_row, "amax")


def _row_means(stats: Stats, columns: dict[str, Tensor], m: Tensor, out: _Rows) -> None:
    """Masked mean per row of each [B, T] tensor, as columns; NaN for a row without tokens. One set of ops for
    all of them (on a batch's small tensors each op costs more in dispatch than in arithmetic)."""
    if columns:
        means = out.sum((torch.stack(list(columns.values())) * m).sum(-1)) / out.n.clamp(min=1)
        for name, mean in zip(columns, torch.where(out.n > 0, means, _NAN).unbind()):
            stats.add_column(name, mean)


def _row_maxes(stats: Stats, columns: dict[str, Tensor], pad: Tensor, out: _Rows) -> None:
    """Masked max per row of each [B, T] tensor, as columns; NaN for a row without tokens."""
    if columns:
        maxes = out.max(torch.stack(list(columns.values())).masked_fill(pad, -torch.inf).amax(-1))
        for name, high in zip(columns, torch.where(out.n > 0, maxes, _NAN).unbind()):
            stats.add_column(name, high)


@torch.no_grad()
def sample_diagnostics(
    mask: Tensor,
    *,
    logprobs: Tensor | None = None,
    rollout_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    truncated: Tensor | None = None,
    rows: Tensor | None = None,
    size: int | None = None,
) -> Stats:
    """Columns per completion (row) from `[B, T]` tensors and `mask` [B, T] (1: a completion token).

    - `completion_length`: tokens in the mask.
    - `length_clipped`: 1 if the completion hit the length limit (`truncated` [B]).
    - `log_ratio_mean`, `log_ratio_absmax`: log pi_train - log pi_rollout per token (`logprobs`,
      `rollout_logprobs`): mean, and the largest magnitude;
      `is_weight_mean`, `is_weight_max`: the token IS weight exp(log ratio), mean and max.
    - `kl_ref_mean`, `kl_ref_max`: the k3 estimator of KL(pi_train || pi_ref) per token
      (`ref_logprobs`), as the step's `kl`: mean and max.
    - `entropy_mean`: mean token entropy (`entropy`, nats).

    A row without tokens gets no value (NaN here, None in the row). Pure torch, no host read.

    `rows` [B] (int64) and `size`: the inputs are the passes of an update, input row i read sample
    `rows[i]` of `size` (in any order, a sample in as many passes as read it). Each column is then
    pooled per sample over its passes as the step's `kl` and `entropy` pool them (means over all its
    tokens in every pass, maxes over them), so the samples' token-weighted mean is the step's value
    and sorting them shows what drove it. The generation's columns (`completion_length`,
    `length_clipped`) belong to a call without `rows`.
    """
    stats = Stats()
    m = v.binary(mask, "mask", stats, dim=2).to(_F64)
    tensors = {name: as_f64(v.floating(x, name, shape=mask.shape))
               for name, x in (("logprobs", logprobs), ("rollout_logprobs", rollout_logprobs),
                               ("ref_logprobs", ref_logprobs), ("entropy", entropy)) if x is not None}
    pad = m == 0
    if rows is not None:
        if truncated is not None:
            raise ValueError("truncated: a generation column, not pooled over passes; pass it without rows")
        if rows.shape != mask.shape[:1] or rows.dtype != torch.int64 or size is None or size < 1:
            raise ValueError(f"rows must be int64 of shape {tuple(mask.shape[:1])} with a size >= 1, "
                             f"got {rows.dtype} {tuple(rows.shape)} and size {size!r}")
    out = _Rows(m.sum(1), rows, size)
    if rows is None:
        stats.add_column("completion_length", out.n)
    if truncated is not None:
        stats.add_column("length_clipped", v.binary(truncated, "truncated", stats, shape=mask.shape[:1]).to(_F64))
    means: dict[str, Tensor] = {}
    maxes: dict[str, Tensor] = {}
    lp = tensors.get("logprobs")
    if lp is not None and "rollout_logprobs" in tensors:
        r = (lp - tensors["rollout_logprobs"]).masked_fill(pad, 0.0)
        w = r.exp()
        means |= {"log_ratio_mean": r, "is_weight_mean": w}
        maxes |= {"log_ratio_absmax": r.abs(), "is_weight_max": w}
    if lp is not None and "ref_logprobs" in tensors:
        d = (tensors["ref_logprobs"] - lp).masked_fill(pad, 0.0)
        k3 = d.exp() - d - 1.0
        means["kl_ref_mean"], maxes["kl_ref_max"] = k3, k3
    if "entropy" in tensors:
        means["entropy_mean"] = tensors["entropy"]
    _row_means(stats, means, m, out)
    _row_maxes(stats, maxes, pad, out)
    return stats
