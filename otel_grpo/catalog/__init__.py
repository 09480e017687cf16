"""The one table of every GRPO signal: key, OpenTelemetry name, kind, unit, reduction, aliases.

Instruments, Prometheus names, dashboards, alert rules and docs all derive from
or are checked against `SIGNALS`.

    >>> from otel_grpo import catalog
    >>> catalog.get("kl").prometheus_name
    'grpo_kl'
    >>> catalog.resolve("completions/clipped_ratio")[0].key
    'completions_clipped_ratio'
"""

from . import spans
from ._alert_annotations import CLOCK_OFFSET_ANNOTATION
from ._lookup import EVAL_KEY, PEERS, by_name, evaluation_key, get, peer_names, resolve, split_stat_key, stat_key
from ._peer_logs import is_evaluation, is_train_summary, peer_scalars
from ._signal import Group, Kind, Reduction, Signal, sanitize_key
from ._step_checks import (
    Baseline,
    CHECK_INPUTS,
    END_GONE_AFTER_S,
    END_WAIT_S,
    PROCESS,
    STEP_CHECKS,
    STEP_THRESHOLDS,
    STOPS_TRAINING,
    STREAKS,
    TREND,
    TRENDS,
    StepCheck,
    Streaks,
    bound_label,
    judged,
    load_rule_settings,
    process_id,
    reached,
    run_thresholds,
)
from ._table import SIGNALS, STATE_GAUGES, TRAINER_STATE

__all__ = [
    "Baseline",
    "CHECK_INPUTS",
    "CLOCK_OFFSET_ANNOTATION",
    "END_GONE_AFTER_S",
    "END_WAIT_S",
    "EVAL_KEY",
    "PEERS",
    "PROCESS",
    "SIGNALS",
    "STATE_GAUGES",
    "STEP_CHECKS",
    "STEP_THRESHOLDS",
    "STOPS_TRAINING",
    "STREAKS",
    "TRAINER_STATE",
    "Group",
    "Kind",
    "Reduction",
    "Signal",
    "TREND",
    "TRENDS",
    "StepCheck",
    "Streaks",
    "bound_label",
    "by_name",
    "evaluation_key",
    "get",
    "is_evaluation",
    "is_train_summary",
    "judged",
    "load_rule_settings",
    "peer_names",
    "peer_scalars",
    "process_id",
    "reached",
    "resolve",
    "run_thresholds",
    "sanitize_key",
    "spans",
    "split_stat_key",
    "stat_key",
]
