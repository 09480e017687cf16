"""What a relaunched job's records claim, from `Telemetry` through OTLP into a real sidecar on both backends.

A resumed job evaluates at its checkpoint's step before it trains on (verl's `val_before_train`, on by default;
transformers' `eval_on_start`): that step ran once, by the crashed attempt, and must keep its training values and
samples beside the relaunch's evaluation.
"""

from __future__ import annotations

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
RUN = "claims"


def _telemetry(url: str, tmp_path, name: str, monkeypatch) -> Telemetry:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    return Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path / name, metrics_exporters=["none"],
                                       traces_exporters=["otlp"]))


def _train(tel: Telemetry, steps, tag: str) -> None:
    for step in steps:
        with tel.step(step) as s:
            s.record({"reward": 0.1 * step, "kl": 0.01 * step})
            s.samples([{"prompt": "p", "completion": f"{tag}-{step}-{i}", "reward": 0.1 * step} for i in range(4)],
                      group_size=4)


def test_an_evaluation_at_the_resumed_steps_checkpoint_keeps_that_steps_training(sidecar_factory, db, tmp_path,
                                                                                 monkeypatch):
    sidecar = sidecar_factory(db=db)

    def step(number: int) -> dict:
        rows = httpx.get(f"{sidecar.url}/api/runs/{RUN}/steps", timeout=10).json()
        return next((r for r in rows if r["step"] == number), {})

    def completions(number: int) -> list[str]:
        rows = httpx.get(f"{sidecar.url}/api/runs/{RUN}/samples", params={"step": number, "limit": 100}, timeout=10)
        return sorted(r["completion"] for r in rows.json()) if rows.status_code == 200 else []

    crashed = _telemetry(sidecar.url, tmp_path, "a", monkeypatch)
    _train(crashed, range(1, 6), "first")
    assert crashed.flush(10)
    crashed.shutdown()  # crashed after step 5; its last checkpoint: step 3
    wait_for(lambda: len(completions(5)) == 4, "the crashed attempt's steps stored", timeout=30)

    resumed = _telemetry(sidecar.url, tmp_path, "b", monkeypatch)
    resumed.log_metrics(3, {"val-core/acc": 0.5}, source="verl", evaluation=True)  # before its first step
    _train(resumed, range(4, 6), "second")
    resumed.finish()
    wait_for(lambda: completions(5) == [f"second-5-{i}" for i in range(4)], "the relaunch's step 5", timeout=30)
    wait_for(lambda: step(3).get("val_core_acc") == 0.5, "the evaluation stored at step 3", timeout=30)

    three = step(3)
    assert three["grpo.reward.mean"] == pytest.approx(0.3) and three["grpo.kl"] == pytest.approx(0.03)
    assert completions(3) == [f"first-3-{i}" for i in range(4)]  # trained once, by the crashed attempt
    assert completions(4) == [f"second-4-{i}" for i in range(4)]  # trained again: the relaunch's only
