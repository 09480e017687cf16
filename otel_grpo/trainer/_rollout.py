"""The rollout engine: a bf16 copy of the policy that samples and returns its own log-probs.

Like vLLM next to an FSDP trainer, it is a separate copy of the weights in lower
precision, so its log-probs differ from the training policy's: the mismatch the
IS metrics measure is genuine. `sync` copies the policy in after each update.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass(slots=True)
class Rollout:
    """G completions per prompt, flattened prompt-major ([N * G, ...]).

    ids [B, P + T]; completion_mask [B, T] (1 up to and including EOS);
    rollout_logprobs [B, T] float32 (0 past EOS); truncated [B] bool (no EOS).
    """

    ids: torch.Tensor
    completion_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    truncated: torch.Tensor

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.ids[:, -self.completion_mask.shape[1] :]


class RolloutEngine:
    """Holds the bf16 rollout copy; `generate` samples, `sync` refreshes its weights."""

    def __init__(self, policy: nn.Module, *, dtype: torch.dtype = torch.bfloat16) -> None:
        self.dtype = dtype
        self.model = copy.deepcopy(policy).to(dtype).eval().requires_grad_(False)
        self.version = 0
        """Policy version the rollout weights come from (number of syncs)."""

    @torch.no_grad()
    def sync(self, policy: nn.Module, *, drift: float = 0.0, generator: torch.Generator | None = None) -> None:
        """Copy the policy's weights in (cast to the rollout dtype).

        `drift` > 0 adds Gaussian noise of that relative scale to every weight: a
        degraded inference engine (the `rollout-drift` fault)."""
        for dst, src in zip(self.model.parameters(), policy.parameters()):
            dst.copy_(src.detach())
            if drift > 0:
                noise = torch.randn(src.shape, generator=generator, device=dst.device).to(dst.dtype)
                dst.add_(noise * drift * src.detach().abs().mean().to(dst.dtype))
        self.version += 1

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, group_size: int, max_new_tokens: int, *, eos_id: int,
                 pad_id: int, temperature: float, generator: torch.Generator) -> Rollout:
        """Sample `group_size` completions for each prompt [N, P] (same length P)."""
        ids = prompt_ids.repeat_interleave(group_size, dim=0)
        B = ids.shape[0]
        done = torch.zeros(B, dtype=torch.bool, device=ids.device)
        logps, masks = [], []
        for _ in range(max_new_tokens):
            logits = self.model(ids)[:, -1].float() / temperature
            logp_all = F.log_softmax(logits, dim=-1)
            nxt = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(1)
            alive = ~done
            nxt = torch.where(alive, nxt, torch.full_like(nxt, pad_id))
            logps.append(torch.where(alive, logp_all.gather(1, nxt[:, None]).squeeze(1), 0.0))
            masks.append(alive)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done = done | (nxt == eos_id)
        mask = torch.stack(masks, 1).float()
        return Rollout(ids=ids, completion_mask=mask, rollout_logprobs=torch.stack(logps, 1), truncated=~done)
