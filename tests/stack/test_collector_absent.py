"""Absent is absent through the collector too: a statistic the latest step did not give leaves the
collector's Prometheus endpoint at the next export, not `metric_expiration` (2 minutes) later.

The real collector (built from collector/builder-config.yaml) runs compose's collector/config.yaml; a real
`Telemetry` exports to it over OTLP/gRPC and OTLP/HTTP; what Prometheus would scrape is read from the
collector's exporter. The pull endpoint: tests/telemetry/test_prometheus.py; the OTLP data points:
tests/telemetry/test_absent_gauges.py.
"""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from otel_grpo.stack._process import Managed
from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration

TOKEN = "absent-otlp-token"


@pytest.fixture(scope="module")
def collector(root, tmp_path_factory, free_port_factory, otelcol):
    d = tmp_path_factory.mktemp("collector")
    ports = {k: free_port_factory() for k in ("grpc", "http", "exporter", "health", "self")}
    (d / "otlp_token").write_text(TOKEN)
    (d / "sidecar_token").write_text("unused")
    env = {"OTELCOL_BIND": "127.0.0.1", "OTELCOL_HEALTH_PORT": str(ports["health"]),
           "OTELCOL_OTLP_GRPC_PORT": str(ports["grpc"]), "OTELCOL_OTLP_HTTP_PORT": str(ports["http"]),
           "OTELCOL_PROMETHEUS_PORT": str(ports["exporter"]), "OTELCOL_METRICS_PORT": str(ports["self"]),
           "OTELCOL_STORAGE_DIR": str(d / "storage"), "OTEL_GRPO_SIDECAR_URL": "http://127.0.0.1:9",
           "OTELCOL_SIDECAR_TOKEN_FILE": str(d / "sidecar_token"), "OTELCOL_OTLP_TOKEN_FILE": str(d / "otlp_token")}
    proc = Managed("collector", [otelcol, f"--config={root / 'collector/config.yaml'}"],
                   f"http://127.0.0.1:{ports['health']}/", d / "collector.log", env=env)
    proc.start()
    try:
        proc.wait_ready(60)
        yield ports
    finally:
        proc.stop()


def _all_served(ports: dict, run_id: str) -> dict[str, float]:
    """What the collector's Prometheus endpoint serves for `run_id` now: sample name -> value."""
    text = httpx.get(f"http://127.0.0.1:{ports['exporter']}/metrics", timeout=10).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.labels.get("run_id") == run_id and "metric" not in s.labels}


def _served(ports: dict, run_id: str, step: int) -> dict[str, float]:
    """What the collector's Prometheus endpoint serves for `run_id` once it has `step`'s export (its batch
    processor passes it on within a second): sample name -> value."""
    def served() -> dict[str, float]:
        out = _all_served(ports, run_id)
        return out if out.get("grpo_step_index") == step else {}

    return wait_for(served, f"step {step}'s export on the collector's Prometheus endpoint", timeout=30)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_statistic_the_latest_step_lacks_leaves_the_collector_at_the_next_export(collector, protocol, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")
    run_id = f"absent-{protocol.split('/')[0]}"
    endpoint = f"http://127.0.0.1:{collector['grpc' if protocol == 'grpc' else 'http']}"  # plain, no TLS
    # A metric export interval longer than the test: every export here is a flush
    tel = Telemetry(TelemetrySettings(run_id=run_id, output_dir=tmp_path, otlp_endpoint=endpoint,
                                      otlp_protocol=protocol, metrics_exporters=["otlp"], traces_exporters=["none"],
                                      metric_export_interval_ms=600_000, spill_samples=False))
    try:
        tel.log_metrics(1, {"kl": 0.1, "reward": 0.5, "rewards/fmt/mean": 0.25})
        assert tel.flush(10)
        served = _served(collector, run_id, 1)
        assert served["grpo_kl"] == 0.1 and served["grpo_reward_mean"] == 0.5
        assert served["grpo_reward_fn_mean"] == 0.25
        tel.log_metrics(2, {"kl": 0.2})  # no generation at this step (TRL's second iteration)
        assert tel.flush(10)
        served = _served(collector, run_id, 2)
        assert served["grpo_kl"] == 0.2
        # before: 0.5 and 0.25, served as current until metric_expiration
        assert "grpo_reward_mean" not in served and "grpo_reward_fn_mean" not in served
        tel.log_metrics(3, {"kl": 0.3, "reward": 0.75})
        assert tel.flush(10)
        served = _served(collector, run_id, 3)
        assert served["grpo_reward_mean"] == 0.75 and "grpo_reward_fn_mean" not in served
    finally:
        tel.shutdown()


def test_a_relaunch_under_the_same_run_id_ends_the_crashed_attempts_statistics_at_its_start(collector, tmp_path,
                                                                                              monkeypatch):
    """The relaunch exports under the crashed process's target labels: before, the collector served the crashed
    attempt's statistics as current until metric_expiration (2 minutes), while the relaunch started."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")
    run_id = "relaunched"
    settings = dict(run_id=run_id, output_dir=tmp_path, otlp_endpoint=f"http://127.0.0.1:{collector['grpc']}",
                    otlp_protocol="grpc", metrics_exporters=["otlp"], traces_exporters=["none"],
                    metric_export_interval_ms=600_000, spill_samples=False)
    crashed = Telemetry(TelemetrySettings(**settings))
    relaunch = None
    try:
        crashed.log_metrics(5, {"kl": 0.1, "reward": 0.5, "rewards/fmt/mean": 0.25})
        assert crashed.flush(10)
        started = _served(collector, run_id, 5)["grpo_process_start_time_seconds"]
        # the crashed process exports nothing more (its next export is 10 minutes away); the relaunch starts, in a
        # later second: a process's start time is in whole seconds (its `process` attribute), and a relaunch within
        # the crashed one's first second would announce the same one (as the test did in 3 of 10 runs under load)
        time.sleep(1.01 - time.time() % 1)
        relaunch = Telemetry(TelemetrySettings(**settings))

        def announced() -> dict[str, float]:
            served = _all_served(collector, run_id)
            return served if served.get("grpo_process_start_time_seconds", started) != started else {}

        served = wait_for(announced, "the relaunch's first export on the collector's Prometheus endpoint", timeout=30)
        assert "grpo_kl" not in served and "grpo_reward_mean" not in served  # before: 0.1 and 0.5
        relaunch.log_metrics(3, {"kl": 0.3})  # resumed from an earlier checkpoint
        assert relaunch.flush(10)
        served = _served(collector, run_id, 3)
        assert served["grpo_kl"] == 0.3 and "grpo_reward_mean" not in served
    finally:
        if relaunch is not None:
            relaunch.shutdown()
        crashed.shutdown()
