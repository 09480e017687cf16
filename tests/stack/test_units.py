"""The stack's pure pieces: settings validation, the trainer contract, the PromQL name scan."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import httpx
import pytest

import otel_grpo.stack as stack
from otel_grpo.stack import DemoSettings, LocalStack, RuleSettings, StackSettings, trainer_command
from otel_grpo.generate._checks import metric_names
from otel_grpo.stack._demo import DemoSummary, format_summary


def test_public_names_import():
    for name in stack.__all__:
        assert getattr(stack, name) is not None, name


@pytest.mark.parametrize("expr, names", [
    ('max by (run_id) (grpo_kl) > 0.1', {"grpo_kl"}),
    ('histogram_quantile(0.5, sum by (le) (run_id_le:grpo_sample_reward_bucket:rate{run_id="a"}))',
     {"run_id_le:grpo_sample_reward_bucket:rate"}),
    ('x unless on (run_id) max by (run_id) (changes(y[10m])) > 0 and on (run_id) z offset 10m', {"x", "y", "z"}),
    ('ALERTS{alertstate="firing", alertname=~"GRPO.*"}', {"ALERTS"}),
    ('sum by (run_id) (rate(a_bucket{run_id="$run_id", le="+Inf"}[$__rate_interval]))', {"a_bucket"}),
])
def test_metric_names(expr, names):
    assert metric_names(expr) == names


def test_rule_settings_reject_nonsense():
    with pytest.raises(ValueError):
        RuleSettings(kl_threshold=0)
    with pytest.raises(ValueError):
        RuleSettings(entropy_fraction=1.5)
    fast = RuleSettings.fast(kl_threshold=0.2)
    assert fast.kl_threshold == 0.2 and fast.for_fast == "2s"


def test_stack_settings_reject_clashing_ports():
    with pytest.raises(ValueError, match="ports must differ"):
        StackSettings(sidecar_port=9090)
    with pytest.raises(ValueError):
        StackSettings(trainer_metrics_port=70000)


def test_demo_settings_validate_faults():
    assert DemoSettings(faults=("kl-spike@3", "nan@0")).faults == ("kl-spike@3", "nan@0")
    for bad in ("kl-spike", "meltdown@3", "stall@x"):
        with pytest.raises(ValueError):
            DemoSettings(faults=(bad,))


def test_trainer_command_follows_the_local_contract(tmp_path):
    s = StackSettings(dir=tmp_path, sidecar_port=18000, trainer_metrics_port=19464)
    argv, env = trainer_command(s, DemoSettings(run_id="r1", steps=5, faults=("kl-spike@2",)))
    assert argv[1:] == ["-m", "otel_grpo.cli", "train", "--preset", "demo", "--output-dir",
                        str(tmp_path / "runs" / "r1"), "--run-id", "r1", "--steps", "5", "--fault", "kl-spike@2"]
    assert env == {
        "OTEL_GRPO_METRICS_EXPORTERS": "prometheus",
        "OTEL_GRPO_PROMETHEUS_PORT": "19464",
        "OTEL_GRPO_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:18000/v1/traces",
        "OTEL_GRPO_ANOMALY_THRESHOLDS": "kl=1,mismatch_k3_kl=0.01",  # the stack's alert thresholds
    }
    tighter = StackSettings(dir=tmp_path, rules=RuleSettings.fast(mismatch_kl_threshold=0.003))
    assert tighter.trainer_env()["OTEL_GRPO_ANOMALY_THRESHOLDS"] == "kl=1,mismatch_k3_kl=0.003"


def test_summary_text():
    s = DemoSummary(run_id="r1", trainer_exit_code=0, steps=3, reward_first=0.2, reward_last=0.75,
                    alerts_fired=["GRPOKLHigh"], alerts_in_alertmanager=["GRPOKLHigh"], alerts_in_sidecar=[],
                    samples_url="http://127.0.0.1:8000/api/runs/r1/samples", samples_spill=str(Path("x/samples")),
                    sidecar_db="x/sidecar/sidecar.db", urls={}, started_at=0.0, finished_at=1.0)
    text = format_summary(s)
    assert "reward (mean): 0.200 -> 0.750" in text
    assert "alerts fired:  GRPOKLHigh" in text and "reached the sidecar: none" in text
    assert s.samples_url in text
    pages = LocalStack(StackSettings(dir=Path("x"))).run_urls("team/r 1", 1000.0, 1100.0)
    linked = format_summary(DemoSummary(**{**asdict(s), "urls": pages})).splitlines()
    assert "  run explorer     http://127.0.0.1:8000/#/run/team%2Fr%201" in linked
    assert "  alerts received  http://127.0.0.1:8000/api/runs/team/r%201/alerts" in linked
    assert "  samples          http://127.0.0.1:8000/api/runs/team/r%201/samples" in linked
    history = next(line for line in linked if line.startswith("  alert history"))
    assert "/api/v1/query_range?query=ALERTS%7Brun_id%3D%22team%2Fr+1%22" in history  # no web UI: its API
    assert "start=1000&end=1160&step=1s" in history
    stopping = format_summary(s, live=False)  # demo --exit: the stack is about to stop
    assert "http://" not in stopping
    assert "otel-grpo sidecar --db x/sidecar/sidecar.db" in stopping and "x/samples" in stopping
    # a trainer that spilled nothing (it failed before its first step): no claim of a folder that is not there
    unspilled = DemoSummary(**{**asdict(s), "samples_spill": ""})
    assert "samples: none spilled" in format_summary(unspilled, live=False)
    assert "samples spilled  none" in format_summary(unspilled)


def test_the_alerts_link_is_a_page_the_running_prometheus_answers(prometheus_api, free_port_factory):
    from otel_grpo.stack._local import ALERTS_PAGES, find_alerts_page

    path = find_alerts_page(prometheus_api)
    assert path in ALERTS_PAGES and httpx.get(prometheus_api + path, timeout=10).status_code == 200
    # nothing listening: the JSON API, which every Prometheus version serves
    assert find_alerts_page(f"http://127.0.0.1:{free_port_factory()}") == "/api/v1/alerts"


def test_the_pages_after_the_run_leave_out_the_trainers_metrics(tmp_path):
    """`make demo` keeps the stack up after the run: the trainer's /metrics is gone by then."""
    stack = LocalStack(StackSettings(dir=tmp_path, trainer_metrics_port=19464))
    assert stack.urls["trainer metrics"].endswith(":19464/metrics")
    assert not [url for url in stack.run_urls("r1", 0.0, 1.0).values() if ":19464" in url]
