"""The observability stack around a GRPO run: rules, dashboards, configs and the local runner.

    otel-grpo up          # sidecar + Prometheus + Alertmanager on 127.0.0.1
    otel-grpo demo        # the same plus the demo trainer, then a summary
    otel-grpo dashboards  # regenerate the committed dashboards and rule files

    from otel_grpo.stack import LocalStack, StackSettings
    with LocalStack(StackSettings(dir=Path(".demo"))) as stack:
        print(stack.urls)

Compose mode uses the committed files under `prometheus/`, `alertmanager/` and
`grafana/`; local mode renders the same configuration with local addresses.
"""

from ._configs import compose_files
from ._demo import DemoSettings, DemoSummary, format_summary, run_demo, trainer_command
from ._local import LocalStack, StackSettings, write_local_configs
from ._process import StackError, find_binary
from ._rules import RuleSettings, alert_rules, recording_rules, rule_metric_names
from .dashboards import dashboard_files


def doc_files() -> dict[str, str]:
    """Docs generated from the catalog: the TRL-to-catalog mapping."""
    from otel_grpo.integrations.trl import render_markdown

    return {"docs/integrations.md": render_markdown()}


def generated_files() -> dict[str, str]:
    """Every committed generated file by repository path: dashboards, rules, configs, catalog docs."""
    return {**dashboard_files(), **compose_files(), **doc_files()}


__all__ = [
    "DemoSettings",
    "DemoSummary",
    "LocalStack",
    "RuleSettings",
    "StackError",
    "StackSettings",
    "alert_rules",
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
