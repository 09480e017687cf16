"""Pure-torch GRPO signals: tensors in, partial aggregates out, reduced exactly across ranks.

    >>> from otel_grpo import signals
    >>> stats = signals.reward_stats(rewards, group_size=8) | signals.length_stats(mask, truncated)
    >>> weights, new_mask, is_stats = signals.rollout_correction(train_lp, rollout_lp, mask, threshold=(0.5, 2.0))
    >>> stats = stats | is_stats | signals.mismatch_stats(train_lp, rollout_lp, mask)
    >>> # or both families in one call, sharing the log ratios and the exp (same numbers):
    >>> # signals.rollout_correction(train_lp, rollout_lp, mask, with_mismatch=True)
    >>> stats = stats | signals.loss_stats(loss, policy_term, beta_kl_term)  # per micro-batch: the loss and its parts
    >>> reduced = signals.reduce_stats(stats, accelerator)   # one collective, one host copy
    >>> reduced["reward"], reduced.samples["sample_reward"], reduced.invalid
    >>> # per-completion columns for the sample table (same pack): signals.sample_diagnostics(...)

Stat functions take padded `[B, T]` tensors with a `[B, T]` mask, never read a
value on the host, and return `Stats`; every key is a catalog key. Numbers computed on
the host (rewards of text, lengths) go to the device with `to_device`, which does not
wait for it. On the CPU, run a pass of them inside `single_threaded(device)`: small ops
in several threads cost more than they compute.
"""

from ._diversity import diversity_stats
from ._lengths import length_stats
from ._mismatch import mismatch_stats
from ._partial import Stats
from ._per_sample import sample_diagnostics
from ._policy import loss_stats, policy_stats
from ._reduce import reduce_stats
from ._reduced import ReducedStats
from ._rewards import advantage_stats, reward_stats
from ._rollout_is import LEVELS, MODES, SAFETY_BOUND, RolloutCorrection, rollout_correction
from ._threads import single_threaded
from ._transfer import to_device

__all__ = [
    "LEVELS",
    "MODES",
    "SAFETY_BOUND",
    "ReducedStats",
    "RolloutCorrection",
    "Stats",
    "advantage_stats",
    "diversity_stats",
    "length_stats",
    "loss_stats",
    "mismatch_stats",
    "policy_stats",
    "reduce_stats",
    "reward_stats",
    "rollout_correction",
    "sample_diagnostics",
    "single_threaded",
    "to_device",
]
