"""Prometheus alert and recording rules for GRPO runs, generated so both modes share them.

    >>> from otel_grpo.stack import RuleSettings, alert_rules
    >>> [r["alert"] for r in alert_rules(RuleSettings())["groups"][0]["rules"]][:2]
    ['GRPOKLHigh', 'GRPOKLJump']

The committed `prometheus/rules/*.yml` are `RuleSettings()` rendered (a test
diffs them); `otel-grpo up` renders `RuleSettings.fast()` so that a demo run of a
minute can fire alerts. Every metric name comes from the catalog, so a renamed
signal breaks here at import time, not silently in Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from otel_grpo import catalog

RUNBOOK = "docs/operations.md"  # relative to the repository root


def _m(key: str) -> str:
    """Prometheus series name of a catalog signal (histograms: the base name)."""
    return catalog.get(key).prometheus_name


KL, REWARD, ENTROPY = _m("kl"), _m("reward"), _m("entropy")
STEP_INDEX, NONFINITE, SKIPPED = _m("step"), _m("nonfinite"), _m("skipped_steps")
# Histograms whose rates the dashboards turn into quantiles (heavy: one series per bucket).
HISTOGRAMS = ("sample_reward", "sample_advantage", "sample_completion_length", "sample_is_ratio")
LABELLED_HISTOGRAMS = ("phase_duration", "sample_reward_fn")
COUNTERS = ("steps", "tokens", "samples")


@dataclass(kw_only=True, slots=True)
class RuleSettings:
    """Thresholds and windows of the rules. Defaults suit real runs of hours."""

    kl_threshold: float = 1.0
    """KL to the reference (k3, nats per token) above which a run has drifted.

    One nat per token means the policy's token distribution is far from the
    reference; real runs with a KL penalty stay well below it.
    """
    kl_zscore: float = 4.0
    """Robust standard deviations (from the IQR) above the KL baseline median that count as a jump."""
    is_deviation: float = 0.1
    """|mean IS weight - 1| above which rollout and training policies disagree."""
    mismatch_kl_threshold: float = 0.01
    """k3 KL(pi_rollout || pi_train) above which the rollout engine has drifted."""
    clip_ratio_threshold: float = 0.2
    completions_clipped_threshold: float = 0.3
    reward_drop: float = 0.1
    """Minimum absolute drop of the recent reward below its baseline for a collapse."""
    reward_zscore: float = 3.0
    entropy_fraction: float = 0.25
    """Entropy below this fraction of its baseline counts as collapsed."""
    entropy_floor: float = 0.01
    baseline_window: str = "30m"
    """Length of the baseline window."""
    recent_window: str = "5m"
    """Window the current value of a trend (reward, entropy) is averaged over."""
    baseline_offset: str = "15m"
    """The baseline ends this long ago (`offset`), so a sudden jump is not absorbed.

    Must cover `recent_window` plus `for_slow`: otherwise, by the time an alert has
    been pending long enough, its own collapse has entered the baseline.
    """
    baseline_min_samples: int = 10
    stall_window: str = "10m"
    absent_window: str = "15m"
    rate_window: str = "1m"
    for_fast: str = "1m"
    """`for:` of alerts that must page quickly (KL, non-finite)."""
    for_slow: str = "5m"
    """`for:` of trend alerts, long enough to ride out one noisy step."""
    for_target: str = "2m"

    def __post_init__(self) -> None:
        if self.kl_threshold <= 0 or self.mismatch_kl_threshold <= 0:
            raise ValueError("KL thresholds must be positive")
        if not 0 < self.entropy_fraction < 1:
            raise ValueError("entropy_fraction must be in (0, 1)")

    @classmethod
    def fast(cls, **overrides: object) -> "RuleSettings":
        """Windows of seconds for the local demo: a one-minute run can fire and resolve."""
        base = cls(
            baseline_window="30s", recent_window="3s", baseline_offset="10s", baseline_min_samples=5,
            stall_window="20s", absent_window="60s", rate_window="15s",
            for_fast="2s", for_slow="5s", for_target="10s",
        )
        return replace(base, **overrides)  # type: ignore[arg-type]


def _baseline(s: RuleSettings, metric: str, fn: str) -> str:
    return f"max by (run_id) ({fn}({metric}[{s.baseline_window}] offset {s.baseline_offset}))"


def _kl_baseline(s: RuleSettings) -> list[dict]:
    """Median and IQR of KL over the baseline window, and the robust z-score against them.

    Median and IQR rather than mean and std: one absurd step (a 1e11 KL the step a
    learning rate explodes) inside the window would otherwise inflate the std so
    much that no later jump counts.
    """
    def q(p: float) -> str:
        return f"max by (run_id) (quantile_over_time({p}, {KL}[{s.baseline_window}] offset {s.baseline_offset}))"

    return [
        {"record": "run_id:grpo_kl:baseline_median", "expr": q(0.5)},
        {"record": "run_id:grpo_kl:baseline_iqr", "expr": f"{q(0.75)} - {q(0.25)}"},
        # 0.741 * IQR estimates the std of a normal distribution. The divisor is floored
        # by 10 % of the median plus a constant: a flat baseline must not turn every
        # wiggle into an infinite z-score.
        {"record": "run_id:grpo_kl:zscore",
         "expr": f"(max by (run_id) ({KL}) - run_id:grpo_kl:baseline_median)"
                 " / (0.741 * run_id:grpo_kl:baseline_iqr + 0.1 * abs(run_id:grpo_kl:baseline_median) + 0.001)"},
    ]


def recording_rules(s: RuleSettings) -> dict:
    """Baselines (used by alerts) and bucket/counter rates (used by dashboards), per run."""
    rules: list[dict] = []
    rules += [{"record": "run_id:grpo_kl:baseline_samples", "expr": _baseline(s, KL, "count_over_time")}]
    rules += _kl_baseline(s)
    for metric, name in ((REWARD, "grpo_reward_mean"), (ENTROPY, "grpo_policy_entropy")):
        rules += [
            {"record": f"run_id:{name}:baseline_mean", "expr": _baseline(s, metric, "avg_over_time")},
            {"record": f"run_id:{name}:baseline_stddev", "expr": _baseline(s, metric, "stddev_over_time")},
            {"record": f"run_id:{name}:baseline_samples", "expr": _baseline(s, metric, "count_over_time")},
        ]
    for key in HISTOGRAMS:
        base = _m(key)
        rules.append({
            "record": f"run_id_le:{base}_bucket:rate",
            "expr": f"sum by (run_id, le) (rate({base}_bucket[{s.rate_window}]))",
        })
    for key in LABELLED_HISTOGRAMS:  # one quantile per label value: the label stays
        base, label = _m(key), catalog.get(key).label
        rules.append({
            "record": f"run_id_{label}_le:{base}_bucket:rate",
            "expr": f"sum by (run_id, {label}, le) (rate({base}_bucket[{s.rate_window}]))",
        })
    for key in COUNTERS:
        name = _m(key)
        rules.append({
            "record": f"run_id:{name.removesuffix('_total')}:rate",
            "expr": f"sum by (run_id) (rate({name}[{s.rate_window}]))",
        })
    return {"groups": [{"name": "grpo-recording", "rules": rules}]}


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK}#{name.lower()}",
        },
    }


_RUN = "run {{ $labels.run_id }}"
_VAL = '{{ $value | printf "%.3g" }}'  # humanize would print 0.5 as "500m"
_PCT = "{{ $value | humanizePercentage }}"  # fractions read as "65%", not "0.65 of"


def _drift_alerts(s: RuleSettings) -> list[dict]:
    is_mean, rollout_is = _m("is_ratio_mean"), _m("rollout_is_mean")
    return [
        _alert("GRPOKLHigh", f"max by (run_id) ({KL}) > {s.kl_threshold}", s.for_fast, "critical",
               f"KL to the reference is {_VAL} in {_RUN} (threshold {s.kl_threshold})",
               "The policy has moved far from the reference model: learning rate too high, beta too low, or reward hacking."),
        _alert("GRPOKLJump",
               f"run_id:grpo_kl:zscore > {s.kl_zscore}"
               f" and on (run_id) run_id:grpo_kl:baseline_samples >= {s.baseline_min_samples}",
               s.for_fast, "warning",
               f"KL jumped {_VAL} robust standard deviations above its {s.baseline_window} baseline median in {_RUN}",
               f"KL rose suddenly against its own history (the baseline ends {s.baseline_offset} ago, so the jump is not part of it)."),
        _alert("GRPORolloutISDrift",
               f"max by (run_id) (abs({rollout_is} - 1)) > {s.is_deviation}"
               f" or max by (run_id) (abs({is_mean} - 1)) > {s.is_deviation}",
               s.for_slow, "warning",
               f"Mean IS weight is {_VAL} away from 1 in {_RUN}",
               "Rollout and training policies disagree on token probabilities: weight sync, precision or sampler settings drifted."),
        _alert("GRPOMismatchKLHigh", f"max by (run_id) ({_m('mismatch_k3_kl')}) > {s.mismatch_kl_threshold}",
               s.for_slow, "warning",
               f"Rollout-vs-training KL (k3) is {_VAL} in {_RUN} (threshold {s.mismatch_kl_threshold})",
               "The rollout engine samples from a distribution measurably different from the trained policy."),
    ]


def _training_alerts(s: RuleSettings) -> list[dict]:
    recent_reward = f"max by (run_id) (avg_over_time({REWARD}[{s.recent_window}]))"
    recent_entropy = f"max by (run_id) (avg_over_time({ENTROPY}[{s.recent_window}]))"
    return [
        _alert("GRPOClipRatioHigh", f"max by (run_id) ({_m('clip_ratio_region_mean')}) > {s.clip_ratio_threshold}",
               s.for_slow, "warning",
               f"{_PCT} of tokens are clipped in {_RUN} (threshold {s.clip_ratio_threshold:.0%})",
               "Updates push the ratio outside the trust region: too many optimizer steps per batch or a learning rate too high."),
        _alert("GRPORewardCollapse",
               f"(run_id:grpo_reward_mean:baseline_mean - {recent_reward})"
               f" / (run_id:grpo_reward_mean:baseline_stddev + 0.05) > {s.reward_zscore}"
               f" and on (run_id) (run_id:grpo_reward_mean:baseline_mean - {recent_reward}) > {s.reward_drop}"
               f" and on (run_id) run_id:grpo_reward_mean:baseline_samples >= {s.baseline_min_samples}",
               s.for_slow, "critical",
               f"Reward fell {_VAL} standard deviations below its {s.baseline_window} baseline in {_RUN}",
               "Mean reward dropped well below its recent history: divergence, reward-function bug or data change."),
        _alert("GRPOEntropyCollapse",
               f"{recent_entropy} < {s.entropy_fraction} * run_id:grpo_policy_entropy:baseline_mean"
               f" or max by (run_id) ({ENTROPY}) < {s.entropy_floor}",
               s.for_slow, "warning",
               f"Policy entropy is {_VAL} in {_RUN}, collapsed against its baseline",
               "The policy became near-deterministic: exploration has stopped and group rewards stop varying."),
        _alert("GRPOCompletionsClipped",
               f"max by (run_id) ({_m('completions_clipped_ratio')}) > {s.completions_clipped_threshold}",
               s.for_slow, "warning",
               f"{_PCT} of completions hit the length limit in {_RUN}",
               "Completions are truncated without EOS: raise max length or penalize length; rewards on truncated text mislead."),
    ]


def _counted(metric: str, by: str, window: str) -> str:
    # increase() misses the first increment of a series that starts above zero, so a
    # series that did not exist `window` ago counts by its value.
    return (f"sum by ({by}) (increase({metric}[{window}])) > 0"
            f" or sum by ({by}) ({metric} unless {metric} offset {window}) > 0")


def _health_alerts(s: RuleSettings) -> list[dict]:
    return [
        _alert("GRPONonFiniteValues", _counted(NONFINITE, "run_id, signal", s.stall_window), "0s", "critical",
               _VAL + " non-finite values of {{ $labels.signal }} in " + _RUN,
               "NaN or Inf appeared in a training signal; they are counted, not exported. Usually precedes divergence."),
        _alert("GRPOStepsSkipped", _counted(SKIPPED, "run_id", s.stall_window), "0s", "warning",
               f"{_VAL} training steps skipped in {_RUN}",
               "Updates were skipped for a non-finite loss or a failed batch."),
        _alert("GRPOTrainerStalled",
               f"max by (run_id) ({STEP_INDEX})"
               f" unless on (run_id) max by (run_id) (changes({STEP_INDEX}[{s.stall_window}])) > 0"
               f" and on (run_id) max by (run_id) ({STEP_INDEX} offset {s.stall_window})",
               s.for_fast, "critical",
               f"No training step for {s.stall_window} in {_RUN} (stuck at step {_VAL}), yet it still exports",
               "The process is alive but makes no progress: a hung collective, a dead data loader or a deadlock."),
        _alert("GRPOMetricsAbsent",
               f"max by (run_id) (max_over_time({STEP_INDEX}[{s.absent_window}]))"
               f" unless on (run_id) max by (run_id) ({STEP_INDEX})",
               s.for_target, "warning",
               f"{_RUN} stopped exporting metrics (last step {_VAL})",
               "A run that reported in the last window no longer does: it crashed, was killed, or finished."),
        _alert("GRPOCollectorDown", 'up{job="otel-collector"} == 0', s.for_target, "critical",
               "The OpenTelemetry Collector is not scraped ({{ $labels.instance }})",
               "No trainer metrics reach Prometheus while the collector is down."),
        _alert("GRPOSidecarDown", 'up{job="sidecar"} == 0', s.for_target, "warning",
               "The sidecar is not scraped ({{ $labels.instance }})",
               "Samples and step history are not being stored (the trainer still spills samples to disk)."),
    ]


def alert_rules(s: RuleSettings) -> dict:
    """The alert rule file (one group) for these settings."""
    rules = _drift_alerts(s) + _training_alerts(s) + _health_alerts(s)
    return {"groups": [{"name": "grpo-alerts", "rules": rules}]}


def rule_metric_names() -> set[str]:
    """Names the rules define (recording rules), which dashboards may also query."""
    return {r["record"] for r in recording_rules(RuleSettings())["groups"][0]["rules"]}


__all__ = ["RuleSettings", "alert_rules", "recording_rules", "rule_metric_names"]
