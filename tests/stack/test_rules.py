"""Alert and recording rules: promtool checks and unit tests, committed files current, PromQL valid."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from otel_grpo.stack import RuleSettings, alert_rules, generated_files
from otel_grpo.stack._checks import allowed_series, metric_names, rule_exprs
from otel_grpo.stack._configs import rule_files

ALERTS = {r["alert"] for r in alert_rules(RuleSettings())["groups"][0]["rules"]}


def run(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_committed_generated_files_are_current(root):
    stale = [rel for rel, text in generated_files().items()
             if not (root / rel).exists() or (root / rel).read_text() != text]
    assert stale == [], f"run `otel-grpo dashboards` to regenerate: {stale}"


def test_promtool_check_rules(root, promtool):
    out = run(promtool, "check", "rules", *sorted(str(p) for p in (root / "prometheus/rules").glob("*.yml")))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_check_compose_config(root, promtool):
    out = run(promtool, "check", "config", str(root / "prometheus/prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass(root, promtool):
    out = run(promtool, "test", "rules", "prometheus/tests/grpo_alerts_test.yml", cwd=root)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_silent_case(root):
    doc = yaml.safe_load((root / "prometheus/tests/grpo_alerts_test.yml").read_text())
    firing, silent = set(), set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    assert ALERTS - firing == set(), "alerts without a firing case"
    assert ALERTS - silent == set(), "alerts without a silent case"


def test_alerts_carry_severity_and_name_run_and_value():
    for rule in alert_rules(RuleSettings())["groups"][0]["rules"]:
        assert rule["labels"]["severity"] in {"critical", "warning"}
        summary = rule["annotations"]["summary"]
        assert "$value" in summary or rule["alert"] in {"GRPOCollectorDown", "GRPOSidecarDown"}, rule["alert"]
        if "run_id" in rule["expr"]:
            assert "$labels.run_id" in summary, rule["alert"]


def test_kl_jump_baseline_is_offset_so_a_jump_is_not_absorbed():
    s = RuleSettings()
    baseline = dict(rule_exprs(s))["run_id:grpo_kl:baseline_median"]
    assert f"[{s.baseline_window}] offset {s.baseline_offset}" in baseline


def test_rules_use_only_catalog_metrics():
    allowed = allowed_series()
    for name, expr in rule_exprs():
        assert metric_names(expr) <= allowed, (name, metric_names(expr) - allowed)


@pytest.mark.parametrize("settings", [RuleSettings(), RuleSettings.fast()], ids=["default", "fast"])
def test_rule_expressions_run_on_prometheus_2_42(prometheus_api, http, settings):
    for name, expr in rule_exprs(settings):
        r = http.get(f"{prometheus_api}/api/v1/query", params={"query": expr})
        assert r.status_code == 200 and r.json()["status"] == "success", (name, r.text)


def test_fast_rules_pass_promtool(tmp_path, promtool):
    for rel, text in rule_files(RuleSettings.fast()).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = run(promtool, "check", "rules", *sorted(str(p) for p in (tmp_path / "rules").glob("*.yml")))
    assert out.returncode == 0, out.stdout + out.stderr
