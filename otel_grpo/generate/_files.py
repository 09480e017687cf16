"""Which generated file holds what: the rule files of both modes, compose's committed files, and every
committed generated file (what `otel-grpo dashboards` writes and `--check` compares)."""

from __future__ import annotations

from pathlib import Path

from ._alerts import alert_rules
from ._configs import COMPOSE, RULE_FILES, SECRETS, alertmanager_config, dump, prometheus_config
from ._docs import doc_files
from ._kubernetes import kubernetes_files
from ._promtool import SCENARIOS, TESTS, promtool_tests
from ._routing import Routing, load_routing
from ._rules import RuleSettings, recording_rules
from .dashboards import dashboard_files


def rule_files(s: RuleSettings) -> dict[str, str]:
    """Rule file contents by path relative to the Prometheus config directory."""
    return {RULE_FILES[0]: dump(recording_rules(s)), RULE_FILES[1]: dump(alert_rules(s))}


def compose_files(settings: RuleSettings | None = None, routing: Routing | None = None) -> dict[str, str]:
    """Committed files under `prometheus/` and `alertmanager/`, by repository path (`routing`: the
    receivers of alertmanager/routing.yml; default: none, nothing leaves the host)."""
    files = {f"prometheus/{p}": text for p, text in rule_files(settings or RuleSettings()).items()}
    files["prometheus/prometheus.yml"] = dump(prometheus_config(COMPOSE))
    files["alertmanager/alertmanager.yml"] = dump(alertmanager_config(
        "http://sidecar:8000", routing, secrets_dir=SECRETS, token_file=f"{SECRETS}/sidecar_token"))
    return files


def generated_files(root: Path | None = None, settings: RuleSettings | None = None) -> dict[str, str]:
    """Every committed generated file by repository path: dashboards, rules, configs, docs, promtool tests,
    the Helm chart's files.

    `settings`: thresholds and windows of the rules and dashboards (default `RuleSettings()`).
    The Alertmanager configs route by `root`'s alertmanager/routing.yml (defaults where absent).
    The promtool tests are rendered from `prometheus/tests/scenarios.yml` under `root`
    (default: the checkout this package runs from) for the defaults only: their
    expectations are the defaults'. Left out where that file is absent.
    """
    root = root or Path(__file__).resolve().parents[2]
    routing = load_routing(root)  # alertmanager/routing.yml: compose's and the chart's receivers
    files = {**dashboard_files(settings), **compose_files(settings, routing), **doc_files(),
             **kubernetes_files(root, settings, routing)}
    if (root / SCENARIOS).exists() and (settings is None or settings == RuleSettings()):
        files[TESTS] = promtool_tests(root)
    return files


__all__ = ["compose_files", "generated_files", "rule_files"]
