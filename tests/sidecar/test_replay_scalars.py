"""A replay stores each step's scalars as the live export stored them: under the attempt of the record that wrote
them, so that a newer attempt's claim of the step keeps and removes of them what it did live."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from tests._support.replay import replay_spill

pytestmark = pytest.mark.integration
RUN = "relaunched"


def _telemetry(url: str, out: Path, exported: bool = True) -> Telemetry:
    return Telemetry(TelemetrySettings(
        run_id=RUN, output_dir=out, otlp_protocol="http/protobuf", otlp_traces_endpoint=f"{url}/v1/traces",
        metrics_exporters=["none"], traces_exporters=["otlp" if exported else "none"], shutdown_timeout_s=5))


def _train(tel: Telemetry, steps, kl: float) -> None:
    for step in steps:
        with tel.step(step) as s:
            s.record({"kl": kl + step})


def _scalars(url: str) -> dict[int, dict]:
    """Each step's scalars as the API's steps read serves them (no time: a replay cannot know it to the ns)."""
    rows = httpx.get(f"{url}/api/runs/{RUN}/steps", params={"limit": 1000}, timeout=10).json()
    return {r["step"]: {k: v for k, v in r.items() if k.startswith("grpo.")} for r in rows}


def test_a_relaunchs_evaluation_stays_when_its_training_takes_the_step_over_after_a_replay(sidecar_factory, tmp_path,
                                                                                            monkeypatch):
    """The first attempt trained steps 0-5 and crashed; its relaunch evaluated at its checkpoint's step 3, then
    trained from 3. Live, the evaluation's scalars are the relaunch's (`grpo.writer_attempt`): its claim of step 3
    removes the crashed attempt's training there and keeps them. The same run beside it, with its sidecar down
    until after that evaluation: its spill replayed sent the evaluation's scalars merged into the crashed
    attempt's claim of step 3, so the relaunch's claim, arriving live next, removed them with that training."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the down sidecar's exports give up at once
    live, replayed = sidecar_factory(db=tmp_path / "live.db"), sidecar_factory(db=tmp_path / "replayed.db")

    crashed = _telemetry(live.url, tmp_path / "live")
    _train(crashed, range(6), 10.0)
    crashed.shutdown()
    relaunch = _telemetry(live.url, tmp_path / "live")
    relaunch.log_metrics(3, {"eval_accuracy": 0.5, "eval_loss": 1.5}, evaluation=True)
    _train(relaunch, range(3, 8), 20.0)
    relaunch.shutdown()

    out = tmp_path / "replayed"
    crashed = _telemetry(replayed.url, out, exported=False)  # the sidecar was down: all in the spill alone
    _train(crashed, range(6), 10.0)
    crashed.shutdown()
    replayed.kill()
    relaunch = _telemetry(replayed.url, out)
    relaunch.log_metrics(3, {"eval_accuracy": 0.5, "eval_loss": 1.5}, evaluation=True)
    relaunch.flush(5)  # its export failed: the spill alone holds the evaluation
    replayed.proc = None
    replayed.start()  # back, on the same port and database
    replay_spill(replayed.url, out)
    _train(relaunch, range(3, 8), 20.0)  # exported live from here on
    relaunch.shutdown()

    expected = {step: {"grpo.kl": (10.0 if step < 3 else 20.0) + step} for step in range(8)}
    expected[3].update({"grpo.eval/accuracy": 0.5, "grpo.eval/loss": 1.5})
    assert _scalars(live.url) == expected
    assert _scalars(replayed.url) == expected
    replay_spill(replayed.url, out)  # the whole spill again: nothing changes
    assert _scalars(replayed.url) == expected
