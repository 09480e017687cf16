"""The loss pass of one micro-batch, kept until the logged step, and the policy stats of several at once.

Plain tensors and `TrlSettings` in, `Stats` out: tested without TRL (`_capture` builds the batches).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from ... import signals
from ._rows import cat_rows, held_bytes
from ._settings import TrlSettings

CLIP_KEYS = ("clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean", "clip_ratio_low_min",
             "clip_ratio_high_max")


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
    """The sampler's log-probs (vLLM), NaN where it scored no token."""
    rows: Tensor | None = None
    """[B] int64: each row's position in its generation batch, on the batch's first pass (else None)."""

    @property
    def kind(self) -> tuple:
        """Micro-batches of one kind are concatenated: the same optional tensors and advantage shape."""
        return self.ref is not None, self.entropy is not None, self.advantages.dim()

    @property
    def nbytes(self) -> int:
        return held_bytes(self.logps, self.old, self.advantages, self.mask, self.ref, self.entropy, self.sampling)


def policy_stats(settings: TrlSettings, batches: Sequence[MicroBatch]) -> signals.Stats:
    """Clip ratios, policy ratio, approx KL, KL to the reference (plain k3 and TRL's) and entropy of
    micro-batches of one kind, as one batch: one pass of torch ops for all of them (each op on a
    micro-batch's tensors costs more in dispatch than in arithmetic), the same sums as one per batch."""
    first = batches[0]
    mask = cat_rows([b.mask for b in batches], 0).bool()  # padding: not a completion token
    logps, old = cat_rows([b.logps for b in batches], 0.0), cat_rows([b.old for b in batches], 0.0)
    advantages = cat_rows([b.advantages for b in batches], 0.0)
    ref = cat_rows([b.ref for b in batches], 0.0) if first.ref is not None else None
    entropy = cat_rows([b.entropy for b in batches], 0.0) if first.entropy is not None else None
    stats = signals.policy_stats(logps, old, advantages, mask, settings.epsilon_low, settings.epsilon_high,
                                 ref_logprobs=ref, entropy=entropy)
    if not settings.clipped or settings.sequence:
        stats.drop(*CLIP_KEYS)  # TRL clipped no token ratio: the token-level fractions would be of nothing it did
    if settings.clipped and settings.sequence:
        stats.update(_sequence_clips(settings, logps, old, advantages, mask))
    if ref is not None:
        stats.update(_trl_kl(settings, logps, old, ref, mask))
    return stats


def _sequence_clips(settings: TrlSettings, logps: Tensor, old: Tensor, advantages: Tensor, mask: Tensor) -> signals.Stats:
    """TRL's clip ratios with `importance_sampling_level="sequence"` (GSPO, luspo): the sequence's ratio
    exp(mean over its tokens of log pi_theta - log pi_old) is clipped, so each sequence counts once,
    those without tokens included (TRL's means divide by the number of sequences)."""
    m = mask.double()
    weight = (((logps - old).double() * m).sum(-1) / m.sum(-1).clamp(min=1.0)).exp().unsqueeze(-1)  # [B, 1]
    adv = advantages.double() if advantages.dim() == 2 else advantages.double().unsqueeze(-1)
    low = (weight < 1.0 - settings.epsilon_low) & (adv < 0)
    high = (weight > 1.0 + settings.epsilon_high) & (adv > 0)
    if low.shape[-1] == 1:  # one flag per sequence
        per_seq = [f.squeeze(-1).double() for f in (low, high, low | high)]
        totals, count = [f.sum() for f in per_seq], float(low.shape[0])
    else:  # [B, T] advantages: the sequence ratio against each token's advantage, token means as TRL's
        tokens = [(f & mask.bool()).double() for f in (low, high, low | high)]
        totals, count = [t.sum() for t in tokens], m.sum()
        per_seq = [t.sum(-1) / m.sum(-1) for t in tokens]  # NaN for a sequence without tokens: left out below
    st = signals.Stats()
    for key, total in zip(("clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean"), totals):
        st.add_mean(key, total, count)
    rows = ~per_seq[0].isnan()
    st.add_min("clip_ratio_low_min", torch.where(rows, per_seq[0], math.inf).min(), rows.sum(dtype=torch.float64))
    st.add_max("clip_ratio_high_max", torch.where(rows, per_seq[1], -math.inf).max(), rows.sum(dtype=torch.float64))
    return st


def _trl_kl(settings: TrlSettings, logps: Tensor, old: Tensor, ref: Tensor, mask: Tensor) -> signals.Stats:
    """TRL's `kl`: k3 times the policy ratio (`use_bias_correction_kl`), token mean, as TRL computes it."""
    r = (ref - logps).double()
    k3 = r.exp() - r - 1.0
    if settings.use_bias_correction_kl:
        log_ratio = (logps - old).double()
        if settings.sequence:
            m = mask.double()
            log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        k3 = k3 * log_ratio.exp()
    st = signals.Stats()
    st.add_mean("trl_kl", torch.where(mask, k3, 0.0).sum(), mask.sum(dtype=torch.float64))
    return st
