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

from pathlib import Path

from ._alerts import alert_rules, alerts
from ._configs import Targets, alertmanager_config, compose_files, dump, prometheus_config, rule_files, write_files
from ._docs import doc_files
from ._kubernetes import kubernetes_files
from ._promtool import SCENARIOS, TESTS, promtool_tests
from ._rules import THRESHOLDS, RuleSettings, recording_rules, rule_metric_names
from .dashboards import dashboard_files


def generated_files(root: Path | None = None, settings: RuleSettings | None = None) -> dict[str, str]:
    """Every committed generated file by repository path: dashboards, rules, configs, docs, promtool tests,
    the Helm chart's files.

    `settings`: thresholds and windows of the rules and dashboards (default `RuleSettings()`).
    The promtool tests are rendered from `prometheus/tests/scenarios.yml` under `root`
    (default: the checkout this package runs from) for the defaults only: their
    expectations are the defaults'. Left out where that file is absent.
    """
    root = root or Path(__file__).resolve().parents[2]
    files = {**dashboard_files(settings), **compose_files(settings), **doc_files(), **kubernetes_files(root, settings)}
    if (root / SCENARIOS).exists() and (settings is None or settings == RuleSettings()):
        files[TESTS] = promtool_tests(root)
    return files


__all__ = [
    "RuleSettings",
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
