"""The pull endpoint scraped by a real Prometheus (Debian 2.42); series read back through its HTTP API."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import torch

from otel_grpo import signals
from otel_grpo.catalog import get
from otel_grpo.signals import ReducedStats
from otel_grpo.telemetry import Telemetry, TelemetrySettings

from .conftest import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
needs_prometheus = pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus binary not installed")


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus scraping a target port every second; yields (target_port, api_port)."""
    target, api = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: trainer\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{api}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield target, api
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_for(port: int, expr: str, deadline: float) -> list[dict]:
    while time.monotonic() < deadline:
        try:
            found = _query(port, expr)
        except OSError:  # Prometheus still starting
            found = []
        if found:
            return found
        time.sleep(0.5)
    return []


@pytest.mark.integration
@needs_prometheus
def test_series_names_match_the_catalog(prometheus, tmp_path):
    target, api = prometheus
    settings = TelemetrySettings(
        run_id="prom-1", metrics_exporters=["prometheus"], traces_exporters=["none"],
        prometheus_port=target, output_dir=tmp_path,
    )
    tel = Telemetry(settings)
    try:
        assert tel.prometheus_port == target
        with tel.step(5) as s:
            with s.phase("rollout"):
                pass
            s.record(ReducedStats(
                {"kl": 0.5, "reward_fn_mean/format": 0.25, "step_time": 1.5, "tokens": 128, "my/custom": 2},
                samples={"sample_reward": [0.0, 1.0], "sample_completion_length": [10.0, 20.0, 30.0]},
            ))
        assert tel.flush(10)
        deadline = time.monotonic() + 60
        assert _wait_for(api, 'up{job="trainer"} == 1', deadline), "Prometheus never scraped the trainer"
        run = 'run_id="prom-1"'
        expected = {
            get("kl").prometheus_name: 0.5,
            get("reward_fn_mean").prometheus_name: 0.25,
            get("step_time").prometheus_name: 1.5,  # unit s -> _seconds
            get("tokens").prometheus_name: 128,  # counter -> _total
            get("steps").prometheus_name: 1,
            get("step").prometheus_name: 5,
            get("sample_completion_length").prometheus_name + "_count": 3,
            get("sample_completion_length").prometheus_name + "_sum": 60,
            get("phase_duration").prometheus_name + "_count": 1,
            "grpo_extra_my_custom": 2,
        }
        # Reward buckets start below zero: prometheus_client drops such a histogram's _count
        # (and _sum); Telemetry adds _count back so that compose and local mode agree.
        expected[get("sample_reward").prometheus_name + "_count"] = 2
        exprs = {f"{name}{{{run}}}": value for name, value in expected.items()}
        exprs[get("sample_reward").prometheus_name + f'_bucket{{le="+Inf",{run}}}'] = 2
        for expr, value in exprs.items():
            found = _wait_for(api, expr, deadline)
            assert found, f"no series {expr} in Prometheus"
            assert float(found[0]["value"][1]) == value, expr
        (fmt,) = _query(api, get("reward_fn_mean").prometheus_name)
        assert fmt["metric"]["reward_fn"] == "format"
        (phase,) = _query(api, get("phase_duration").prometheus_name + "_count")
        assert phase["metric"]["phase"] == "rollout"
        le = {r["metric"]["le"] for r in _query(api, get("sample_reward").prometheus_name + "_bucket")}
        assert len(le) == len(get("sample_reward").buckets) + 1  # + "+Inf"
        # Every grpo series carries run_id (resource attributes alone would not reach Prometheus).
        grpo = _query(api, '{__name__=~"grpo_.+"}')
        assert grpo and all(r["metric"].get("run_id") == "prom-1" for r in grpo)
    finally:
        tel.shutdown()


def test_flush_does_not_duplicate_series_on_the_pull_endpoint(tmp_path):
    settings = TelemetrySettings(
        run_id="dup", metrics_exporters=["prometheus"], traces_exporters=["none"], prometheus_port=0,
        output_dir=tmp_path,
    )
    tel = Telemetry(settings)
    try:
        tel.log_metrics(1, {"kl": 0.5})
        assert tel.flush(5) and tel.flush(5)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        tel.shutdown()
    # A duplicated series makes Prometheus reject the sample ("duplicate sample for timestamp").
    assert [line for line in text.splitlines() if line.startswith("grpo_kl{")] == [
        'grpo_kl{otel_scope_name="otel_grpo",otel_scope_schema_url="",otel_scope_version="",run_id="dup"} 0.5'
    ]


_WATCHED = ("grpo_kl{", "grpo_reward_mean{", "grpo_reward_fn_mean{", "grpo_completion_terminated_length_mean{",
            "grpo_step_index{")


@pytest.mark.parametrize("emit_in", ["thread", "process"])
def test_the_pull_endpoint_drops_a_gauge_absent_at_the_latest_step(tmp_path, emit_in):
    """Invalid at that step, not logged at that step, None from a reward function: /metrics stops serving the
    earlier step's value; the step index (not a per-step statistic) stays."""
    settings = TelemetrySettings(
        run_id="absent", metrics_exporters=["prometheus"], traces_exporters=["none"], prometheus_port=0,
        output_dir=tmp_path, emit_in=emit_in,
    )
    tel = Telemetry(settings)

    def scrape() -> dict[str, str]:
        assert tel.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        lines = [line for line in text.splitlines() if line.startswith(_WATCHED)]
        return {line.split("{")[0] + ("/" + line.split('reward_fn="')[1].split('"')[0] if "reward_fn=" in line else ""):
                line.rsplit(" ", 1)[1] for line in lines}

    try:
        truncated = torch.tensor([False, True, False, True])
        with tel.step(1) as s:
            s.record(signals.reduce_stats(signals.length_stats(torch.ones(4, 8), truncated)),
                     **{"kl": 0.5, "reward": 0.5, "rewards/format/mean": 0.25, "rewards/acc/mean": 0.75})
        first = scrape()
        _second_step(tel)
        second = scrape()
    finally:
        tel.shutdown()
    assert first == {"grpo_kl": "0.5", "grpo_reward_mean": "0.5", "grpo_reward_fn_mean/format": "0.25",
                     "grpo_reward_fn_mean/acc": "0.75", "grpo_completion_terminated_length_mean": "8.0",
                     "grpo_step_index": "1.0"}
    assert second == {"grpo_kl": "0.4", "grpo_reward_fn_mean/acc": "1.0", "grpo_step_index": "2.0"}


