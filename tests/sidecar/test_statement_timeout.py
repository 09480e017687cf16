"""A read that runs past `db_timeout_s` is cut off with a retryable 503 on both backends (PostgreSQL's
statement_timeout; SQLite's from _deadline), and the connection it ran on serves the next read."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from otel_grpo.sidecar._every import EveryInterval
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


def test_a_search_slower_than_the_timeout_is_a_503(make_client, otlp, caplog):
    """The search of a run's prompts and completions, which no index serves, with a timeout shorter than
    its scan: the request is cut off with 503 + Retry-After, where it used to run to its end."""
    writer = make_client()
    text = "x" * 400
    # many rows (20,480, 8 MB): SQLite checks its deadline every 10,000 instructions, which a warm scan of a
    # few thousand long ones finished within now and then (a 200)
    for first in range(0, 160, 40):
        spans = otlp.spans("long", range(first, first + 40), samples=128, completion=lambda s, i: f"{text} {s}/{i}")
        assert writer.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    found = writer.get("/api/runs/long/samples", params={"step_min": 0, "q": "never written", "limit": 10})
    assert found.status_code == 200 and found.json() == []

    reader = make_client(db_timeout_s=0.001)
    with caplog.at_level(logging.DEBUG, logger="otel_grpo.sidecar"):
        for _ in range(3):
            slow = reader.get("/api/runs/long/samples", params={"step_min": 0, "q": "never written", "limit": 10})
            assert slow.status_code == 503, slow.text
            assert slow.headers["retry-after"]
    # said once (a fault fails every read alike: a locked table wrote a warning per read), the others counted
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "store unavailable for reads" in said[0] and "1 read(s) failed" in said[0], said


def test_an_export_slower_than_the_timeout_is_a_503_before_its_response_starts(make_client, otlp):
    """An export reads its columns and first rows before its response starts: a search slower than the timeout is
    the 503 a page answers, where it was a 200 whose download then broke off. Many short rows: SQLite checks its
    deadline every 10,000 instructions, which a scan of a few long ones may finish within."""
    writer = make_client()
    for first in range(0, 160, 40):  # 20,480 rows
        spans = otlp.spans("many", range(first, first + 40), samples=128)
        assert writer.post("/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB).status_code == 200
    reader = make_client(db_timeout_s=0.001)
    for export in ("samples.csv", "samples.jsonl"):
        slow = reader.get(f"/api/runs/many/{export}", params={"step_min": 0, "q": "never written"})
        assert slow.status_code == 503 and slow.headers["retry-after"], slow.text


def test_a_fault_that_fails_every_read_is_said_once_an_interval_with_its_count():
    now = [0.0]
    said = EveryInterval(60.0, clock=lambda: now[0])
    counts = []
    for t in (0, 1, 2, 59, 61, 62, 200):
        now[0] = t
        counts.append(said.hit())
    assert counts == [1, None, None, None, 4, None, 2]


# SQLSTATEs as a real server raises them, and whether each is the database's state (a 503 + Retry-After) or a
# bug (a 500). psycopg's classes do not tell: 25006 (read-only) is an InternalError, 54001 an OperationalError.
SQLSTATES = {"25006": True, "40P01": True, "40001": True, "57P01": True, "57P03": True, "53100": True,
             "53300": True, "08006": True, "55P03": True, "58030": True,
             "42703": False, "54001": False, "22P02": False, "23505": False, "XX000": False, "2F005": False}


def test_postgresql_errors_are_told_apart_by_sqlstate(pg_url):
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for state, retryable in SQLSTATES.items():
            with pytest.raises(psycopg.Error) as raised:
                conn.execute(f"DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{state}'; END $$")
            assert raised.value.sqlstate == state
            assert unavailable(raised.value) is retryable, (state, type(raised.value).__name__)
        conn.execute("SET default_transaction_read_only = on")  # the real refusal, not a raised code
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as raised:
            conn.execute("CREATE TABLE t (x int)")
        assert unavailable(raised.value)
