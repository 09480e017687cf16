"""Grafana panel JSON and the PromQL for one catalog signal, kept apart from the layout."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from otel_grpo.catalog import Kind, Signal, get

from ._rules import ONE_RANK

PROM = {"type": "prometheus", "uid": "${datasource}"}
"""Panels use the dashboard's datasource variable (default: the provisioned uid `prom`)."""
PROM_UID = "prom"
INFINITY = {"type": "yesoreyeram-infinity-datasource", "uid": "${sidecar}"}
"""Sample, alert and run panels use the dashboard's sidecar variable (default: the provisioned uid `infinity`):
several sidecars in one Grafana (a chart release per namespace) are picked there, not mixed."""
INFINITY_UID = "infinity"
RUN = 'run_id=~"$run_id"'  # multi-select: several runs side by side
RATE = "$__rate_interval"
RATES = ".*/s.*"
"""Legends of per-second series: where they share the panel's axis with values of another unit (a step index, a
duration's quantiles), a right axis of their own (`axes`)."""
RUN_SERIES = f"{RUN}, {ONE_RANK}"
"""The selected runs' own series (`ONE_RANK`): what every rank exports identically is counted, and drawn, once."""
# Quantiles drawn from the per-sample histograms (the exact p05/p50/p95 gauges of the
# reward come from the trainer; these cover every histogram the same way).
QUANTILES = (0.1, 0.5, 0.9)


