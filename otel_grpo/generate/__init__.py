"""Every generated file of the stack: rules, alerts, dashboards, configs, the Helm chart's files, docs, promtool tests.

    otel-grpo dashboards          # regenerate the committed files
    otel-grpo dashboards --check  # exit 1 naming the files that are out of date

    from otel_grpo.generate import RuleSettings, alert_rules, generated_files
    alert_rules(RuleSettings(kl_threshold=2.0))  # the alert rule file as a dict
    generated_files()                            # {"prometheus/rules/grpo_alerts.yml": "...", ...}

Everything here is a pure function of the catalog and `RuleSettings`: it renders
files and runs nothing. Compose mode uses the committed files under `prometheus/`,
`alertmanager/` and `grafana/`; `otel_grpo.stack` (the local runner) renders the
same configuration with local addresses.
"""

from ._alerts import alert_rules, alerts
from ._checks import rule_metric_names
from ._configs import Targets, alertmanager_config, dump, prometheus_config, write_files
from ._docs import doc_files
from ._files import compose_files, generated_files, rule_files
from ._kubernetes import kubernetes_files
from ._promtool import promtool_tests
from ._routing import ROUTING_FILE, Destination, Routing, class_of
from ._rules import FLOORS, THRESHOLDS, RuleSettings, recording_rules
from .dashboards import dashboard_files

__all__ = [
    "RuleSettings",
    "Destination",
    "ROUTING_FILE",
    "Routing",
    "class_of",
    "FLOORS",
    "THRESHOLDS",
    "Targets",
    "alert_rules",
    "alertmanager_config",
    "alerts",
    "compose_files",
    "dashboard_files",
    "doc_files",
    "dump",
    "generated_files",
    "kubernetes_files",
    "prometheus_config",
    "promtool_tests",
    "recording_rules",
    "rule_files",
    "rule_metric_names",
    "write_files",
]
