"""The alerts' memory of a run that stopped (otel_grpo/generate/_memory.py), through promtool.

The alert group reads minutes of a process's series and the memory group's records of them, which that
group re-reads every `memory_interval`; the rules are evaluated here as Prometheus schedules their groups
(`as_scheduled`: the memory group every 10 minutes only). A crashed run must page without a break for as long
as `absent_window`, and then be forgotten, its clock offsets included.
"""

from __future__ import annotations

import subprocess

import yaml

from otel_grpo.generate import RuleSettings, rule_files
from otel_grpo.generate._configs import dump
from otel_grpo.generate._promtool import as_scheduled, input_series
from otel_grpo.generate._subset import needed_rules

SETTINGS = RuleSettings(absent_window="3h")  # a day, shortened: the same records at another window
CRASH = {"run_id": "r", "step": "1m", "values": {"kl": "0.1*30"}, "end": "crash"}  # 30 steps, then killed
FIRING = 'ALERTS{alertname="GRPOMetricsAbsent", alertstate="firing", run_id="r"}'


def _promtool(promtool: str, tmp_path, checks: list[dict]) -> subprocess.CompletedProcess:
    docs = {rel: yaml.safe_load(text) for rel, text in rule_files(SETTINGS).items()}
    for rel, doc in needed_rules(docs, {"GRPOMetricsAbsent"}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(dump(as_scheduled(doc, "1m")))
    test = {"interval": "1m", "input_series": input_series({"interval": "1m", "length": "5h", "runs": [CRASH]}),
            "promql_expr_test": checks}
    (tmp_path / "t.yml").write_text(dump({"rule_files": list(docs), "evaluation_interval": "1m", "tests": [test]}))
    return subprocess.run([promtool, "test", "rules", "t.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)


def test_a_crashed_run_pages_without_a_break_for_the_absent_window_then_is_forgotten(promtool, tmp_path):
    checks = [
        # The memory group wrote at its own interval only: 6 records in an hour.
        {"expr": "count_over_time(series:grpo_process_alive_until_seconds:last_3h[1h])", "eval_time": "2h",
         "exp_samples": [{"labels": '{instance="r", job="grpo-trainer", run_id="r"}', "value": 6}]},
        # Firing at every evaluation from 1 to 3 hours after the crash: long after the run's own samples left
        # the alert group's windows (31.5 min), across the memory group's writes.
        {"expr": f"sum(count_over_time({FIRING}[2h]))", "eval_time": "3h30m", "exp_samples": [{"value": 120}]},
        {"expr": "run_id:grpo_process:clock_offset_seconds", "eval_time": "3h",
         "exp_samples": [{"labels": 'run_id:grpo_process:clock_offset_seconds{run_id="r"}', "value": 0}]},
        # Forgotten after the window (and the memory's lag): no alert, and no offset kept for ever.
        {"expr": FIRING, "eval_time": "4h30m", "exp_samples": []},
        {"expr": "run_id_job_instance:grpo_process:clock_offset_seconds", "eval_time": "4h30m", "exp_samples": []},
        {"expr": "run_id:grpo_process:clock_offset_seconds", "eval_time": "4h30m", "exp_samples": []},
    ]
    out = _promtool(promtool, tmp_path, checks)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_memory_check_can_fail(promtool, tmp_path):
    """A wrong expectation is reported: the page did break (one evaluation fewer)."""
    out = _promtool(promtool, tmp_path, [{"expr": f"sum(count_over_time({FIRING}[2h]))", "eval_time": "3h30m",
                                          "exp_samples": [{"value": 119}]}])
    assert out.returncode != 0 and "got: {} 1.2E+02" in out.stdout + out.stderr
