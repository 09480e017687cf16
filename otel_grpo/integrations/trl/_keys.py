"""TRL's and transformers' log dicts as catalog stat keys, and the mapping table of TRL's keys.

    >>> map_logs({"kl": 0.1, "rewards/fmt/mean": 1.0})
    {'trl_kl': 0.1, 'reward_fn_mean/fmt': 1.0, 'trl_logged/kl': 0.1, 'trl_logged/rewards/fmt/mean': 1.0}
    >>> map_logs({"eval_reward": 0.5, "epoch": 1.0})
    {'eval_metric/reward': 0.5, 'epoch': 1.0}

Names go through the catalog's one resolver with `source="trl"`: TRL's own names win
where they collide with a key (TRL's `kl` is its bias-corrected estimator, `trl_kl`, not
the catalog's plain k3 `kl`). A training step's numbers also go out exactly as TRL logged
them, under their own key (`trl_logged/<key>`: `grpo.trl.logged{metric="<key>"}`, the numbers
W&B shows), next to the signals `instrument` computes exactly. The mapping is the catalog's
one, `catalog.peer_scalars(logs, "trl")`: the callbacks, `follow --trl-output`,
`Telemetry.log_metrics(..., source="trl")` and `JsonlStream(source="trl")` all record through it.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...catalog import Signal, peer_names, peer_scalars

SOURCE = "trl"



def map_logs(logs: Mapping[str, Any]) -> dict[str, float]:
    """A TRL / transformers log dict as stat keys and floats (`catalog.peer_scalars`, source "trl"): None (TRL's
    all-NaN mean) becomes NaN, which the emitter counts in `grpo.nonfinite`; strings are left out; a training
    log's finite numbers also as logged (`trl_logged/<key>`)."""
    return peer_scalars(logs, SOURCE)


def trl_mapping() -> list[tuple[str, Signal]]:
    """(TRL / transformers key, catalog signal) for every signal with a TRL name, in catalog order."""
    return peer_names(SOURCE)
