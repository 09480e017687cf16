"""A peer's logged dict as the stat keys every path records: the one mapping of `Telemetry.log_metrics(...,
source=)`, the TRL callbacks (`instrument`, `OtelGrpoCallback`) and the `follow` readers.

    >>> peer_scalars({"kl": 0.1, "rewards/fmt/mean": 1.0}, "trl")
    {'trl_kl': 0.1, 'reward_fn_mean/fmt': 1.0, 'trl_logged/kl': 0.1, 'trl_logged/rewards/fmt/mean': 1.0}
    >>> peer_scalars({"eval_reward": 0.5, "epoch": 1.0}, "trl")
    {'eval_metric/reward': 0.5, 'epoch': 1.0}

Names go through the one resolver (`stat_key`) with the peer as source. A TRL training log's numbers
also go out exactly as TRL logged them, under their own key (`trl_logged/<key>`:
`grpo.trl.logged{metric="<key>"}`, the numbers W&B shows), whichever path carries the dict.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ._lookup import PEERS, evaluation_key, stat_key

TRL = "trl"
LOGGED_PREFIX = "trl_logged/"
"""Stat-key prefix of TRL's numbers as logged: `grpo.trl.logged`, TRL's key in attribute `metric`."""

# TRL logs 0.0 for the terminated lengths of a batch in which no completion ended before the length limit
_TERMINATED = ("completions/mean_terminated_length", "completions/min_terminated_length",
               "completions/max_terminated_length")


def peer_scalars(logs: Mapping[str, Any], source: str | None, *, evaluation: bool = False) -> dict[str, float]:
    """`logs` (a peer's names; None: our keys or any peer's) as stat keys and floats.

    None (TRL's mean of only NaN, orjson's NaN) becomes NaN, which the emitter counts in
    `grpo.nonfinite`; values that are not numbers (strings) are left out. For TRL: each key as its
    signal (TRL's meaning), less the numbers that stand for no value at this step (`undefined_keys`),
    and, for a training step's log (neither `evaluation` nor `eval_` keys: `grpo.eval` is as logged),
    each finite number exactly as logged, `trl_logged/<key>`. Non-finite ones have no as-logged
    value: the signal counts them.
    """
    if source is not None and source not in PEERS:
        raise ValueError(f"source: {source!r} is not one of {PEERS} (or None)")
    numbers = _numbers(logs)
    undefined = undefined_keys(numbers) if source == TRL else frozenset()
    key = _evaluation_stat_key if evaluation else stat_key
    out = {k: value for name, value in numbers.items()
           if name not in undefined and (k := key(name, source)) is not None}
    if source == TRL and not (evaluation or is_evaluation(numbers)):
        out.update((LOGGED_PREFIX + name, value) for name, value in numbers.items() if math.isfinite(value))
    return out


def _evaluation_stat_key(name: str, source: str | None) -> str | None:
    """An evaluation's logged `name` as its stat key (`evaluation_key`): a training statistic's is the evaluation's
    metric of the name as logged (TRL's `kl` is `eval_metric/kl`, as its `eval_kl`; not TRL's training `trl_kl`);
    the peer's own evaluation names and the trainer's state resolve as they are; the step index is none."""
    evaluated = evaluation_key(name)
    return stat_key(name, source) if evaluated == name else evaluated


def _numbers(logs: Mapping[str, Any]) -> dict[str, float]:
    numbers: dict[str, float] = {}
    for name, value in logs.items():
        if value is None:
            numbers[name] = math.nan
            continue
        try:
            numbers[name] = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
    return numbers


def undefined_keys(logs: Mapping[str, Any]) -> frozenset[str]:
    """TRL keys whose logged number stands for "no value" at this step: the terminated lengths where every
    completion hit the length limit (`clipped_ratio` 1, the mean of 1s over a logging window too). Left
    out, they are absent at that step (no gauge data point) instead of a length of 0."""
    out: set[str] = set()
    for prefix in ("", "eval_"):
        if logs.get(prefix + "completions/clipped_ratio") == 1.0:
            out.update(prefix + name for name in _TERMINATED)
    return frozenset(out)


TRAIN_SUMMARY_KEY = "train_loss"
"""Only transformers' end-of-training summary holds it (a training log's loss is `loss`)."""


def is_train_summary(logs: Mapping[str, Any]) -> bool:
    """transformers' end-of-training summary, the one log at the end of `train()` (`train_loss`, `total_flos` and
    the run's speed). Not told by `train_runtime`: with `include_num_input_tokens_seen` every training log carries
    `train_runtime` and `train_tokens_per_second` too, and such a log is a step's."""
    return TRAIN_SUMMARY_KEY in logs


def is_evaluation(logs: Mapping[str, Any]) -> bool:
    """transformers' `evaluate()` logs `eval_<name>` keys (and the epoch): an evaluation's values, not a step's
    (`Telemetry.log_metrics(..., evaluation=True)`)."""
    return any(name.startswith("eval_") for name in logs)
