"""A replay stores each sample row as the live export stored it: the same run exported live into one sidecar
and its spill replayed into another, by the real CLI, read the same."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.telemetry._samples import EVENT_ATTRIBUTE_LIMIT, TRUNCATION_MARKER

from tests._support.replay import replay_spill

pytestmark = pytest.mark.integration


def _rows(url: str, run_id: str) -> dict[tuple[int, int], dict]:
    rows = httpx.get(f"{url}/api/runs/{run_id}/samples", params={"step_min": 0, "limit": 1000}, timeout=30).json()
    # `time`: an event's, which a replay cannot know to the nanosecond
    return {(r["step"], r["sample_index"]): {k: v for k, v in r.items() if k != "time"} for r in rows}


def _live(url: str, out: Path, run_id: str, steps: list[list[dict]], first: int = 0, **extra) -> None:
    """Export `steps` (each step's rows, every one kept; the first is step `first`) live to the sidecar at `url`;
    each step is flushed alone."""
    tel = Telemetry(TelemetrySettings(
        run_id=run_id, output_dir=out, otlp_protocol="http/protobuf", otlp_traces_endpoint=f"{url}/v1/traces",
        metrics_exporters=["none"], traces_exporters=["otlp"], top_k=0, bottom_k=0, random_k=1000,
        shutdown_timeout_s=30, **extra))
    for step, rows in enumerate(steps, first):
        with tel.step(step) as s:
            s.record({"kl": 0.1})
            s.samples(rows)
        assert tel.flush(30)
    tel.shutdown()


def _same_live_and_replayed(sidecar_factory, tmp_path: Path, steps: list[list[dict]], env: dict | None = None,
                            **extra) -> dict[tuple[int, int], dict]:
    live = sidecar_factory(db=tmp_path / "live.db", env=env)
    replayed = sidecar_factory(db=tmp_path / "replayed.db", env=env)
    out = tmp_path / "run"
    _live(live.url, out, "rows", steps, **extra)
    stored = _rows(live.url, "rows")
    assert len(stored) == sum(map(len, steps))
    replay_spill(replayed.url, out)
    again = _rows(replayed.url, "rows")
    assert again.keys() == stored.keys()
    for key, row in stored.items():  # a row at a time: a readable difference
        assert again[key] == row
    return stored


@pytest.mark.parametrize("max_chars", [None, 100])
def test_a_replay_cuts_texts_as_the_live_export_did(sidecar_factory, tmp_path, monkeypatch, max_chars):
    """The spill keeps texts whole; the export cuts each at `max_text_chars` with a marker, `truncated` and the
    original length. A replay sent the whole text, so a replayed store held what the live one never did. A run
    that sets `OTEL_GRPO_MAX_TEXT_CHARS` replays with it too."""
    if max_chars is not None:
        monkeypatch.setenv("OTEL_GRPO_MAX_TEXT_CHARS", str(max_chars))
    cut = max_chars or TelemetrySettings.model_fields["max_text_chars"].default
    rows = [{"prompt": "p" * (cut + 1), "completion": "c" * 10_000, "answer": "a" * 5000, "reward": 0.5},
            {"prompt": "p", "completion": "c" * cut, "reward": 0.25}]
    stored = _same_live_and_replayed(sidecar_factory, tmp_path, [rows])
    long, short = stored[(0, 0)], stored[(0, 1)]
    assert long["completion"] == "c" * cut + TRUNCATION_MARKER and long["completion_original_length"] == 10_000
    assert long["truncated"] is True and long["prompt_original_length"] == cut + 1
    assert short["truncated"] is False and short["completion"] == "c" * cut


def test_a_replay_cuts_texts_at_the_max_text_chars_each_process_set_in_code(sidecar_factory, tmp_path, monkeypatch):
    """A run that sets `max_text_chars` in code, not in the environment (here 100, and its relaunch 300): its export
    cut texts there, and a replay without `--max-text-chars` cut them at 4096, so a replayed row held what the live
    one never did. Each step line of the spill says its process's cut; a replay cuts each row at its writer's, and
    `--max-text-chars` given overrides it."""
    monkeypatch.delenv("OTEL_GRPO_MAX_TEXT_CHARS", raising=False)
    live, replayed = sidecar_factory(db=tmp_path / "live.db"), sidecar_factory(db=tmp_path / "replayed.db")
    out = tmp_path / "run"
    rows = [{"prompt": "p" * 150, "completion": "c" * 500, "reward": 0.5}, {"prompt": "p", "completion": "c" * 80}]
    _live(live.url, out, "rows", [rows, rows], max_text_chars=100)
    _live(live.url, out, "rows", [rows, rows], first=2, max_text_chars=300)  # the relaunch, another setting
    stored = _rows(live.url, "rows")
    assert {step: stored[(step, 0)]["completion"] for step in range(4)} == {
        step: "c" * (100 if step < 2 else 300) + TRUNCATION_MARKER for step in range(4)}
    assert stored[(0, 0)]["prompt"] == "p" * 100 + TRUNCATION_MARKER and stored[(2, 0)]["prompt"] == "p" * 150
    replay_spill(replayed.url, out)
    again = _rows(replayed.url, "rows")
    assert again.keys() == stored.keys()
    for key, row in stored.items():  # a row at a time: a readable difference
        assert again[key] == row
    overridden = sidecar_factory(db=tmp_path / "overridden.db")
    replay_spill(overridden.url, out, 0, "--max-text-chars", "50")
    assert {r["completion"] for r in _rows(overridden.url, "rows").values()} == {"c" * 50 + TRUNCATION_MARKER}


def test_a_run_exported_live_replays_however_large_its_rows(sidecar_factory, tmp_path, monkeypatch):
    """A long-context run raises `max_text_chars`: its rows are megabytes each. Live, each step went in an export
    of its own, under the sidecar's body limit (6 MiB here, 64 MiB by default); a replay filled a request up to
    4 MiB and then added a whole span more, past the limit: 413, and nothing of the run was stored. Requests
    and spans are cut by their encoded size."""
    monkeypatch.setenv("OTEL_GRPO_MAX_TEXT_CHARS", str(2_000_000))
    big = 1_900_000
    steps = [[{"prompt": f"{step}-{i}", "completion": "c" * big, "reward": i / 4} for i in range(rows)]
             for step, rows in enumerate((2, 2, 3))]
    stored = _same_live_and_replayed(sidecar_factory, tmp_path, steps,
                                     env={"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": str(6 * 1024 * 1024)})
    assert {len(row["completion"]) for row in stored.values()} == {big}


def test_a_list_column_replays_as_the_array_the_live_export_sent(sidecar_factory, tmp_path):
    """A row's list of numbers (per-token log-probs) or texts goes out as an OTLP array and is stored as a list;
    a replay sent the spill's JSON text of it, stored as a string."""
    rows = [{"prompt": "p", "completion": "c", "reward": 0.5, "token_logprobs": [-0.5, -1.25, math.nan],
             "tools": ["search", "calc"]}]
    (row,) = _same_live_and_replayed(sidecar_factory, tmp_path, [rows]).values()
    assert row["token_logprobs"][:2] == [-0.5, -1.25] and row["tools"] == ["search", "calc"]


def test_a_row_wider_than_an_event_keeps_its_own_columns_live_and_replayed(sidecar_factory, tmp_path, caplog):
    """The tracer provider keeps `EVENT_ATTRIBUTE_LIMIT` attributes an event and drops the oldest beyond it. A wide
    row lost its first columns, its prompt, completion and reward among them, without a word, and a replay sent every
    column of the spill. Now its first extra columns go, one warning says so, and the replay drops the same."""
    cut = TelemetrySettings.model_fields["max_text_chars"].default
    wide = {"prompt": "p", "completion": "c", "reward": 0.5, **{f"col.{i:03}": i for i in range(EVENT_ATTRIBUTE_LIMIT)},
            "answer": "a" * (cut + 1)}
    narrow = {"prompt": "p", "completion": "c", "reward": 0.25, "col.000": 0}
    with caplog.at_level("WARNING", logger="otel_grpo.telemetry"):
        stored = _same_live_and_replayed(sidecar_factory, tmp_path, [[wide, narrow]])
    row = stored[(0, 0)]
    assert (row["prompt"], row["completion"], row["reward"]) == ("p", "c", 0.5)
    assert row["answer_original_length"] == cut + 1 and row["truncated"] is True and row["selection"] == "random"
    extra = sorted(k for k in row if k.startswith("col.")) + ["answer"] * ("answer" in row)
    first = int(extra[0].removeprefix("col."))  # the last ones, in the order the row had them
    assert first > 0 and extra == [f"col.{i:03}" for i in range(first, EVENT_ATTRIBUTE_LIMIT)] + ["answer"]
    assert stored[(0, 1)]["prompt"] == "p" and stored[(0, 1)]["col.000"] == 0
    warned = [r.getMessage() for r in caplog.records if "over the 512 a sample event holds" in r.getMessage()]
    assert len(warned) == 1 and "not exported (the spill keeps them)" in warned[0], warned


def test_a_replay_keeps_texts_that_read_nan_or_inf_apart_from_numbers(sidecar_factory, tmp_path):
    """The spill wrote a non-finite number as "nan", "inf" or "-inf", the same as a text of that value, and
    a replay took such a text (a model's answer "inf") for a number, stored as null."""
    rows = [{"prompt": "p", "completion": "nan", "answer": "inf", "extracted": "-inf", "reward": math.nan,
             "rewards": {"format": math.inf, "exact": -math.inf}}]
    (row,) = _same_live_and_replayed(sidecar_factory, tmp_path, [rows]).values()
    assert (row["completion"], row["answer"], row["extracted"]) == ("nan", "inf", "-inf")
    assert (row["reward"], row["reward.format"], row["reward.exact"]) == (None, None, None)


def test_an_older_spill_reads_as_it_did_where_it_can(sidecar_factory, tmp_path, monkeypatch):
    """Releases before wrote a non-finite number as the bare text "nan", "inf" or "-inf". A step line's scalar
    is always a number, so there it still is one; in a sample row it is a text (an older spill cannot tell it
    from a number: its NaN reward goes as the text, and the store's reward is null either way). Nor did their
    step lines say the run's `max_text_chars`: texts are cut at `OTEL_GRPO_MAX_TEXT_CHARS`, else 4096."""
    monkeypatch.setenv("OTEL_GRPO_MAX_TEXT_CHARS", "100")
    sidecar = sidecar_factory()
    out = tmp_path / "run"
    (out / "samples").mkdir(parents=True)
    (out / "steps.jsonl").write_text(json.dumps({"run_id": "old", "step": 0, "start_ns": 1, "end_ns": 2,
                                                 "metrics": {"kl": "nan", "loss": "inf", "reward": 0.5},
                                                 "phases": {}}) + "\n")
    (out / "samples" / "step_0.jsonl").write_text(json.dumps(
        {"run_id": "old", "step": 0, "sample_index": 0, "prompt": "p", "answer": "inf", "reward": "nan",
         "completion": "c" * 200}) + "\n")
    replay_spill(sidecar.url, out)
    (step,) = httpx.get(f"{sidecar.url}/api/runs/old/steps", timeout=10).json()
    assert (step.get("grpo.kl"), step.get("grpo.loss"), step["grpo.reward.mean"]) == (None, None, 0.5)
    (row,) = _rows(sidecar.url, "old").values()
    assert (row["answer"], row["reward"]) == ("inf", None)
    assert row["completion"] == "c" * 100 + TRUNCATION_MARKER and row["completion_original_length"] == 200
