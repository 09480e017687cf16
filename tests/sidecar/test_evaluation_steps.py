"""An evaluation's value of a training statistic in the sidecar's step row: from `Telemetry` through OTLP into a
real sidecar on both backends, beside the step's training value, never in its place; verl's validation metrics
there and on the trainer's pull endpoint as the evaluation's, `grpo.eval`."""

from __future__ import annotations

import urllib.request

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
RUN = "evaluated"


def _step(url: str, number: int) -> dict:
    rows = httpx.get(f"{url}/api/runs/{RUN}/steps", timeout=10).json()
    return next((r for r in rows if r["step"] == number), {})


def test_an_evaluations_plain_key_is_the_steps_eval_column(sidecar_factory, db, tmp_path, monkeypatch):
    sidecar = sidecar_factory(db=db)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{sidecar.url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    tel = Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path, metrics_exporters=["none"],
                                      traces_exporters=["otlp"]))

    def step(number: int) -> dict:
        return _step(sidecar.url, number)

    try:
        tel.log_metrics(1, {"reward": 0.5, "kl": 0.1})
        tel.log_metrics(1, {"reward": 0.9, "kl": 0.3}, evaluation=True)
        assert tel.flush(10)  # both records exported: the sidecar answered only once it committed them
        one = wait_for(lambda: step(1), "step 1's row", timeout=30)
    finally:
        tel.finish()
    assert one["grpo.reward.mean"] == pytest.approx(0.5) and one["grpo.kl"] == pytest.approx(0.1)
    assert one["grpo.eval/reward"] == pytest.approx(0.9) and one["grpo.eval/kl"] == pytest.approx(0.3)


def test_verls_validation_metrics_are_the_evaluations(sidecar_factory, db, tmp_path, monkeypatch):
    """`log_metrics(..., source="verl")` with verl's `val-core/<data source>/<var>/<metric>` and `val-aux/...`: on
    its own (`val_before_train`) and beside a training step's values (`test_freq`), each is `grpo_eval{metric=<the
    name after val->}` on the pull endpoint and `grpo.eval/<that name>` in the step row, as TRL's `eval_reward` is
    `grpo.eval/reward`; the training values stay on their own series."""
    sidecar = sidecar_factory(db=db)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{sidecar.url}/v1/traces")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    tel = Telemetry(TelemetrySettings(run_id=RUN, output_dir=tmp_path, metrics_exporters=["prometheus"],
                                      prometheus_port=0, traces_exporters=["otlp"]))
    core, aux = "val-core/openai/gsm8k/reward/mean@4", "val-aux/openai/gsm8k/reward/std@4"
    try:
        tel.log_metrics(0, {core: 0.25, "val-aux/num_turns/mean": 1.0}, source="verl", evaluation=True)
        tel.log_metrics(1, {"critic/score/mean": 0.5, "actor/pg_loss": 0.1, core: 0.75, aux: 0.5}, source="verl")
        assert tel.flush(10)
        with urllib.request.urlopen(f"http://127.0.0.1:{tel.prometheus_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        tel.log_metrics(1, {"eval_reward": 0.9}, source="trl", evaluation=True)  # TRL's evaluation: the same column
        assert tel.flush(10)
        zero = wait_for(lambda: _step(sidecar.url, 0), "step 0's row", timeout=30)
        one = wait_for(lambda: _step(sidecar.url, 1).get("grpo.eval/reward") and _step(sidecar.url, 1),
                       "step 1's rows", timeout=30)
    finally:
        tel.finish()
    served = {line.split('metric="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("grpo_eval{")}
    # step 1's validation is the latest: what it did not report (step 0's num_turns) has no data point
    assert served == {"core/openai/gsm8k/reward/mean@4": 0.75, "aux/openai/gsm8k/reward/std@4": 0.5}
    assert not any(line.startswith("grpo_extra_val") for line in text.splitlines())
    assert any(line.startswith("grpo_reward_mean{") and line.endswith(" 0.5") for line in text.splitlines())
    assert one["grpo.eval/reward"] == pytest.approx(0.9)
    assert zero["grpo.eval/core/openai/gsm8k/reward/mean@4"] == pytest.approx(0.25)
    assert zero["grpo.eval/aux/num_turns/mean"] == pytest.approx(1.0)
    assert one["grpo.eval/core/openai/gsm8k/reward/mean@4"] == pytest.approx(0.75)
    assert one["grpo.eval/aux/openai/gsm8k/reward/std@4"] == pytest.approx(0.5)
    assert one["grpo.reward.mean"] == pytest.approx(0.5) and one["grpo.loss.policy"] == pytest.approx(0.1)
    assert not any(column.startswith("val") for column in (*zero, *one))
