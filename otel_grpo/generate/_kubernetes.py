"""The Helm chart's generated files (deploy/helm/otel-grpo/files/): rules, dashboards, collector config,
Alertmanager config.

The chart's templates wrap these in a PrometheusRule, Grafana dashboard ConfigMaps and the
collector's ConfigMap, so a cluster runs exactly what compose and the tests run: the rule groups
of `recording_rules` + `alert_rules`, the dashboards of `dashboards`, `collector/config.yaml`.
They are plain files read with `.Files.Get` (never templated), so the alerts' `{{ $labels }}`
and the dashboards' `{{alertname}}` reach Prometheus and Grafana as they are.

The chart's ServiceMonitors give the scrape jobs the names compose's prometheus.yml gives them
(`SCRAPE_JOBS`), so rules that match a job (`up{job="sidecar"}`) hold whatever the release and
namespace are called.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

from ._alerts import alert_rules
from ._configs import COMPOSE, HEADER, alertmanager_config, dump
from ._routing import Routing
from ._rules import RuleSettings, recording_rules
from .dashboards import dashboards

CHART = "deploy/helm/otel-grpo"
COLLECTOR_CONFIG = "collector/config.yaml"
ALERTMANAGER_SECRETS = "/etc/alertmanager/secrets"
"""Where the Prometheus Operator mounts each Secret of `alertmanagerSpec.secrets` (a folder per Secret)."""
PLACEHOLDERS = {"sidecar": "@SIDECAR_HOST@", "tokens": "@TOKEN_SECRET@", "alerting": "@ALERTING_SECRET@"}
"""Strings of files/alertmanager.yaml that templates/alertmanager.yaml replaces with the release's names
(the file itself is never templated: its Alertmanager templates reach Alertmanager as written)."""

GRAFANA_PLACEHOLDER = "http://@GRAFANA_URL@"
"""The Grafana base URL of files/prometheus-rule-spec.yaml's `dashboard_url`s, which templates/monitoring.yaml
replaces with `monitoring.prometheusRule.grafanaUrl` (the cluster's Grafana, not compose's localhost:3000)."""

SCRAPE_JOBS = {"collector-exporter": COMPOSE.metrics_job, "collector-self": "otelcol", "sidecar": "sidecar"}
"""ServiceMonitor endpoint -> the `job` label it sets: compose's job names (prometheus_config(COMPOSE))."""


def compact_json(dashboard: dict) -> str:
    """A dashboard as the chart's ConfigMap holds it: no indentation. `kubectl apply` (client-side, also
    Argo CD's default) copies the whole object into its last-applied-configuration annotation, which
    the API server caps at 262,144 bytes; grpo-overview indented came to 290 KB there, compact to 190 KB."""
    return json.dumps(dashboard, separators=(",", ":")) + "\n"


def prometheus_rule_spec(s: RuleSettings) -> dict:
    """A PrometheusRule's `spec`: the recording groups first (the alerts use their series), then the alerts."""
    return {"groups": recording_rules(s)["groups"] + alert_rules(s)["groups"]}


def helm_alertmanager_config(routing: Routing | None = None) -> dict:
    """The chart's Alertmanager config: compose's routing, with the sidecar's Service and the Secrets that
    kube-prometheus-stack's Alertmanager mounts (`alertmanagerSpec.secrets`) as placeholders."""
    secrets = f"{ALERTMANAGER_SECRETS}/{PLACEHOLDERS['tokens']}"
    return alertmanager_config(f"http://{PLACEHOLDERS['sidecar']}:8000", routing,
                               secrets_dir=f"{ALERTMANAGER_SECRETS}/{PLACEHOLDERS['alerting']}",
                               token_file=f"{secrets}/sidecar_token")


def kubernetes_files(root: Path, settings: RuleSettings | None = None, routing: Routing | None = None) -> dict[str, str]:
    """The chart's generated files by repository path (`root`: the checkout holding collector/config.yaml;
    `routing`: alertmanager/routing.yml's receivers)."""
    s = settings or RuleSettings()
    rules = prometheus_rule_spec(dataclasses.replace(s, grafana_url=GRAFANA_PLACEHOLDER))
    files = {f"{CHART}/files/prometheus-rule-spec.yaml":
             HEADER + yaml.safe_dump(rules, sort_keys=False, width=10_000, allow_unicode=True),
             f"{CHART}/files/alertmanager.yaml": dump(helm_alertmanager_config(routing))}
    files.update({f"{CHART}/files/dashboards/{name}": compact_json(d) for name, d in dashboards(s).items()})
    collector = root / COLLECTOR_CONFIG
    if collector.exists():  # an installed package has no collector/ folder: nothing to copy then
        files[f"{CHART}/files/collector.yaml"] = (
            f"# A copy of {COLLECTOR_CONFIG}, made by `otel-grpo dashboards`; edit that file, not this one.\n"
            + collector.read_text())
    return files
