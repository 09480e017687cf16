"""Every exporting rank's sample rows, from two `Telemetry` objects (ranks 0 and 1 of one job, `export_all_ranks`)
through OTLP into a real sidecar on both backends, and through the spill and `otel-grpo replay`: each row stored
once, none taken for another rank's row of the same step."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from tests._support.replay import replay_spill

pytestmark = pytest.mark.integration
RUN = "ranks"
STEPS, ROWS = (1, 2), 4


def _ranks(url: str, out: Path, monkeypatch, **extra) -> dict[int, Telemetry]:
    """Ranks 0 and 1 of a two-process job, each selecting among its own rows (no process group: `per_rank`, and
    `global` too), spilling into one output dir and, unless `extra` turns it off, exporting to the sidecar."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    ranks = {}
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        ranks[rank] = Telemetry(TelemetrySettings(**{
            "run_id": RUN, "output_dir": out, "otlp_protocol": "http/protobuf",
            "otlp_traces_endpoint": f"{url}/v1/traces", "metrics_exporters": ["none"], "traces_exporters": ["otlp"],
            "export_all_ranks": True, "top_k": 2, "bottom_k": 2, "random_k": 0, "shutdown_timeout_s": 5, **extra}))
    assert {rank: tel.rank for rank, tel in ranks.items()} == {0: 0, 1: 1}  # not both made as one rank
    return ranks


def _train(ranks: dict[int, Telemetry]) -> set[tuple[int, str]]:
    """Each rank keeps all 4 of its rows at each step (top 2 + bottom 2); the (step, completion) of every row."""
    handed = set()
    for step in STEPS:
        for rank, tel in ranks.items():
            with tel.step(step) as s:
                s.record({"reward": 0.5})
                s.samples([{"prompt": "p", "completion": f"rank{rank}-{step}-{i}", "reward": i / 4}
                           for i in range(ROWS)])
            handed |= {(step, f"rank{rank}-{step}-{i}") for i in range(ROWS)}
    for tel in ranks.values():
        assert tel.flush(10)  # the sidecar answers an export once it committed it
        tel.finish()
    return handed


def _stored(url: str) -> list[dict]:
    answer = httpx.get(f"{url}/api/runs/{RUN}/samples", params={"step_min": 0, "limit": 1000}, timeout=10)
    return answer.json() if answer.status_code == 200 else []


def _assert_every_row_once(url: str, handed: set[tuple[int, str]]) -> None:
    rows = _stored(url)
    assert sorted((r["step"], r["completion"]) for r in rows) == sorted(handed)
    for step in STEPS:  # a step's rows are told apart by their index, as the page's sample links do
        indices = [r["sample_index"] for r in rows if r["step"] == step]
        assert len(set(indices)) == len(indices) == 2 * ROWS
    assert all(r["sample_index"] % 2 == r["source_rank"] for r in rows)
    assert httpx.get(f"{url}/api/runs/{RUN}", timeout=10).json()["sample_count"] == len(handed)


@pytest.mark.parametrize("reduce", ["per_rank", "global"])
def test_every_ranks_rows_are_stored_live_and_once_again_after_areplay_spill(sidecar_factory, db, tmp_path, monkeypatch,
                                                                        reduce):
    sidecar = sidecar_factory(db=db)
    out = tmp_path / "run"
    handed = _train(_ranks(sidecar.url, out, monkeypatch, sample_reduce=reduce))
    _assert_every_row_once(sidecar.url, handed)
    replay_spill(sidecar.url, out)  # every row sent again: stored once
    _assert_every_row_once(sidecar.url, handed)


def test_a_replayed_spill_of_every_rank_is_stored_once(sidecar_factory, db, tmp_path, monkeypatch):
    sidecar = sidecar_factory(db=db)
    out = tmp_path / "run"
    handed = _train(_ranks(sidecar.url, out, monkeypatch, sample_reduce="per_rank", traces_exporters=["none"]))
    assert sorted(p.name for p in (out / "samples").iterdir()) == [
        f"step_{step}_rank{rank}.jsonl" for step in STEPS for rank in (0, 1)]
    replay_spill(sidecar.url, out)
    _assert_every_row_once(sidecar.url, handed)
    replay_spill(sidecar.url, out)
    _assert_every_row_once(sidecar.url, handed)
