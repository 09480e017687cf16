"""The web page's plots, named by catalog key so labels and descriptions come from the catalog.

A series is a catalog key (a step column of that name) or, for templated signals,
a key prefix such as `reward_fn_mean/` (one line per label value). Phase
durations are the sidecar's own `phase_duration/<phase>` columns.
"""

from __future__ import annotations

from otel_grpo import catalog

_LAYOUT: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Reward (mean and quantiles)", ("reward", "reward_p05", "reward_p50", "reward_p95", "reward_min", "reward_max")),
    ("Reward per function", ("reward_fn_mean/",)),
    ("KL to the reference", ("kl", "kl_k1", "approx_kl")),
    ("Clip ratios", ("clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean")),
    ("IS mismatch: KL", ("mismatch_kl", "mismatch_k3_kl")),
    ("IS weights (mean, min, max)", ("rollout_is_mean", "rollout_is_min", "rollout_is_max", "is_ratio_mean")),
    ("Effective sample size", ("rollout_is_eff_sample_size",)),
    ("Completion lengths", ("completion_length_mean", "completion_length_min", "completion_length_max")),
    ("Completions clipped ratio", ("completions_clipped_ratio",)),
    ("Entropy", ("entropy",)),
    ("Loss and gradient norm", ("loss", "grad_norm")),
)


def _series(entry: str) -> dict[str, str]:
    if entry.endswith("/"):
        signal = catalog.get(entry[:-1])
        return {"prefix": entry, "label": signal.key, "description": signal.description}
    signal = catalog.get(entry)  # KeyError at import if the layout names an unknown key
    return {"key": signal.key, "label": signal.key, "description": signal.description}


# KL estimates run over orders of magnitude (1e-4 while healthy, 1 and more in a blow-up); on a
# linear axis one spike flattens the rest of the run into the floor, so these plot on log10.
_LOG_SCALE = frozenset({"KL to the reference", "IS mismatch: KL"})


def _build() -> list[dict]:
    panels = []
    for title, entries in _LAYOUT:
        series = [_series(e) for e in entries]
        group = catalog.get(entries[0].rstrip("/")).group.value
        panels.append({"title": title, "group": group, "scale": "log" if title in _LOG_SCALE else "linear",
                       "series": series})
    phase = catalog.get("phase_duration")
    panels.append({"title": "Phase durations (s)", "group": phase.group.value, "scale": "linear",
                   "series": [{"prefix": "phase_duration/", "label": "phase", "description": phase.description}]})
    return panels


PANELS: list[dict] = _build()
