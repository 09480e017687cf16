"""Each sample row's own numbers (`signals.sample_diagnostics`) from its generation batch's first loss pass.

    batch.passes.append(micro_batch)          # a first-pass micro-batch; `rows`: its rows' positions
    columns = diagnose(settings, [a, b])      # Stats with one column per diagnostic, rows of a then of b

TRL shuffles a generation batch before splitting it into micro-batches, so each first-pass
micro-batch carries its rows' positions (`MicroBatch.rows`) and the rows are put back in
order on the device. The columns ride in the logged step's `reduce_stats` (no extra host
read) and are, per row: `completion_length`, `length_clipped` (from the generation), and
from that pass `log_ratio_mean/absmax` and `is_weight_mean/max` of pi_theta against the
behaviour policy (the sampler's log-probs with vLLM, else pi_old: 1 on-policy), `kl_ref_mean/max`
(k3 to the reference, when `beta != 0`) and `entropy_mean`. A row no pass reached (training
ended first) has only the generation's columns.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ... import signals
from ._generation import SampleBatch
from ._micro_batch import MicroBatch
from ._rows import cat_rows
from ._settings import TrlSettings


def diagnose(settings: TrlSettings, batches: Sequence[SampleBatch]) -> signals.Stats:
    """The batches' per-row diagnostics in one pass of torch ops (device ops only); the same columns for
    every batch of a run."""
    parts = [_in_row_order(settings, b) for b in batches]
    mask, logps, behaviour, ref, entropy = (
        None if parts[0][i] is None else cat_rows([p[i] for p in parts], False if i == 0 else 0.0) for i in range(5))
    truncated = torch.tensor([t for b in batches for t in b.truncated], dtype=torch.bool, device=mask.device)
    return signals.sample_diagnostics(mask, logprobs=logps, rollout_logprobs=behaviour, ref_logprobs=ref,
                                      entropy=entropy, truncated=truncated)


def _in_row_order(settings: TrlSettings, batch: SampleBatch) -> list[torch.Tensor | None]:
    """Mask, log-probs, behaviour log-probs, reference log-probs (None at beta 0) and entropy of the batch's
    rows in order, from its first-pass micro-batches (a row no pass reached: masked out)."""
    n = batch.values.shape[0]
    device = batch.values.device
    passes = batch.passes
    width = max((p.logps.shape[1] for p in passes), default=1)
    dtype = passes[0].logps.dtype if passes else torch.float32
    mask = torch.zeros(n, width, dtype=torch.bool, device=device)
    logps, behaviour = (torch.zeros(n, width, dtype=dtype, device=device) for _ in range(2))
    ref = torch.zeros(n, width, dtype=dtype, device=device) if settings.beta != 0.0 else None
    entropy = torch.full((n, width), math.nan, dtype=dtype, device=device)  # NaN: a pass without entropy
    for p in passes:
        rows, t = p.rows, p.logps.shape[1]
        mask[:, :t].index_copy_(0, rows, p.mask.bool())
        logps[:, :t].index_copy_(0, rows, p.logps.to(dtype))
        behaviour[:, :t].index_copy_(0, rows, _behaviour(p).to(dtype))
        if ref is not None and p.ref is not None:
            ref[:, :t].index_copy_(0, rows, p.ref.to(dtype))
        if p.entropy is not None:
            entropy[:, :t].index_copy_(0, rows, p.entropy.to(dtype))
    return [mask, logps, behaviour, ref, entropy]


def _behaviour(p: MicroBatch) -> torch.Tensor:
    """The policy that sampled the rows: the sampler's log-probs (vLLM; its unscored tokens: pi_old, as TRL),
    else pi_old."""
    if p.sampling is None:
        return p.old
    return torch.where(torch.isnan(p.sampling), p.old, p.sampling)
