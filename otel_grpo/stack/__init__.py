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

from pathlib import Path

from ._configs import compose_files
from ._docs import doc_files
from ._kubernetes import kubernetes_files
from ._demo import DemoSettings, DemoSummary, format_summary, run_demo, trainer_command
from ._local import LocalStack, StackSettings, write_local_configs
from ._process import StackError, find_binary
from ._alerts import alert_rules, alerts
from ._rules import THRESHOLDS, RuleSettings, recording_rules, rule_metric_names
from ._promtool import SCENARIOS, TESTS, promtool_tests
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
