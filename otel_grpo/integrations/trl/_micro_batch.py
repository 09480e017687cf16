"""The loss pass of one micro-batch, kept until the logged step, and the policy stats of several at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from ... import signals
from ._rows import cat_rows, held_bytes


@dataclass(slots=True)
class MicroBatch:
    """What the policy stats need of one micro-batch's loss pass (TRL's tensors, detached, on device)."""

    logps: Tensor
    old: Tensor
    advantages: Tensor
    mask: Tensor
    """Completion (and tool) tokens, as TRL's loss masks them: 0/1 or bool."""
    ref: Tensor | None
    entropy: Tensor | None

    @property
    def kind(self) -> tuple:
        """Micro-batches of one kind are concatenated: the same optional tensors and advantage shape."""
        return self.ref is not None, self.entropy is not None, self.advantages.dim()

    @property
    def nbytes(self) -> int:
        return held_bytes(self.logps, self.old, self.advantages, self.mask, self.ref, self.entropy)


def capture_micro_batch(trainer: Any, inputs: dict, logps: Tensor, entropies: Tensor | None) -> MicroBatch:
    """Reads what TRL's `_compute_loss` used; no device op beyond a tool-mask product."""
    mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
    old = inputs.get("old_per_token_logps")
    old = logps if old is None else old  # TRL: pi_old = pi_theta.detach() when it skipped computing it
    ref = inputs.get("ref_per_token_logps") if trainer.beta != 0.0 else None
    return MicroBatch(logps, old, inputs["advantages"], mask, ref, entropies)


def policy_stats(trainer: Any, batches: Sequence[MicroBatch]) -> signals.Stats:
    """Clip ratios, policy ratio, approx KL, KL to the reference (plain k3 and TRL's) and entropy of
    micro-batches of one kind, as one batch: one pass of torch ops for all of them (each op on a
    micro-batch's tensors costs more in dispatch than in arithmetic), the same sums as one per batch."""
    first = batches[0]
    mask = cat_rows([b.mask for b in batches], 0).bool()  # padding: not a completion token
    logps, old = cat_rows([b.logps for b in batches], 0.0), cat_rows([b.old for b in batches], 0.0)
    advantages = cat_rows([b.advantages for b in batches], 0.0)
    ref = cat_rows([b.ref for b in batches], 0.0) if first.ref is not None else None
    entropy = cat_rows([b.entropy for b in batches], 0.0) if first.entropy is not None else None
    stats = signals.policy_stats(logps, old, advantages, mask, trainer.epsilon_low, trainer.epsilon_high,
                                 ref_logprobs=ref, entropy=entropy)
    if ref is not None:
        stats.update(_trl_kl(trainer, logps, old, ref, mask))
    return stats


def _trl_kl(trainer: Any, logps: Tensor, old: Tensor, ref: Tensor, mask: Tensor) -> signals.Stats:
    """TRL's `kl`: k3 times the policy ratio (`use_bias_correction_kl`), token mean, as TRL computes it."""
    r = (ref - logps).double()
    k3 = r.exp() - r - 1.0
    if getattr(trainer.args, "use_bias_correction_kl", False):
        log_ratio = (logps - old).double()
        if getattr(trainer, "importance_sampling_level", "token") == "sequence":
            m = mask.double()
            log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
        k3 = k3 * log_ratio.exp()
    st = signals.Stats()
    st.add_mean("trl_kl", torch.where(mask, k3, 0.0).sum(), mask.sum(dtype=torch.float64))
    return st
