"""What the tests (and a curious user) check dashboards and rules with.

    >>> sorted(metric_names('sum by (run_id) (rate(grpo_steps_total{run_id="a"}[1m])) > 0'))
    ['grpo_steps_total']
"""

from __future__ import annotations

import re
from typing import Iterator

from otel_grpo import catalog
from otel_grpo.catalog import Kind

from ._alerts import alert_rules
from ._rules import FLOORS, THRESHOLDS, RuleSettings, recording_rules

# Names that are PromQL syntax, not series, when they stand alone.
_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "inf", "nan", "atan2", "start", "end",
})
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
BUILTIN_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})
# The stack's own metrics the alerts watch: the collector's (service.telemetry) and the sidecar's.
STACK_SERIES = frozenset({
    "otelcol_exporter_send_failed_spans_total", "otelcol_exporter_send_failed_metric_points_total",
    "otelcol_exporter_queue_size", "otelcol_exporter_queue_capacity", "otelcol_exporter_enqueue_failed_spans_total",
    "otel_grpo_sidecar_requests_rejected_total", "otel_grpo_sidecar_spans_ingested_total",
    "otelcol_receiver_refused_metric_points_total", "otelcol_receiver_refused_spans_total",
    "alertmanager_notifications_failed_total", "prometheus_notifications_dropped_total",
    "process_start_time_seconds",  # of the sidecar, Prometheus and Alertmanager (their clients' own)
})


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects (functions, keywords, labels and strings removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+\w+", " ", text)
    names = set()
    for m in _IDENT.finditer(text):
        name, rest = m.group(), text[m.end():].lstrip()
        if rest.startswith("(") or name in _KEYWORDS or re.fullmatch(r"\d.*", name):
            continue
        names.add(name)
    return names


_RECORDED_BUCKETS = re.compile(r"^run_id_(?:\w+_)?le:(\w+_bucket):rate$")


def drawn_series(expr: str) -> set[str]:
    """Series an expression draws: its names, with recorded bucket rates read as their `_bucket` series."""
    names = metric_names(expr)
    return names | {m.group(1) for n in names if (m := _RECORDED_BUCKETS.match(n))}


def catalog_series() -> dict[str, str]:
    """Every Prometheus series name the catalog produces -> the signal key."""
    out = {}
    for s in catalog.SIGNALS:
        name = s.prometheus_name
        if s.kind is Kind.HISTOGRAM:
            for suffix in ("_bucket", "_sum", "_count"):
                out[name + suffix] = s.key
        else:
            out[name] = s.key
    return out


def rule_metric_names() -> set[str]:
    """Names the rules define (recording rules, the alert group's streak and progress records too), which
    dashboards may also query."""
    defaults = RuleSettings()
    s = RuleSettings(overrides={"_": {name: getattr(defaults, name) for name in THRESHOLDS + FLOORS}})
    names = set()
    for doc in (recording_rules(s), alert_rules(s)):
        names |= {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    return names


def allowed_series() -> set[str]:
    """Names a dashboard or rule may query: catalog series, recording rules, Prometheus built-ins."""
    return set(catalog_series()) | rule_metric_names() | BUILTIN_SERIES | STACK_SERIES


def dashboard_exprs(dashboard: dict) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL expression) for every Prometheus target of a dashboard."""
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("type") == "prometheus":
                yield panel["title"], target["expr"]


def all_panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, including those inside collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def rule_exprs(settings: RuleSettings | None = None) -> Iterator[tuple[str, str]]:
    """(rule name, expression) for every recording and alert rule."""
    s = settings or RuleSettings()
    for doc in (recording_rules(s), alert_rules(s)):
        for group in doc["groups"]:
            for rule in group["rules"]:
                yield rule.get("record") or rule["alert"], rule["expr"]


def concrete(expr: str, run_id: str, rate_interval: str = "1m") -> str:
    """A dashboard expression with Grafana's variables filled in, ready for /api/v1/query."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$run_id", run_id).replace("${run_id}", run_id)
    return expr.replace("$trl_key", ".*")  # every TRL key drawn as logged (the variable's "All")
