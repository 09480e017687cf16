"""A step that diverged (NaN or inf) is a gap in the sidecar, never the last finite value, from `Telemetry` through
OTLP into a real sidecar on both backends, and again through `otel-grpo replay` of its spill."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
RUN = "diverged"


def _steps(url: str) -> dict[int, dict]:
    return {r["step"]: r for r in httpx.get(f"{url}/api/runs/{RUN}/steps", timeout=10).json()}


def _latest(url: str) -> tuple:
    run = httpx.get(f"{url}/api/runs/{RUN}", timeout=10).json()
    return run["latest_reward"], run["latest_kl"]


def test_a_diverged_step_is_null_in_the_sidecar_and_after_replay(sidecar_factory, db, tmp_path, monkeypatch):
    sidecar = sidecar_factory(db=db)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{sidecar.url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    out = tmp_path / "run"
    tel = Telemetry(TelemetrySettings(run_id=RUN, output_dir=out, metrics_exporters=["none"],
                                      traces_exporters=["otlp"]))
    for step in (1, 2):
        tel.log_metrics(step, {"reward": 0.3 * step, "kl": 0.01 * step, "loss": 0.5})
    tel.log_metrics(3, {"kl": 0.6})  # a finite value, then the step's later record of it: NaN
    tel.log_metrics(3, {"reward": float("nan"), "kl": float("nan"), "loss": float("inf")})
    tel.finish()
    wait_for(lambda: 3 in _steps(sidecar.url), "step 3 stored", timeout=30)

    three = _steps(sidecar.url)[3]
    assert (three.get("grpo.reward.mean"), three.get("grpo.kl"), three.get("grpo.loss")) == (None, None, None)
    assert _steps(sidecar.url)[2]["grpo.kl"] == pytest.approx(0.02)
    assert _latest(sidecar.url) == (None, None)  # the runs list says so too, not step 2's values

    fresh = sidecar_factory(db=tmp_path / "fresh.db")
    replayed = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "replay", str(out), "--endpoint", fresh.url],
                              capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    wait_for(lambda: 3 in _steps(fresh.url), "step 3 replayed", timeout=30)
    assert _steps(fresh.url)[3].get("grpo.kl") is None and _latest(fresh.url) == (None, None)
