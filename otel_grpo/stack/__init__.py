"""The observability stack around a GRPO run: rules, dashboards, configs and the local runner.

    otel-grpo up          # sidecar + Prometheus + Alertmanager on 127.0.0.1
    otel-grpo demo        # the same plus the demo trainer, then a summary
    otel-grpo dashboards  # regenerate the committed dashboards and rule files

Compose mode uses the committed files under `prometheus/`, `alertmanager/` and
`grafana/`; local mode renders the same configuration with local addresses.
"""

from ._rules import RuleSettings, alert_rules, recording_rules, rule_metric_names

__all__ = ["RuleSettings", "alert_rules", "recording_rules", "rule_metric_names"]
