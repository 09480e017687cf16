"""Two records of one step that each carry sample rows (a training step, then an evaluation at that step; two
`logged_step`s of one step) through OTLP into a real sidecar on both backends, and through the spill and
`otel-grpo replay`: every row of both records stored, once, each under its own `sample_index`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from tests._support.replay import replay_spill

pytestmark = pytest.mark.integration
RUN = "records"


def _telemetry(url: str, out: Path, **extra) -> Telemetry:
    return Telemetry(TelemetrySettings(**{
        "run_id": RUN, "output_dir": out, "otlp_protocol": "http/protobuf", "otlp_traces_endpoint": f"{url}/v1/traces",
        "metrics_exporters": ["none"], "traces_exporters": ["otlp"], "top_k": 8, "bottom_k": 0, "random_k": 0,
        "shutdown_timeout_s": 5, **extra}))


def _rows(tag: str, n: int) -> list[dict]:
    return [{"prompt": f"{tag}-p{i}", "completion": f"{tag}-{i}", "reward": float(i)} for i in range(n)]


def _train(tel: Telemetry) -> set[tuple[int, str]]:
    """Step 3: a training record and an evaluation's; step 4: two generation batches, the second sent twice (a
    follower's re-send after a failed export: the same rows again). The (step, completion) of every row."""
    with tel.step(3) as s:
        s.record({"kl": 0.1})
        s.samples(_rows("train", 3))
    with tel.logged_step(3, evaluation=True) as s:
        s.record({"eval_reward": 0.9})
        s.samples(_rows("eval", 3))
    with tel.step(4) as s:
        s.record({"kl": 0.2})
        s.samples(_rows("a", 2))
    for _ in range(2):
        with tel.logged_step(4) as s:
            s.samples(_rows("b", 2))
    assert tel.flush(10)  # the sidecar answers an export once it committed it
    tel.finish()
    return {(3, f"{tag}-{i}") for tag in ("train", "eval") for i in range(3)} | {
        (4, f"{tag}-{i}") for tag in ("a", "b") for i in range(2)}


def _stored(url: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/runs/{RUN}/samples", params={"step_min": 0, "limit": 1000}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _assert_every_row_once(url: str, handed: set[tuple[int, str]]) -> None:
    rows = _stored(url)
    assert sorted((r["step"], r["completion"]) for r in rows) == sorted(handed)
    for step in (3, 4):  # a step's rows are told apart by their index, as the page's sample links do
        indices = sorted(r["sample_index"] for r in rows if r["step"] == step)
        assert indices == list(range(len(indices)))  # the second record's numbered on after the first's
    assert httpx.get(f"{url}/api/runs/{RUN}", timeout=10).json()["sample_count"] == len(handed)


def test_every_record_of_a_step_stores_its_rows_live_and_once_again_after_areplay_spill(sidecar_factory, db, tmp_path):
    sidecar = sidecar_factory(db=db)
    out = tmp_path / "run"
    handed = _train(_telemetry(sidecar.url, out))
    _assert_every_row_once(sidecar.url, handed)
    replay_spill(sidecar.url, out)  # every row sent again: stored once
    _assert_every_row_once(sidecar.url, handed)


def test_a_relaunch_numbers_anew_and_replaces_the_crashed_attempts_rows(sidecar_factory, db, tmp_path):
    sidecar = sidecar_factory(db=db)
    _train(_telemetry(sidecar.url, tmp_path / "first"))
    again = _telemetry(sidecar.url, tmp_path / "again")  # a newer attempt trains step 4 again
    with again.step(4) as s:
        s.samples(_rows("c", 1))
    with again.logged_step(4, evaluation=True) as s:
        s.samples(_rows("d", 2))
    assert again.flush(10)
    again.finish()
    rows = _stored(sidecar.url)
    assert sorted((r["sample_index"], r["completion"]) for r in rows if r["step"] == 4) == [
        (0, "c-0"), (1, "d-0"), (2, "d-1")]
    assert len([r for r in rows if r["step"] == 3]) == 6  # the crashed attempt's earlier step stays
