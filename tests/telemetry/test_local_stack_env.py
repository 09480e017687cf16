"""The trainer exactly as the local stack starts it: metrics pulled, traces pushed over OTLP/HTTP."""

from __future__ import annotations

import urllib.request

from otel_grpo.telemetry import Telemetry

from ._receiver import OTLPReceiver, attrs


def test_local_stack_environment_end_to_end(tmp_path, monkeypatch):
    with OTLPReceiver() as rx:
        for name, value in {
            "OTEL_GRPO_METRICS_EXPORTERS": "prometheus",
            "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{rx.port}/v1/traces",
            "OTEL_GRPO_PROMETHEUS_PORT": "0",  # a free port instead of 9464
        }.items():
            monkeypatch.setenv(name, value)
        tel = Telemetry.from_env(run_id="local-1", output_dir=str(tmp_path))
        try:
            with tel.step(0) as s:
                s.record({"kl": 0.5, "clip_ratio/high_mean": 0.25})
            assert tel.flush(10)
            with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        finally:
            tel.shutdown()
    assert 'grpo_kl{' in text and 'run_id="local-1"' in text and "grpo_clip_ratio_high{" in text
    (step,) = [s for s in rx.spans() if s.name == "grpo.step"]
    assert attrs(step.attributes)["grpo.metric.clip_ratio_high_mean"] == 0.25
    assert rx.metrics == []  # metrics are pulled, not pushed
