"""The keys a per-sample vector or a bucketed stat is finished into: shared by the device halves (`_rewards`,
`_lengths`, `_policy`) and the host halves that finish the same stats from table rows (TRL's `instrument`),
which import no torch."""

from __future__ import annotations

from functools import lru_cache

_Q = {"p00": 0.0, "p05": 0.05, "p25": 0.25, "p50": 0.50, "p75": 0.75, "p95": 0.95, "p100": 1.0}
REWARD_QUANTILES = {f"reward_{name}": q for name, q in _Q.items()}
REWARD_SUMMARIES = {"reward": "mean", "reward_std": "std", "reward_min": "min", "reward_max": "max"}
REWARD_GROUPS = {"reward_group_std": "std", "frac_reward_zero_std": "zero_std"}
ADVANTAGE_SUMMARIES = {"advantage_mean": "mean", "advantage_std": "std", "advantage_min": "min",
                       "advantage_max": "max"}


@lru_cache(maxsize=256)
def fn_quantiles(name: str) -> dict[str, float]:
    return {f"reward_fn_{q}/{name}": x for q, x in _Q.items()}


@lru_cache(maxsize=256)
def fn_summaries(name: str) -> dict[str, str]:
    return {f"reward_fn_mean/{name}": "mean", f"reward_fn_std/{name}": "std"}


LENGTH_SUMMARIES = {"completion_length_mean": "mean", "completion_length_std": "std",
                    "completion_length_min": "min", "completion_length_max": "max", "tokens": "sum"}
TERMINATED_SUMMARIES = {"terminated_length_mean": "mean", "terminated_length_min": "min",
                        "terminated_length_max": "max"}

LENGTH_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096)


@lru_cache(maxsize=1)
def bucket_labels() -> tuple[str, ...]:
    """Label values of `kl_by_length`: `le_64`, ..., `le_4096`, `gt_4096`."""
    return (*(f"le_{b}" for b in LENGTH_BUCKETS), f"gt_{LENGTH_BUCKETS[-1]}")
