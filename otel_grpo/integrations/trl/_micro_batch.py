"""The loss pass of one micro-batch, kept until the logged step, and one per-row table of several at once.

    table = policy_table(settings, micro_batches)    # device: [rows, len(COLUMNS)] float64, one pass of ops
    ...                                              # the logged step's one gather and host copy carry it
    values, invalid = policy_values(settings, rows)  # host (`_policy_rows`): every policy stat from every rank's rows
    numbers = row_numbers(row)                       # host (`_policy_rows`): one first-pass row's sample diagnostics
    stats = sampler_batch_stats(settings, first_passes)  # device: the sampler's sets where TRL has no pi_old

Every policy stat of a micro-batch (clip ratios, policy ratio, approx KL, KL to the reference, TRL's
KL, entropy) and every loss-pass number of a sample row is a sum, a count or an extreme over a
row's tokens, finished by plain arithmetic. So the device computes one table of per-row sums,
counts and maxes (about 40 torch ops for all the micro-batches of a logged step, where
finalizing each stat on the device took a few ops per key), and the host finishes each stat
from the rows of every rank: the per-row numbers do not depend on how rows are split over
micro-batches or ranks, and `math.fsum` sums them correctly rounded in any order, so two
ranks give one process's numbers bit for bit.

The token quantities are float64 (the inputs converted once): the precision the sample
diagnostics always had, now shared by the step's policy stats, which summed each row in the
inputs' float32 before.
Plain tensors and `TrlSettings` in: tested without TRL (`_capture` builds the batches).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from ... import signals
from ...signals._host import SAFETY_BOUND
from ._policy_rows import COLUMNS, COUNTS, KIND_ENTROPY, KIND_REF, KIND_TOKEN_ADVANTAGES, C
from ._rows import cat_rows, held_bytes
from ._sampler import sampler_stats
from ._settings import TrlSettings

if TYPE_CHECKING:
    from ._generation import SampleBatch

_F64 = torch.float64
CLIP_C = 3.0
"""verl's dual-clip bound (`signals.policy_stats`' `clip_ratio_c` default) of `dual_clip_fraction`."""


@dataclass(slots=True)
class MicroBatch:
    """What the policy stats need of one micro-batch's loss pass (TRL's tensors, detached, on device); all [B, T]
    but `advantages` ([B] or [B, T])."""

    logps: Tensor
    """log pi_theta of the loss pass."""
    old: Tensor
    """log pi_old (TRL's `old_per_token_logps`, else `logps`: TRL's pi_old when it skipped computing it)."""
    advantages: Tensor
    mask: Tensor
    """Completion (and tool) tokens, as TRL's loss masks them: 0/1 or bool."""
    ref: Tensor | None = None
    entropy: Tensor | None = None
    sampling: Tensor | None = None
    """The sampler's log-probs (vLLM's or a `rollout_func`'s), NaN where it scored no token."""
    rows: Tensor | None = None
    """[B] int64: each row's position in its generation batch, on the batch's first pass (else None)."""
    batch: SampleBatch | None = None
    """The generation batch whose first pass this is (its rows get this pass's numbers), else None."""
    measures_sampler: bool = False
    """Its rows' mismatch and rollout-IS sets are measured here (`sampler_batch_stats`): a first pass with the
    sampler's log-probs where TRL computed no pi_old, so `logps` are the policy TRL's loss takes for it."""

    @property
    def kind(self) -> tuple:
        """Micro-batches of one kind are concatenated: the same optional tensors and advantage shape."""
        return (self.ref is not None, self.entropy is not None, self.sampling is not None, self.advantages.dim(),
                self.measures_sampler)

    @property
    def nbytes(self) -> int:
        return held_bytes(self.logps, self.old, self.advantages, self.mask, self.ref, self.entropy, self.sampling)


