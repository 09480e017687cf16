"""TRL's and transformers' log dicts as catalog stat keys, and the mapping table of TRL's keys.

    >>> map_logs({"kl": 0.1, "rewards/fmt/mean": 1.0})
    {'trl_kl': 0.1, 'reward_fn_mean/fmt': 1.0, 'trl_logged/kl': 0.1, 'trl_logged/rewards/fmt/mean': 1.0}
    >>> map_logs({"eval_reward": 0.5, "epoch": 1.0})
    {'eval_metric/reward': 0.5, 'epoch': 1.0}

Names go through the catalog's one resolver with `source="trl"`: TRL's own names win
where they collide with a key (TRL's `kl` is its bias-corrected estimator, `trl_kl`, not
the catalog's plain k3 `kl`), as in `log_metrics(..., source="trl")` and `follow --trl-output`.
A training step's numbers also go out exactly as TRL logged them, under their own key
(`trl_logged/<key>`: `grpo.trl.logged{metric="<key>"}`, the numbers W&B shows), next to
the signals `instrument` computes exactly: `logged_scalars` is the one mapping of the
callbacks and `follow --trl-output`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...catalog import Signal, peer_names, stat_key

SOURCE = "trl"
LOGGED = "trl_logged"
"""Catalog key of TRL's numbers as logged: `grpo.trl.logged`, TRL's key in attribute `metric`."""


def map_logs(logs: Mapping[str, Any]) -> dict[str, float]:
    """A TRL / transformers log dict as stat keys and floats (`logged_scalars`); None (TRL's all-NaN mean)
    becomes NaN, values that are not numbers (strings) are left out.

    NaN reaches the emitter, which counts it in `grpo.nonfinite` instead of exporting it.
    """
    numbers: dict[str, float] = {}
    for name, value in logs.items():
        if value is None:
            numbers[name] = math.nan
            continue
        try:
            numbers[name] = float(value)
        except (TypeError, ValueError):
            continue
    return logged_scalars(numbers)


def logged_scalars(numbers: Mapping[str, float]) -> dict[str, float]:
    """One log's numbers (None as NaN) as the stat keys every TRL path records: each key as its catalog
    signal (TRL's meaning), less the numbers that stand for no value at this step (`undefined_keys`); and,
    for a training step's log (not an evaluation's: `grpo.eval` is as logged), each finite number exactly
    as logged, `trl_logged/<key>`. Non-finite ones have no as-logged value: the signal counts them."""
    undefined = undefined_keys(numbers)
    out = {stat_key(name, SOURCE): value for name, value in numbers.items() if name not in undefined}
    if not is_evaluation(numbers):
        out.update((logged_key(name), value) for name, value in numbers.items() if math.isfinite(value))
    return out


def logged_key(name: str) -> str:
    """The stat key of TRL's key `name` as logged: `clip_ratio/high_max` -> `trl_logged/clip_ratio/high_max`."""
    return f"{LOGGED}/{name}"


# TRL logs 0.0 for the terminated lengths of a batch in which no completion ended before the length limit
_TERMINATED = ("completions/mean_terminated_length", "completions/min_terminated_length",
               "completions/max_terminated_length")


def undefined_keys(logs: Mapping[str, Any]) -> frozenset[str]:
    """Keys whose logged number stands for "no value" at this step: the terminated lengths where every
    completion hit the length limit (`clipped_ratio` 1, the mean of 1s over a logging window too). Left
    out, they are absent at that step (no gauge data point) instead of a length of 0."""
    out: set[str] = set()
    for prefix in ("", "eval_"):
        if logs.get(prefix + "completions/clipped_ratio") == 1.0:
            out.update(prefix + name for name in _TERMINATED)
    return frozenset(out)


def is_evaluation(logs: Mapping[str, Any]) -> bool:
    """transformers' `evaluate()` logs `eval_<name>` keys (and the epoch): an evaluation's values, not a step's
    (`Telemetry.log_metrics(..., evaluation=True)`)."""
    return any(name.startswith("eval_") for name in logs)


def trl_mapping() -> list[tuple[str, Signal]]:
    """(TRL / transformers key, catalog signal) for every signal with a TRL name, in catalog order."""
    return peer_names(SOURCE)
