"""The sampler's log-probs against the training policy's: the mismatch and rollout-IS sets of a logged step.

    stats = sampler_stats(settings, train, sampling, mask)   # device ops only, no host read

TRL keeps the sampler's log-probs (vLLM's, or those a `rollout_func` returns) as `sampling_per_token_logps`.
What they are measured against is the policy TRL's loss takes as pi_old for those rows: its
`old_per_token_logps` where TRL computed them (`_generation`: the generation batch's), else the
loss pass's own log-probs, detached (`_micro_batch`: each row's first pass), which TRL uses in their
place when generation and optimizer steps line up. Either way one function computes the sets, so
every case that has the sampler's log-probs exports the same series.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import signals
from ._settings import TrlSettings


def sampler_stats(settings: TrlSettings, train: Tensor, sampling: Tensor, mask: Tensor) -> signals.Stats:
    """`signals.rollout_correction`'s stats with the mismatch set, at TRL's IS level and mode with its clip bounds
    as the threshold. `train`, `sampling`: [B, T] log-probs of the sampled tokens (the sampler's NaN, a token
    vLLM did not score, counts as no mismatch, as in TRL's correction); `mask`: [B, T] the loss's tokens."""
    sampling = torch.where(torch.isnan(sampling), train, sampling)
    return signals.rollout_correction(train, sampling, mask, level=settings.is_level, mode=settings.is_mode,
                                      threshold=settings.is_threshold, with_mismatch=True).stats
