"""GRPO policy losses: PPO-clip with asymmetric epsilons plus k3 KL to the reference.

Variants differ only in how per-token terms are aggregated, so each is a small
class with one `aggregate` method; `LOSSES` maps the config name to the class.
"""

from __future__ import annotations

import torch


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref): exp(r) - r - 1, r = ref - logp."""
    r = ref_logprobs - logprobs
    return torch.exp(r) - r - 1


class ClippedPolicyLoss:
    """PPO-clip surrogate per token; subclasses choose the aggregation over tokens.

    All tensors are [B, T] except advantages [B]; `is_weights` (rollout IS
    correction) multiplies the per-token policy-gradient term when given.
    """

    def __init__(self, *, epsilon_low: float, epsilon_high: float, beta: float) -> None:
        self.epsilon_low, self.epsilon_high, self.beta = epsilon_low, epsilon_high, beta

    def __call__(self, logprobs, old_logprobs, ref_logprobs, advantages, mask, is_weights=None) -> torch.Tensor:
        return self.terms(logprobs, old_logprobs, ref_logprobs, advantages, mask, is_weights)[0]

    def terms(
        self, logprobs, old_logprobs, ref_logprobs, advantages, mask, is_weights=None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, its policy-gradient term, its KL term beta * KL): every aggregation is linear,
        so the two terms, each aggregated as the loss is, add up to it."""
        ratio = torch.exp(logprobs - old_logprobs)
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        adv = advantages[:, None]
        per_token = -torch.min(ratio * adv, clipped * adv)
        if is_weights is not None:
            per_token = per_token * is_weights
        policy = self.aggregate(per_token, mask)
        if self.beta > 0:
            kl = self.aggregate(self.beta * k3_kl(logprobs, ref_logprobs), mask)
        else:
            kl = torch.zeros((), dtype=policy.dtype, device=policy.device)
        return policy + kl, policy, kl

    def aggregate(self, per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class SequenceMeanLoss(ClippedPolicyLoss):
    """GRPO (DeepSeekMath): mean over each completion's tokens, then over completions."""

    def aggregate(self, per_token, mask):
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


class TokenMeanLoss(ClippedPolicyLoss):
    """DAPO: mean over every completion token of the batch (long answers weigh more)."""

    def aggregate(self, per_token, mask):
        return (per_token * mask).sum() / mask.sum().clamp(min=1)


LOSSES: dict[str, type[ClippedPolicyLoss]] = {"grpo": SequenceMeanLoss, "dapo": TokenMeanLoss}


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO advantages: reward minus its group mean, divided by the group std when `scale`.

    rewards [N * G] prompt-major -> advantages [N * G].
    """
    grouped = rewards.view(-1, group_size)
    adv = grouped - grouped.mean(1, keepdim=True)
    if scale:
        adv = adv / (grouped.std(1, keepdim=True) + eps)
    return adv.reshape(-1)