def current_copy(series: str, ignoring: tuple[str, ...] = ()) -> str:
    """`series` (gauges of the selected runs) from the copy of each run (and rank) that its exporter vouched for
    last: its `grpo.process.alive_until` is the run's largest. Other copies hold a dead process's last values: a
    crashed attempt's under other target labels after a relaunch (another world size or service name), or a
    collector replica's that a run moved away from; a collector serves them until its metric_expiration (2
    minutes), and a `max by (run_id)` over every copy would mix them in. `ignoring`: the series' own labels, which
    the liveness series has not (`Signal.point_labels`): without them `and` matches nothing."""
    alive = f"{get('alive').prometheus_name}{{{RUN}}}"
    freshest = f"({alive} == on (run_id, rank) group_left max by (run_id, rank) ({alive}))"
    matching = f" ignoring ({', '.join(ignoring)})" if ignoring else ""
    return f"({series} and{matching} {freshest})"


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel."""

    expr: str
    legend: str
    instant: bool = False


@dataclass(slots=True)
class Panel:
    """A panel before layout: a title, its queries and how to draw them."""

    title: str
    queries: list[Query] = field(default_factory=list)
    kind: str = "timeseries"
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    infinity: dict | None = None
    """An Infinity (sidecar JSON) target instead of PromQL queries."""
    threshold: float | None = None
    """An alert threshold (from `RuleSettings`), drawn as a dashed red line."""
    log_scale: bool = False
    """Only for signals that are never negative or zero: a log axis hides such values."""
    repeat: str | None = None
    """A dashboard variable: one copy of the panel per selected value (a table of one run each)."""
    right_axis: dict[str, str] = field(default_factory=dict)
    """Series (legend regex) drawn on a right axis with their own unit: mixed units in one panel."""
    per_second: bool = False
    """Every series is per second, legends without `/s` too (a throughput gauge beside a counter's rate): one axis."""
    partition_by: str | None = None
    """An Infinity table's column whose values split it into one series each (runs overlaid in one panel)."""
    signals: tuple[str, ...] = ()
    """Catalog keys the panel draws (its queries may select them otherwise than `signal_queries` does)."""


def unit_of(signal: Signal) -> str:
    """Grafana unit for a catalog unit."""
    return {"s": "s", "By": "bytes", "{ratio}": "percentunit"}.get(signal.unit, "short")


def signal_queries(signal: Signal) -> list[Query]:
    """The default way to draw one signal: the gauge, the counter's rate, or histogram quantiles."""
    name, label = signal.prometheus_name, signal.label
    # Several runs can be selected: every legend names its run.
    legend = (f"{signal.key} {{{{{label}}}}}" if label else signal.key) + " {{run_id}}"
    if signal.kind is Kind.GAUGE:
        by = f"run_id, {label}" if label else "run_id"
        return [Query(f"max by ({by}) {current_copy(f'{name}{{{RUN}}}', signal.point_labels)}", legend)]
    if signal.kind is Kind.COUNTER:
        by = f"run_id, {label}" if label else "run_id"
        return [Query(f"sum by ({by}) (rate({name}{{{RUN_SERIES}}}[{RATE}]))", f"{legend} /s")]
    return histogram_queries(signal)


def histogram_queries(signal: Signal) -> list[Query]:
    """Quantiles from the recorded bucket rates, and the observation rate."""
    name = signal.prometheus_name
    # The recorded bucket rates span `histogram_window` (at least a step of slow runs), not
    # $__rate_interval: a window shorter than a step is empty between two steps.
    if signal.label:
        rec = f"run_id_{signal.label}_le:{name}_bucket:rate"
        by, tag = f"run_id, {signal.label}, le", f" {{{{{signal.label}}}}} {{{{run_id}}}}"
    else:
        rec = f"run_id_le:{name}_bucket:rate"
        by, tag = "run_id, le", " {{run_id}}"
    queries = [
        Query(f"histogram_quantile({q}, sum by ({by}) ({rec}{{{RUN}}}))", f"p{int(q * 100):02d}{tag}")
        for q in QUANTILES
    ]
    # Observations per second from the +Inf bucket, not a mean from _sum/_count: the
    # Python Prometheus exporter omits _sum and _count of histograms whose buckets go
    # below zero (reward, advantage), so only _bucket exists in both modes.
    count_by = by.removesuffix(", le")
    queries.append(Query(f'sum by ({count_by}) ({rec}{{{RUN}, le="+Inf"}})', f"observations /s{tag}"))
    return queries


def _prom_target(i: int, q: Query) -> dict:
    target = {"refId": chr(ord("A") + i), "datasource": PROM, "expr": q.expr, "legendFormat": q.legend}
    if q.instant:
        target.update(instant=True, range=False, format="table")
    return target


def render(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    """Grafana panel JSON at grid position (x, y)."""
    out: dict = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
    }
    if panel.repeat is not None:
        out.update(repeat=panel.repeat, repeatDirection="v")
    if panel.infinity is not None:
        out["datasource"] = INFINITY
        out["targets"] = [{"refId": "A", "datasource": INFINITY, **panel.infinity}]
        if panel.kind == "trend":  # x is the step, not the time: runs line up by step
            out["options"] = {"xField": "step", "legend": {"showLegend": True, "displayMode": "list",
                                                           "placement": "bottom", "calcs": []}}
            if panel.partition_by is not None:  # one series per value (run), named by it
                out["transformations"] = [{"id": "partitionByValues", "options": {
                    "fields": [panel.partition_by], "keepFields": False, "naming": {"asLabels": True}}}]
                out["fieldConfig"] = {"defaults": {"displayName": f"${{__field.labels.{panel.partition_by}}}"},
                                      "overrides": []}
        else:
            out["options"] = {"showHeader": True, "cellHeight": "sm"}
        return out
    out["datasource"] = PROM
    out["targets"] = [_prom_target(i, q) for i, q in enumerate(panel.queries)]
    if panel.kind == "timeseries":
        out["fieldConfig"] = _field_config(panel)
        out["options"] = {
            "legend": {"showLegend": True, "displayMode": "table", "placement": "right", "calcs": ["lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "none"},
        }
    return out


def _field_config(panel: Panel) -> dict:
    custom: dict = {"lineWidth": 1, "fillOpacity": 0, "showPoints": "never"}
    defaults: dict = {"unit": panel.unit, "custom": custom}
    if panel.log_scale:
        custom["scaleDistribution"] = {"type": "log", "log": 10}
    if panel.threshold is not None:
        custom["thresholdsStyle"] = {"mode": "dashed"}
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"color": "transparent", "value": None}, {"color": "red", "value": panel.threshold}]}
    overrides = [{
        "matcher": {"id": "byRegexp", "options": pattern},
        "properties": [{"id": "unit", "value": unit}, {"id": "custom.axisPlacement", "value": "right"}],
    } for pattern, unit in axes(panel).items()]
    return {"defaults": defaults, "overrides": overrides}


def axes(panel: Panel) -> dict[str, str]:
    """The panel's right axes: its own (`right_axis`), and the per-second rates' where they would share the
    panel's axis and unit with other values (a duration's quantiles in seconds beside their observations /s)."""
    out = dict(panel.right_axis)
    if panel.per_second:
        return out
    left = [q.legend for q in panel.queries if not any(re.fullmatch(p, q.legend) for p in out)]
    if any(re.fullmatch(RATES, legend) for legend in left) and not all(re.fullmatch(RATES, lg) for lg in left):
        out[RATES] = "short"
    return out


def row(title: str, panel_id: int, y: int, collapsed: bool = False) -> dict:
    """A row header spanning the full width; a collapsed row holds its panels in `panels`."""
    return {
        "id": panel_id, "type": "row", "title": title, "collapsed": collapsed,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
    }