def test_a_relaunchs_steps_make_the_crashed_attempts_gauges_stale(tmp_path):
    """`follow` re-emits a relaunched job's steps under a newer attempt, from below the crashed attempt's last
    step: a signal only the crashed attempt logged is not served as the relaunch's current value."""
    settings = TelemetrySettings(
        run_id="relaunched", metrics_exporters=["prometheus"], traces_exporters=["none"], prometheus_port=0,
        output_dir=tmp_path,
    )
    tel = Telemetry(settings)

    def served() -> set[str]:
        assert tel.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {line.split("{")[0] for line in text.splitlines() if line.startswith(("grpo_kl{", "grpo_reward_mean{"))}

    try:
        for step in range(1, 7):
            with tel.logged_step(step, attempt=1) as s:
                s.record({"reward": 0.5, **({"kl": 9.99} if step == 6 else {})})
        assert served() == {"grpo_kl", "grpo_reward_mean"}
        with tel.logged_step(4, attempt=2) as s:  # the relaunch resumed from step 3
            s.record({"reward": 0.7})
        assert served() == {"grpo_reward_mean"}
        with tel.logged_step(5, attempt=2) as s:
            s.record({"reward": 0.8})
        assert served() == {"grpo_reward_mean"}
    finally:
        tel.shutdown()


def _second_step(tel: Telemetry) -> None:
    """Every completion hit the length limit (terminated lengths invalid); no `reward` logged (TRL's
    second-iteration step); the format reward function returned None for the whole step (NaN)."""
    with tel.step(2) as s:
        s.record(signals.reduce_stats(signals.length_stats(torch.ones(4, 8), torch.ones(4, dtype=torch.bool))),
                 **{"kl": 0.4, "rewards/format/mean": math.nan, "rewards/acc/mean": 1.0})


@pytest.mark.integration
@needs_prometheus
def test_prometheus_sees_a_gauge_absent_at_the_latest_step_as_gone(prometheus, tmp_path):
    """The series leaves the scrape, so Prometheus marks it stale at once: an instant query has no value, where
    its 5-minute look-back would otherwise still return the earlier step's."""
    target, api = prometheus
    settings = TelemetrySettings(run_id="gone", metrics_exporters=["prometheus"], traces_exporters=["none"],
                                 prometheus_port=target, output_dir=tmp_path)
    tel = Telemetry(settings)
    try:
        tel.log_metrics(1, {"kl": 0.5, "reward": 0.5, "rewards/format/mean": 0.25})
        assert tel.flush(10)
        deadline = time.monotonic() + 60
        assert _wait_for(api, 'grpo_reward_fn_mean{run_id="gone",reward_fn="format"} == 0.25', deadline)
        _second_step(tel)
        assert tel.flush(10)
        assert _wait_for(api, 'grpo_kl{run_id="gone"} == 0.4', deadline)
        time.sleep(2)  # one more scrape at 1 s
        assert _query(api, 'grpo_reward_mean{run_id="gone"}') == []
        assert _query(api, 'grpo_reward_fn_mean{run_id="gone",reward_fn="format"}') == []
        assert [r["value"][1] for r in _query(api, 'grpo_step_index{run_id="gone"}')] == ["2"]
    finally:
        tel.shutdown()


def test_a_busy_port_warns_and_training_goes_on(tmp_path, caplog):
    import logging
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        settings = TelemetrySettings(run_id="busy", metrics_exporters=["prometheus"], traces_exporters=["none"],
                                     prometheus_port=port, output_dir=tmp_path)
        with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
            tel = Telemetry(settings)
        tel.log_metrics(0, {"kl": 0.1})
        tel.shutdown()
    assert tel.prometheus_port is None
    warned = [r.getMessage() for r in caplog.records if str(port) in r.getMessage()]
    assert warned and "OTEL_GRPO_PROMETHEUS_PORT" in warned[0]


def test_an_address_not_of_this_machine_warns_about_the_host_not_the_port(tmp_path, caplog):
    """OTEL_GRPO_PROMETHEUS_HOST=192.0.2.1 (no interface of ours) was told to set OTEL_GRPO_PROMETHEUS_PORT."""
    import logging

    settings = TelemetrySettings(run_id="badhost", metrics_exporters=["prometheus"], traces_exporters=["none"],
                                 prometheus_host="192.0.2.1", prometheus_port=0, output_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="otel_grpo.telemetry"):
        tel = Telemetry(settings)
    tel.shutdown()
    assert tel.prometheus_port is None
    warned = [r.getMessage() for r in caplog.records if "192.0.2.1" in r.getMessage()]
    assert warned and "OTEL_GRPO_PROMETHEUS_HOST" in warned[0] and "PROMETHEUS_PORT" not in warned[0], warned
