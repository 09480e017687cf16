"""Prometheus rule settings and recording rules for GRPO runs, generated so both modes share them.

    >>> from otel_grpo.generate import RuleSettings, alert_rules
    >>> [r["alert"] for r in alert_rules(RuleSettings())["groups"][0]["rules"] if "alert" in r][:2]
    ['GRPOKLHigh', 'GRPOKLSpike']

The committed `prometheus/rules/*.yml` are `RuleSettings()` rendered (a test
diffs them); `otel-grpo up` renders `RuleSettings.fast()` so that a demo run of a
minute can fire alerts. Every metric name comes from the catalog, so a renamed
signal breaks here at import time, not silently in Prometheus.

Thresholds are fields of `RuleSettings`; `overrides` sets them per run. Every
threshold is a step check's (`STEP_THRESHOLDS`: KL, mismatch, IS, clipping, zero
std, gradient norm, the trends), read from the training process's per-step streak
counters, so it and its overrides are bounds of that check
(`otel_grpo.catalog.STEP_CHECKS`); the alerts select each run's bound. Overrides are
also recording rules `run_id:grpo_threshold:<field>` carrying that run's `run_id`:
the dashboards draw them, and the hang alerts compare a run against its own floor
(`run_floor`) where it has one, against the default otherwise.

Trends (KL jump, reward and entropy collapse, throughput drop) are step checks too:
the training process judges each step against the run's own earlier steps (a baseline
counted in steps, `otel_grpo.catalog.Baseline`), so a run of 10-minute steps is judged
from the same step on as one of 2-second steps, and Prometheus holds no baseline.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping

from otel_grpo import catalog
from otel_grpo.catalog import STEP_CHECKS, STEP_THRESHOLDS, STREAKS, TREND, load_rule_settings


def prometheus_name(key: str) -> str:
    """Prometheus series name of a catalog signal (histograms: the base name)."""
    return catalog.get(key).prometheus_name


STEP_INDEX, NONFINITE, SKIPPED = map(prometheus_name, ("step", "nonfinite", "skipped_steps"))
STEP_TIME, LOG_INTERVAL = map(prometheus_name, ("step_time", "log_interval"))
# Histograms whose rates the dashboards turn into quantiles (heavy: one series per bucket).
HISTOGRAMS = ("sample_reward", "sample_advantage", "sample_completion_length", "sample_is_ratio", "step_kl")
LABELLED_HISTOGRAMS = ("phase_duration", "sample_reward_fn")
COUNTERS = ("steps", "tokens", "samples")
THRESHOLD_RECORD = "run_id:grpo_threshold:"
STEP_MAX = "run_id:grpo_step_index:max"  # the run's highest step index now (alert group)
PER_RANK_HISTOGRAMS = ("phase_duration",)
"""Histograms each rank observes of its own (its phases' times): every rank's observations count, where every rank
exports, and a straggling rank shows in the quantiles."""
ONE_RANK = 'rank=~"|0"'
"""The run's own series where every rank exports (`export_all_ranks`: each rank's carry its `rank`): rank 0's, or
the series without `rank` where one rank exports. Every rank exports the run's counters (steps, tokens, completions,
events) and its gathered per-sample histograms alike, reduced across ranks: a `sum by (run_id)` over ranks counts
them once per rank. The rates' recording rules and panels read them through this selector (not the gauges, some of
which are each rank's own, such as its memory: their panels take the largest; nor `PER_RANK_HISTOGRAMS`)."""

# Settings that are thresholds: the ones `overrides` may set per run.
THRESHOLDS = (
    "kl_threshold", "mismatch_kl_threshold", "clip_ratio_threshold", "completions_clipped_threshold",
    "zero_std_threshold", "ess_min", "chi2_threshold", "veto_fraction_threshold",
    "catastrophic_fraction_threshold", "grad_norm_factor", "throughput_fraction", "kl_zscore", "reward_zscore",
    "entropy_fraction", "entropy_floor",
)
# Durations `overrides` may set per run too: the hang alerts' floors (a run whose checkpoints or
# evaluations take longer than the others' limits, without slowing every run's hang page).
FLOORS = ("stall_floor", "first_step_floor")


