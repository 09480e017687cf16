"""The local (no-Docker) stack around a GRPO run: starts the sidecar, Prometheus and Alertmanager as processes.

    otel-grpo up          # sidecar + Prometheus + Alertmanager on 127.0.0.1
    otel-grpo demo        # the same plus the demo trainer, then a summary

    from otel_grpo.stack import LocalStack, StackSettings
    with LocalStack(StackSettings(dir=Path(".demo"))) as stack:
        print(stack.urls)

The files it runs with come from `otel_grpo.generate` (rules, dashboards, configs),
rendered with local addresses; this package re-exports that package's main names
(`RuleSettings`, `alert_rules`, `generated_files`, ...) for existing imports. The
generation side never imports this one.
"""

from otel_grpo.generate import (THRESHOLDS, RuleSettings, alert_rules, alerts, compose_files, dashboard_files,
                                doc_files, generated_files, recording_rules, rule_metric_names)

from ._demo import DemoSettings, DemoSummary, format_summary, run_demo, trainer_command
from ._local import LocalStack, StackSettings, write_local_configs
from ._process import Backend, StackError, find_binary

__all__ = [
    "Backend",
    "DemoSettings",
    "DemoSummary",
    "LocalStack",
    "RuleSettings",
    "StackError",
    "StackSettings",
    "THRESHOLDS",
    "alert_rules",
    "alerts",
    "compose_files",
    "dashboard_files",
    "doc_files",
    "find_binary",
    "format_summary",
    "generated_files",
    "recording_rules",
    "rule_metric_names",
    "run_demo",
    "trainer_command",
    "write_local_configs",
]
