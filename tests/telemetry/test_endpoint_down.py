"""The collector is down for the whole run: training finishes, one warning, the spill is complete."""

from __future__ import annotations

import json
import logging

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from .conftest import free_port


def test_200_steps_against_a_closed_port(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the SDK's per-request deadline, in seconds
    closed = free_port()
    settings = TelemetrySettings(
        run_id="down", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{closed}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], metric_export_interval_ms=100,
        output_dir=tmp_path, top_k=3, bottom_k=3, random_k=2, shutdown_timeout_s=4,
    )
    caplog.set_level(logging.WARNING)
    tel = Telemetry(settings)
    for step in range(200):
        with tel.step(step) as s:
            with s.phase("rollout"):
                pass
            s.record({"kl": 0.01 * step, "reward": 0.5, "tokens": 64})
            s.samples([{"prompt": f"{step}-{i}", "completion": "x", "reward": (i * 7 % 16) / 16} for i in range(16)])
    tel.shutdown()

    assert tel.export_health.failures >= 1
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(("opentelemetry", "otel_grpo"))]
    assert len(noisy) == 1, [r.getMessage() for r in noisy]
    assert "failed" in noisy[0].getMessage() and f":{closed}" in noisy[0].getMessage()

    files = sorted((tmp_path / "samples").glob("step_*.jsonl"))
    assert len(files) == 200
    for step in (0, 99, 199):
        rows = [json.loads(line) for line in (tmp_path / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        kept = 16 if 0.01 * step > 1.0 else 8  # a step whose KL crosses the threshold keeps every row
        assert len(rows) == kept
        assert {r["prompt"].split("-")[0] for r in rows} == {str(step)}
        assert len({r["sample_index"] for r in rows}) == kept


def test_flush_says_false_when_its_timeout_passes_on_a_dead_endpoint(tmp_path):
    """The SDK's own force_flush retries a dead endpoint for its whole export timeout (10 s) and then
    reports success; `flush(timeout)` answers within its timeout that the data did not go out."""
    settings = TelemetrySettings(
        run_id="down-flush", otlp_protocol="http/protobuf", otlp_endpoint=f"http://127.0.0.1:{free_port()}",
        metrics_exporters=["otlp"], traces_exporters=["otlp"], output_dir=tmp_path,
    )
    tel = Telemetry(settings)
    with tel.step(0) as s:
        s.record({"kl": 0.1})
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    assert tel.flush(0.5) is False
    tel.shutdown()
    assert (tmp_path / "samples" / "step_0.jsonl").exists()