@dataclass(kw_only=True, slots=True)
class RuleSettings:
    """Thresholds and windows of the rules. Defaults suit real runs of hours (docs/operations.md)."""

    # ---- thresholds (per-run overridable, see `overrides`) -------------------------
    kl_threshold: float = 1.0
    """KL to the reference (k3, nats per token) above which a run has drifted: one step fires
    GRPOKLSpike, `kl_steps` consecutive steps GRPOKLHigh. A bound of the `kl` step check."""
    kl_zscore: float = 4.0
    """Robust standard deviations (from the IQR) above the median of the run's recent steps that count as a KL
    jump, for `kl_steps` consecutive steps (and twice their 90th percentile): a bound of the `kl_jump` check."""
    mismatch_kl_threshold: float = 0.01
    """k3 KL(pi_rollout || pi_train) above which the rollout engine has drifted."""
    ess_min: float = 0.5
    """Effective-sample-size fraction of the IS weights below which the correction is starved."""
    chi2_threshold: float = 1.0
    """Token-level chi-square divergence (mean (rho - 1)^2) above which rollout and training disagree."""
    veto_fraction_threshold: float = 0.05
    """Fraction of sequences vetoed for a catastrophic token."""
    catastrophic_fraction_threshold: float = 0.01
    """Fraction of tokens outside the veto thresholds."""
    clip_ratio_threshold: float = 0.2
    completions_clipped_threshold: float = 0.3
    zero_std_threshold: float = 0.8
    """Fraction of prompt groups with equal rewards (no learning signal) above which the run learns nothing."""
    grad_norm_factor: float = 10.0
    """Gradient norm above this multiple of its median over the previous 100 steps is a spike: judged by the
    training process on every step (a bound of the relative `grad_norm` step check)."""
    throughput_fraction: float = 0.5
    """Throughput below this fraction of its mean over the run's recent steps is a drop (`throughput_drop`)."""
    reward_zscore: float = 3.0
    """Standard deviations of its step-to-step noise (and at least 0.1) below its mean over the run's recent steps
    that the reward mean must fall for a collapse (`reward_collapse`)."""
    entropy_fraction: float = 0.25
    """Entropy below this fraction of its mean over the run's recent steps counts as collapsed (`entropy_collapse`)."""
    entropy_floor: float = 0.01
    """Entropy below this counts as collapsed whatever the run's history (the `entropy` check)."""
    overrides: Mapping[str, Mapping[str, float | str]] = field(default_factory=dict)
    """Per-run thresholds and floors: `{run_id: {"kl_threshold": 2.0, "stall_floor": "45m"}}`; names from
    `THRESHOLDS` (numbers) and `FLOORS` (durations)."""
    # ---- step-aware conditions -----------------------------------------------------
    kl_steps: int = 3
    """GRPOKLHigh fires once KL has been over its threshold for this many consecutive training steps."""
    drift_steps: int = 3
    """Consecutive steps for the step-aware warnings (mismatch, IS, clipping, zero std, trends): 3 keeps a
    warning within max(3 steps, 5 min) of its onset at every step time (docs/alerts.md). Both are streak
    lengths the training process counts (`otel_grpo.catalog.STREAKS`), and at most the trend baselines'
    `gap` (a streak is never part of the baseline it is judged against)."""
    # ---- windows -------------------------------------------------------------------
    counter_window: str = "10m"
    """An increase of a health counter (non-finite values, skipped steps) fires for this long."""
    counter_lookback: str = "1d"
    """A counter series unseen for this long before `counter_window` counts as new (its value is its increase)."""
    stall_factor: float = 3.0
    """A run is stalled when its last step is older than this many of its longest recent step times, or times
    between two reported steps (a trainer reporting every N steps) ..."""
    stall_floor: str = "3m"
    """... and longer than this floor: more than a healthy run's last step takes to be seen (its export interval
    and a scrape, 2 minutes at most), so a run of 2-second steps that hangs pages in minutes. Evaluations and
    saves are no pause here while they beat (`Telemetry.heartbeat`, done for you by the integrations)."""
    first_step_floor: str = "35m"
    """A run's process that is alive, has completed no step and reported nothing else this long after its start
    (or its last heartbeat) hangs before its first step (model or data loading, a collective or an inference
    server that never answers). Longer than the longest healthy start-up you run (30 minutes here); a run that
    loads longer gets its own (`overrides`)."""
    liveness_slack: str = "90s"
    """How far past its promise (`grpo.process.alive_until`: a collection's time plus the export interval) a
    process may be heard from before it counts as gone: the longest scrape interval (60 s) and the delivery's
    lag. GRPOMetricsAbsent then waits `for_fast` more (one failed scrape is no crash)."""
    clock_window: str = "10m"
    """How far back each process's clock offset is taken (the smallest lag between Prometheus's scrape time and
    the process's clock, `grpo.process.clock`): several collections, and longer than the collector's
    metric_expiration plus `liveness_slack`, so that the values a collector keeps serving for a dead process
    cannot move its offset by more than that expiration once its last fresh one has left the window. A clock
    that steps back mid-run is misjudged for this long."""
    path_settle: str = "3m"
    """After the collector was last seen down, how long no run is judged absent: one export interval (60 s at
    most) and a scrape for every live run to be heard again, and the slack."""
    history_window: str = "6h"
    """How long a collector or sidecar target once seen is remembered while it is down (GRPOCollectorDown and
    GRPOSidecarDown judge the targets seen)."""
    recent_window: str = "30m"
    """How long one long step (a first step that compiles, a slow one) raises the hang threshold by itself:
    a run's limit is `stall_factor` times its latest process's longest step time or time between reported steps
    within this window, so a lasting slow-down counts at once, a single slow step only this long, and a run that
    sped up is judged by its new steps this long after its last slower one."""
    absent_window: str = "1d"
    """A run that exported within this window and no longer does has ended: GRPOMetricsAbsent (a crash) or
    GRPORunPreempted fire until it resumes or this window has passed since its last export."""
    memory_interval: str = "10m"
    """How often the memory group re-reads each process's last values over `absent_window` (and each counter's over
    `counter_lookback`) for the alert group, which reads its own series over three of these intervals and
    `liveness_slack` only (otel_grpo/generate/_memory.py): the day is read once per interval, not at every
    evaluation. Shorter: more of Prometheus's CPU; longer: more samples per alert evaluation."""
    rate_window: str = "1m"
    """Rate window of the counters' recording rules (steps, tokens, samples per second)."""
    histogram_window: str = "15m"
    """Rate window of the histograms' bucket rates (dashboard quantiles): at least one step of the
    slowest run you watch, or the quantiles are empty between two steps."""
    for_fast: str = "1m"
    """`for:` of wall-clock alerts that must page quickly (stall, full queue); drift alerts count steps."""
    for_slow: str = "5m"
    """`for:` of the stack's own warnings (export failures, rejected requests)."""
    for_target: str = "2m"
    keep_firing_for: str = "1h"
    """How long a threshold or trend alert (the trainer's step evidence) keeps firing after its condition last held:
    a condition that keeps coming back (3 bad steps of 4, a fraction hovering at its bound) is one alert, notified
    once and resolved this long after the run's last bad streak, not a new notification each time it returns."""
    # ---- links ---------------------------------------------------------------------
    runbook_base: str = "https://github.com/otel-grpo/otel-grpo/blob/main/docs/operations.md"
    """Absolute URL of the runbook; each alert's `runbook_url` is this plus `#<alert name>`."""
    grafana_url: str = "http://localhost:3000"
    """Grafana base URL for the alerts' `dashboard_url` (the panel the alert is about)."""

    def __post_init__(self) -> None:
        """Every field checked for its type and range; a ValueError names the first bad one."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "overrides":
                continue
            if f.name in _LINKS:
                if not isinstance(value, str) or not value.startswith(("http://", "https://")):
                    raise ValueError(f"{f.name}: {value!r} is not an absolute http(s) URL (runbook_base and "
                                     "grafana_url must be absolute http(s) URLs)")
            elif isinstance(f.default, str):
                if not _positive_duration(value):
                    raise ValueError(f"{f.name}: {value!r} is not a duration; use a positive whole number and one "
                                     f"of s, m, h, d (default {f.default})")
            elif f.name in _STREAKS:
                lengths = [n for n in STREAKS if n <= TREND["gap"]]
                if type(value) is not int or value not in lengths:  # 3.0 would write streak="3.0": no series
                    raise ValueError(f"{f.name}: {value!r}: kl_steps and drift_steps must be streak lengths the "
                                     f"trainer counts, at most the trend baselines' gap: {lengths}")
            elif not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{f.name}: {value!r} is not a positive number (default {f.default})")
        for name, key in STEP_THRESHOLDS.items():
            bounds = STEP_CHECKS[key].bounds
            if getattr(self, name) not in bounds:
                raise ValueError(f"{name} must be a bound of the {key!r} step check: {bounds}")
        if not isinstance(self.overrides, Mapping):
            raise ValueError(f"overrides: {self.overrides!r} is not a mapping of run ids to their settings "
                             "({exp-42: {kl_threshold: 2.0}})")
        for run_id, values in self.overrides.items():
            if not isinstance(run_id, str) or not run_id:
                raise ValueError(f"overrides: the run id {run_id!r} is not a non-empty string (quote it in YAML)")
            if not isinstance(values, Mapping):
                raise ValueError(f"overrides[{run_id!r}]: {values!r} is not a mapping of thresholds and floors "
                                 "({kl_threshold: 2.0})")
            unknown = set(values) - set(THRESHOLDS) - set(FLOORS)
            if unknown:
                raise ValueError(f"overrides[{run_id!r}]: {sorted(unknown, key=str)} are not thresholds; use "
                                 f"{THRESHOLDS + FLOORS}")
            for name, value in values.items():
                if name in FLOORS:
                    if not _positive_duration(value):
                        raise ValueError(f"overrides[{run_id!r}][{name!r}]: {value!r} is not a duration; use a "
                                         "positive number and one of s, m, h, d (45m)")
                    continue
                key = STEP_THRESHOLDS[name]
                if not _is_number(value) or (value not in STEP_CHECKS[key].bounds and value != math.inf):
                    raise ValueError(f"overrides[{run_id!r}][{name!r}]: {value!r} must be +inf (off) or a bound of "
                                     f"the {key!r} step check: {STEP_CHECKS[key].bounds}")

    def overridden(self, name: str) -> bool:
        """Whether some run has its own value of the threshold or floor `name` (`overrides`)."""
        return any(name in values for values in self.overrides.values())

    @classmethod
    def fast(cls, **overrides: object) -> "RuleSettings":
        """Windows of seconds for the local demo (1 s scrapes): a one-minute run can fire and resolve."""
        base = cls(
            counter_window="20s", stall_floor="20s", first_step_floor="30s", liveness_slack="3s", path_settle="10s",
            clock_window="30s",
            history_window="10m", recent_window="1m",
            absent_window="60s", memory_interval="5s", rate_window="15s", histogram_window="15s",
            for_fast="2s", for_slow="5s", for_target="10s",
        )
        return replace(base, **overrides)  # type: ignore[arg-type]

    @classmethod
    def from_yaml(cls, path: Path) -> "RuleSettings":
        """Settings from a YAML mapping of field names (`overrides` included); ValueError naming bad keys.

        The training process reads the same file (`OTEL_GRPO_RULE_SETTINGS`, catalog `run_thresholds`)."""
        data = load_rule_settings(path)
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"rule settings {path}: unknown settings {sorted(unknown)}")
        try:
            return cls(**data)
        except TypeError as e:
            raise ValueError(f"rule settings {path}: {e}") from None


def promql_string(text: str) -> str:
    """`text` as a double-quoted PromQL string literal (Go's escapes, which JSON's are a subset of): a run id may hold
    `"` or `\\`, which unquoted end the selector (Prometheus then refuses the whole rule file) or become another
    character (the override then matches no run)."""
    return json.dumps(text, ensure_ascii=False)


def _num(value: float) -> str:
    """A PromQL number literal: 1.0 -> "1", 0.01 -> "0.01", inf -> "+Inf" (an override that disables)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)).removesuffix(".0")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> int:
    """A Prometheus duration of one unit ("15m") in seconds."""
    try:
        return int(duration[:-1]) * _UNITS[duration[-1]]
    except (KeyError, ValueError):
        raise ValueError(f"duration {duration!r}: use a number and one of s, m, h, d") from None


