"""`/api/steps`: several runs' step history in one table (Grafana's step-aligned run comparison)."""

from __future__ import annotations

import re

import pytest

from otel_grpo.sidecar.api.routes.steps import MAX_ROWS, runs_cap
from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
from otel_grpo.sidecar.store import _step_reads
from tests._support.statements import Statement, read_statements

PB = {"Content-Type": "application/x-protobuf"}


def _load(client, otlp, run_id: str, steps) -> None:
    spans = otlp.spans(run_id, steps, samples=1)
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200


def test_selected_runs_come_in_one_table_run_after_run(client, otlp):
    _load(client, otlp, "run-a", range(3))
    _load(client, otlp, "run-b", range(2))
    _load(client, otlp, "a|b", range(1))  # a run id may hold `|`: the whole value counts too

    def rows(run_id: str, **params) -> list[tuple]:
        body = client.get("/api/steps", params={"run_id": run_id, "metrics": "grpo.kl", "order": "run_id", **params})
        assert body.status_code == 200, body.text
        return [(r["run_id"], r["step"], r["grpo.kl"]) for r in body.json()]

    both = [("run-a", 0, 0.0), ("run-a", 1, 0.01), ("run-a", 2, 0.02), ("run-b", 0, 0.0), ("run-b", 1, 0.01)]
    assert rows("run-a|run-b") == both
    assert rows("run-a|unknown|run-b") == both  # a selection leaves unknown runs out
    assert rows(".*") == [("a|b", 0, 0.0)] + both  # Grafana's "All"
    assert rows("a|b") == [("a|b", 0, 0.0)]
    assert rows("run-a|run-b", step_min=1, limit=1) == [("run-a", 1, 0.01), ("run-b", 1, 0.01)]
    assert rows("unknown") == []
    newest_first = client.get("/api/steps", params={"run_id": ".*", "metrics": "grpo.kl"}).json()  # /api/runs' order
    assert [r["run_id"] for r in newest_first] == ["a|b", "run-b", "run-b", "run-a", "run-a", "run-a"]


def test_a_bad_range_is_a_400_naming_the_parameter(client):
    r = client.get("/api/steps", params={"run_id": ".*", "step_min": 5, "step_max": 1})
    assert r.status_code in (400, 422) and "step_min" in r.text
    assert client.get("/api/steps").status_code == 422  # run_id is required


def _runs(store, count: int, steps: int = 2, at: float = 1_000_000.0) -> None:
    """`count` runs `r00`.. of `steps` steps each, one batch per run, `r00` the least recently updated."""
    for i in range(count):
        batch = Batch()
        batch.runs[f"r{i:02d}"] = {}
        for step in range(steps):
            batch.steps.append(StepRecord(f"r{i:02d}", step, bytes([i, step]) * 4, at, at, {"kl": i + step / 10}))
        store.write_batch(batch, now=at + i)


def _next(response) -> str | None:
    m = re.fullmatch(r'<(\?[^>]*)>; rel="next"', response.headers.get("link", ""))
    return m[1] if m else None


@pytest.mark.parametrize("run_id", [".*", "|".join(f"r{i:02d}" for i in range(7)) + "|nope"])
def test_a_response_holds_at_most_max_runs_and_links_the_rest(client, run_id):
    """Grafana's All over many runs: the first `max_runs` in /api/runs' order, how many matched, and
    the next runs a link away; walking the links gives every run once, with all its rows."""
    _runs(client.app.state.store, 7)
    url, pages, seen = f"/api/steps?run_id={run_id.replace('|', '%7C')}&max_runs=3&metrics=grpo.kl", [], []
    while url is not None:
        r = client.get(url)
        assert r.status_code == 200, r.text
        runs = list(dict.fromkeys(row["run_id"] for row in r.json()))
        pages.append((runs, r.headers["x-total-count"], r.headers.get("x-truncated")))
        seen += [(row["run_id"], row["step"], row["grpo.kl"]) for row in r.json()]
        url = None if _next(r) is None else "/api/steps" + _next(r)
    assert pages == [(["r06", "r05", "r04"], "7", "true"), (["r03", "r02", "r01"], "7", "true"), (["r00"], "7", None)]
    assert seen == [(f"r{i:02d}", s, i + s / 10) for i in reversed(range(7)) for s in range(2)]