def policy_table(settings: TrlSettings, batches: Sequence[MicroBatch]) -> Tensor:
    """[sum B, len(COLUMNS)] float64: the per-row sums, counts and maxes of micro-batches of one kind, in one
    pass of torch ops over their concatenation (each op on a micro-batch's tensors costs more in dispatch
    than in arithmetic). Device ops only.

    As TRL: a token is low-clipped when ratio < 1 - eps_low and its advantage is negative, high-clipped when
    ratio > 1 + eps_high and the advantage positive, the ratio capped at `delta` for both tests where TRL caps
    it; dual-clipped when ratio > 3 with a negative advantage.
    k3 = exp(r) - r - 1 with r = log pi_ref - log pi_theta."""
    first = batches[0]
    m = cat_rows([b.mask for b in batches], 0).bool()  # padding: not a completion token
    pad = ~m
    logps = cat_rows([b.logps for b in batches], 0.0).to(_F64)
    old = cat_rows([b.old for b in batches], 0.0).to(_F64)
    adv = cat_rows([b.advantages for b in batches], 0.0).to(_F64)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    log_ratio = (logps - old).masked_fill_(pad, 0.0)
    ratio = log_ratio.exp()  # exactly 1 on padding: inside the clip range and below CLIP_C, so no flag there
    negative, positive = adv < 0, adv > 0
    # TRL flags the ratio its loss reads: capped at delta (two-sided GRPO) before the clip test
    flagged = ratio if settings.delta is None else ratio.clamp(max=settings.delta)
    low = (flagged < 1.0 - settings.epsilon_low) & negative
    high = (flagged > 1.0 + settings.epsilon_high) & positive
    dual = (ratio > CLIP_C) & negative
    counts = torch.stack([m, low, high, low | high, dual, negative & m, positive & m]).sum(-1)  # [7, B] int64

    ratio_m = torch.where(m, ratio, 0.0)
    sums = {"ratio": ratio_m, "log_ratio_sq": log_ratio.square(),
            "log_ratio_clamped": log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND), "log_ratio": log_ratio,
            "advantage": torch.where(m, adv, 0.0)}
    b_log_ratio, b_weight = log_ratio, ratio_m  # on-policy sampling: the behaviour policy is pi_old
    if first.sampling is not None:  # vLLM's unscored tokens: pi_old, as TRL
        sampling = cat_rows([b.sampling for b in batches], 0.0).to(_F64)
        b_log_ratio = (logps - torch.where(torch.isnan(sampling), old, sampling)).masked_fill_(pad, 0.0)
        b_weight = torch.where(m, b_log_ratio.exp(), 0.0)
    sums |= {"b_log_ratio": b_log_ratio, "b_weight": b_weight}
    maxes = {"ratio_max": ratio, "neg_ratio_max": ratio.neg(), "b_abs_log_ratio_max": b_log_ratio.abs(),
             "b_weight_max": b_weight}
    if first.ref is not None:
        ref = cat_rows([b.ref for b in batches], 0.0).to(_F64)
        r = (ref - logps).masked_fill_(pad, 0.0)
        k3 = r.exp().sub_(r).sub_(1.0)  # exactly 0 where r == 0, so padding adds nothing
        sums |= {"k3": k3, "ref_log_ratio": r, "ref": torch.where(m, ref, 0.0), "k3_ratio": k3 * ratio}
        maxes["k3_max"] = k3
    if first.entropy is not None:
        sums["entropy"] = torch.where(m, cat_rows([b.entropy for b in batches], 0.0).to(_F64), 0.0)
    row_sums = torch.stack(list(sums.values())).sum(-1)  # [S, B]
    row_maxes = torch.stack(list(maxes.values())).masked_fill_(pad, -math.inf).amax(-1)  # [X, B]
    positions = [b.rows if b.rows is not None else torch.full_like(b.logps[:, 0], -1, dtype=torch.int64)
                 for b in batches]
    kind = (KIND_REF * (first.ref is not None) + KIND_ENTROPY * (first.entropy is not None)
            + KIND_TOKEN_ADVANTAGES * (first.advantages.dim() == 2))
    at = (*range(len(COUNTS)), *(C[k] for k in sums), *(C[k] for k in maxes), C["position"], C["kind"])
    parts = torch.cat([counts.to(_F64), row_sums, row_maxes, cat_rows(positions, -1).to(_F64).unsqueeze(0),
                       torch.full((1, m.shape[0]), float(kind), dtype=_F64, device=m.device)])
    table = parts.new_full((parts.shape[1], len(COLUMNS)), math.nan)
    return table.index_copy_(1, _index(at, table.device), parts.T)


def sampler_batch_stats(settings: TrlSettings, batches: Sequence[MicroBatch]) -> signals.Stats:
    """The mismatch and rollout-IS sets of micro-batches that measure the sampler (`measures_sampler`, one kind):
    the sampler's log-probs against the loss pass's, the tensors TRL's loss used. Device ops only."""
    return sampler_stats(settings, cat_rows([b.logps for b in batches], 0.0),
                         cat_rows([b.sampling for b in batches], 0.0), cat_rows([b.mask for b in batches], 0))


@functools.lru_cache(maxsize=64)
def _index(columns: tuple[int, ...], device: torch.device) -> Tensor:
    """The table columns a kind fills, on the device: made once (a host-to-device copy) per kind."""
    return torch.tensor(columns, device=device)
