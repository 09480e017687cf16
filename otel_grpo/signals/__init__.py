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
    >>> # or in two halves, the host's finishing elsewhere: gathered = signals.gather_stats(stats, accelerator)
    >>> # (every rank: the collective and the copy), then gathered.finish() (picklable: `Step.defer` it)
    >>> # per-completion columns for the sample table (same pack): signals.sample_diagnostics(...)

Stat functions take padded `[B, T]` tensors with a `[B, T]` mask, never read a
value on the host, and return `Stats`; every key is a catalog key. Numbers computed on
the host (rewards of text, lengths) go to the device with `to_device`, which does not
wait for it. On the CPU, run a pass of them inside `single_threaded(device)`: small ops
in several threads cost more than they compute.
"""

from .._lazy import lazy_names

__all__ = [
    "GatheredStats",
    "LEVELS",
    "MODES",
    "SAFETY_BOUND",
    "ReducedStats",
    "RolloutCorrection",
    "Stats",
    "advantage_stats",
    "diversity_stats",
    "gather_stats",
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

_WHERE = {
    "GatheredStats": "._gathered",
    "LEVELS": "._rollout_is",
    "MODES": "._rollout_is",
    "ReducedStats": "._reduced",
    "RolloutCorrection": "._rollout_is",
    "SAFETY_BOUND": "._rollout_is",
    "Stats": "._partial",
    "advantage_stats": "._rewards",
    "diversity_stats": "._diversity",
    "gather_stats": "._reduce",
    "length_stats": "._lengths",
    "loss_stats": "._policy",
    "mismatch_stats": "._mismatch",
    "policy_stats": "._policy",
    "reduce_stats": "._reduce",
    "reward_stats": "._rewards",
    "rollout_correction": "._rollout_is",
    "sample_diagnostics": "._per_sample",
    "single_threaded": "._threads",
    "to_device": "._transfer",
}


# Lazily, as `otel_grpo.integrations.trl`: the host half (`_gathered`, `_host`) imports no torch, and a process
# that finishes stats (the telemetry process) must not import it through this package
__getattr__ = lazy_names(__name__, _WHERE)


def __dir__() -> list[str]:
    return sorted(__all__)