def test_a_request_costs_the_same_statements_for_any_number_of_runs(client, monkeypatch):
    """Grafana's All brings its runs' steps up to date in a bounded number of statements (each a round trip
    to the database), not one or two a run: one reads the runs' versions, one per chunk the steps written
    since of the runs that are behind, at most STEP_READ_ROWS rows each; none where every run is current."""
    store = client.app.state.store

    def statements(**params) -> list[Statement]:
        with read_statements(store) as done:
            r = client.get("/api/steps", params={"run_id": ".*", "metrics": "grpo.kl", **params})
            assert r.status_code == 200, r.text
        return done

    _runs(store, 3, steps=3)
    few = [len(statements()), len(statements())]  # every run read whole, then every run current
    _runs(store, 60, steps=3, at=2_000_000.0)  # 57 more runs, and the first 3 written again
    many = [len(statements()), len(statements())]
    assert many == few and few[1] == few[0] - 1  # current: no statement of steps
    store.write_batch(_batch_of("r30", [3]))  # one run behind among current ones
    assert len(statements()) == few[0]
    monkeypatch.setattr(_step_reads, "STEP_READ_ROWS", 10)
    _runs(store, 60, steps=3, at=3_000_000.0)  # every run 3 steps behind: chunks of 3 runs (9 rows)
    steps_read = [s.rows for s in statements() if "FROM steps" in s.sql]
    assert len(steps_read) == 20 and max(steps_read) <= 10 and sum(steps_read) == 180


def _batch_of(run_id: str, steps) -> Batch:
    batch = Batch()
    batch.runs[run_id] = {}
    for step in steps:
        batch.steps.append(StepRecord(run_id, step, bytes([step]) * 8, 5_000_000.0, 5_000_000.0, {"kl": 0.5}))
    return batch


def test_the_runs_a_response_holds_keep_its_rows_within_the_cap(client):
    assert runs_cap(100, 10_000, None) == 100 and runs_cap(1000, 10_000, None) == MAX_ROWS // 10_000
    assert runs_cap(1000, 100_000, None) == 10 and runs_cap(1000, 100_000, 1000) == 1000
    assert runs_cap(5, 100_000, 2000) == 5
    _runs(client.app.state.store, 12, steps=1)
    r = client.get("/api/steps", params={"run_id": ".*", "limit": 100_000, "max_runs": 1000})
    assert len(r.json()) == 10 and r.headers["x-truncated"] == "true" and r.headers["x-total-count"] == "12"
    r = client.get("/api/steps", params={"run_id": ".*", "limit": 100_000, "max_runs": 1000, "points": 100})
    assert len(r.json()) == 12 and "x-truncated" not in r.headers and _next(r) is None


def test_the_runs_listing_filters_select_the_runs(client):
    _runs(client.app.state.store, 12, steps=1)

    def runs(**params) -> list[str]:
        r = client.get("/api/steps", params={"run_id": ".*", **params})
        assert r.status_code == 200, r.text
        return [row["run_id"] for row in r.json()]

    assert runs(q="r1") == ["r11", "r10"]
    assert runs(since="1000009", until="1000010") == ["r10", "r09"]  # Unix seconds: runs with data then
    assert runs(status="active") == []  # last written in 1970
    assert len(runs(status="idle")) == 12
    assert runs(order="run_id", max_runs=2) == ["r00", "r01"]
    for params in ({"max_runs": 0}, {"max_runs": 1001}, {"cursor": "x"}, {"status": "done"}, {"order": "step"}):
        r = client.get("/api/steps", params={"run_id": ".*", **params})
        assert r.status_code == 422 and next(iter(params)) in r.text, (params, r.text)
