"""The web page's plots, laid out by catalog key so names, units and descriptions come from the catalog.

A series is a signal: its step column is its catalog name (`grpo.kl`, see `_columns`), or, for
a templated signal (`attribute` set), one column `<name>/<value>` per label value
(`grpo.reward_fn.mean/format`, one line each). Phase durations are the sidecar's own
`grpo.phase.duration/<phase>` columns.
"""

from __future__ import annotations

from otel_grpo import catalog

from ._columns import unit_label

# (title, scale, entries). Scales: linear; log (positive values over orders of magnitude: a
# healthy KL of 1e-4 and a blow-up's 1e15 on one plot); symlog (log-like, but zero and negative
# values have a place: the direct mismatch-KL estimator is often <= 0 on a healthy run).
_LAYOUT: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Reward (mean and quantiles)", "linear",
     ("reward", "reward_p05", "reward_p50", "reward_p95", "reward_min", "reward_max")),
    ("Reward per function", "linear", ("reward_fn_mean",)),
    # An evaluation's values (`log_metrics(..., evaluation=True)`, TRL's `eval_*`, verl's `val-*`): one line
    # per metric (`grpo.eval/reward`), apart from the training series of the same name.
    ("Evaluation", "linear", ("eval_metric",)),
    ("KL to the reference", "log", ("kl", "kl_k1", "approx_kl")),
    ("Clip ratios", "linear", ("clip_ratio_low_mean", "clip_ratio_high_mean", "clip_ratio_region_mean")),
    ("IS mismatch: KL", "symlog", ("mismatch_kl", "mismatch_k3_kl")),
    ("IS weights (mean, min, max)", "log",
     ("rollout_is_mean", "rollout_is_min", "rollout_is_max", "is_ratio_mean", "is_ratio_min", "is_ratio_max")),
    ("Effective sample size", "linear", ("rollout_is_eff_sample_size",)),
    ("Completion lengths", "linear", ("completion_length_mean", "completion_length_min", "completion_length_max")),
    ("Completions clipped ratio", "linear", ("completions_clipped_ratio",)),
    ("Entropy", "linear", ("entropy",)),
    # Separate panels: on one axis a loss spike flattens the gradient norm and the other way round.
    ("Loss", "linear", ("loss",)),
    ("Gradient norm", "log", ("grad_norm",)),
)


def _series(key: str) -> dict[str, str]:
    signal = catalog.get(key)  # KeyError at import if the layout names an unknown key
    out = {"name": signal.name, "prometheus": signal.prometheus_name, "key": signal.key,
           "unit": unit_label(signal.unit), "description": signal.description}
    if signal.label:  # templated: one line per value of the catalog's label (`reward_fn`)
        out["attribute"] = signal.label
    return out


def _build() -> list[dict]:
    panels = []
    for title, scale, entries in _LAYOUT:
        series = [_series(e) for e in entries]
        group = catalog.get(entries[0]).group.value
        panels.append({"title": title, "group": group, "scale": scale, "unit": series[0]["unit"], "series": series})
    phase = catalog.get("phase_duration")
    panels.append({"title": "Phase durations", "group": phase.group.value, "scale": "linear", "unit": "s",
                   "series": [_series("phase_duration")]})
    return panels


PANELS: list[dict] = _build()
