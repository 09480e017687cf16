"""An evaluation's value of a training statistic in the sidecar's step row: from `Telemetry` through OTLP into a
real sidecar on both backends, beside the step's training value, never in its place."""

from __future__ import annotations

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
RUN = "evaluated"


def test_an_evaluations_plain_key_is_the_steps_eval_column(sidecar_factory, db, tmp_path, monkeypatch):
    sidecar = sidecar_factory(db=db)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{sidecar.url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    tel = Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path, metrics_exporters=["none"],
                                      traces_exporters=["otlp"]))

    def step(number: int) -> dict:
        rows = httpx.get(f"{sidecar.url}/api/runs/{RUN}/steps", timeout=10).json()
        return next((r for r in rows if r["step"] == number), {})

    try:
        tel.log_metrics(1, {"reward": 0.5, "kl": 0.1})
        tel.log_metrics(1, {"reward": 0.9, "kl": 0.3}, evaluation=True)
        assert tel.flush(10)  # both records exported: the sidecar answered only once it committed them
        one = wait_for(lambda: step(1), "step 1's row", timeout=30)
    finally:
        tel.finish()
    assert one["grpo.reward.mean"] == pytest.approx(0.5) and one["grpo.kl"] == pytest.approx(0.1)
    assert one["grpo.eval/reward"] == pytest.approx(0.9) and one["grpo.eval/kl"] == pytest.approx(0.3)
