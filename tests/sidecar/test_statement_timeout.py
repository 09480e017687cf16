"""A read that runs past `db_timeout_s` is cut off with a retryable 503 on both backends (PostgreSQL's
statement_timeout; SQLite's from _deadline), and the connection it ran on serves the next read."""

from __future__ import annotations

import sqlite3

import pytest

from otel_grpo.sidecar.store import Store
from otel_grpo.sidecar.store._errors import unavailable

PB = {"Content-Type": "application/x-protobuf"}
ENDLESS = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"


def test_an_endless_sqlite_read_is_interrupted_and_its_connection_reused(tmp_path):
    store = Store.open(tmp_path / "s.db", read_connections=1, timeout_s=0.2)
    try:
        with pytest.raises(sqlite3.OperationalError, match="interrupted") as raised, store.read() as conn:
            conn.execute(ENDLESS).fetchone()
        assert unavailable(raised.value)  # the database's trouble: a 503 with Retry-After, not a 500
        with store.read() as conn:  # the one pooled connection, with a deadline of its own per statement
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    finally:
        store.close()


def test_a_search_slower_than_the_timeout_is_a_503(make_client, otlp):
    """The search of a run's prompts and completions, which no index serves, with a timeout shorter than
    its scan: the request is cut off with 503 + Retry-After, where it used to run to its end."""
    writer = make_client()
    text = "x" * 4000
    spans = otlp.spans("long", range(20), samples=100, completion=lambda s, i: f"{text} {s}/{i}")  # 8 MB
    assert writer.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    found = writer.get("/api/runs/long/samples", params={"step_min": 0, "q": "never written", "limit": 10})
    assert found.status_code == 200 and found.json() == []

    reader = make_client(db_timeout_s=0.001)
    slow = reader.get("/api/runs/long/samples", params={"step_min": 0, "q": "never written", "limit": 10})
    assert slow.status_code == 503, slow.text
    assert slow.headers["retry-after"]