def _positive_duration(value: object) -> bool:
    """Whether `value` is a duration of one unit above zero as Prometheus reads it ("45m": digits, no sign)."""
    return isinstance(value, str) and re.fullmatch(r"[0-9]+[smhd]", value) is not None and seconds(value) > 0


def _is_number(value: object) -> bool:
    """Whether `value` is an int or a float (YAML's `yes` is a bool, not 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_LINKS = ("runbook_base", "grafana_url")
_STREAKS = ("kl_steps", "drift_steps")


def duration(secs: int) -> str:
    """Seconds as a Prometheus duration of one unit: 7200 -> "2h"."""
    for unit, size in sorted(_UNITS.items(), key=lambda u: -u[1]):
        if secs % size == 0:
            return f"{secs // size}{unit}"
    raise AssertionError("every integer is a number of seconds")


def run_floor(s: RuleSettings, name: str, runs: str) -> str:
    """The floor `name` (seconds) of each run in `runs` (a vector by run_id): its override where one exists,
    the setting elsewhere."""
    default = f"(0 * {runs} + {seconds(getattr(s, name))})"
    if not s.overridden(name):
        return default
    return f"({THRESHOLD_RECORD}{name} or on (run_id) {default})"


def threshold_rules(s: RuleSettings) -> list[dict]:
    """One recording rule per overridden threshold or floor (in seconds) of a run: a constant carrying its run_id."""
    return [{"record": THRESHOLD_RECORD + name,
             "expr": f"vector({seconds(value) if name in FLOORS else _num(value)})", "labels": {"run_id": run_id}}
            for run_id, values in s.overrides.items() for name, value in values.items()]


def recording_rules(s: RuleSettings) -> dict:
    """Per-run threshold overrides (used by alerts), and bucket/counter rates (dashboards)."""
    rules = threshold_rules(s)
    for key in HISTOGRAMS:
        base = prometheus_name(key)
        rules.append({
            "record": f"run_id_le:{base}_bucket:rate",
            "expr": f"sum by (run_id, le) (rate({base}_bucket{{{ONE_RANK}}}[{s.histogram_window}]))",
        })
    for key in LABELLED_HISTOGRAMS:  # one quantile per label value: the label stays
        base, label = prometheus_name(key), catalog.get(key).label
        ranks = "" if key in PER_RANK_HISTOGRAMS else f"{{{ONE_RANK}}}"
        rules.append({
            "record": f"run_id_{label}_le:{base}_bucket:rate",
            "expr": f"sum by (run_id, {label}, le) (rate({base}_bucket{ranks}[{s.histogram_window}]))",
        })
    for key in COUNTERS:
        name = prometheus_name(key)
        rules.append({
            "record": f"run_id:{name.removesuffix('_total')}:rate",
            "expr": f"sum by (run_id) (rate({name}{{{ONE_RANK}}}[{s.rate_window}]))",
        })
    return {"groups": [{"name": "grpo-recording", "rules": rules}]}


__all__ = ["FLOORS", "ONE_RANK", "RuleSettings", "STEP_THRESHOLDS", "THRESHOLDS", "prometheus_name", "promql_string",
           "recording_rules", "run_floor", "seconds"]
