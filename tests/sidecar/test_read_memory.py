"""Page reads hold a bounded piece at a time, on both backends: concurrent large pages of samples and
of steps are answered whole while the server's Python heap grows by no more than the pieces in flight
(the whole pages would be several times that).

The app runs in process and the reads go to it as ASGI calls whose `send` keeps only the size of each
body message and the rows in it: so what is measured (tracemalloc's peak over the reads, every thread) is
the server's, not a client's copy of the bodies."""

from __future__ import annotations

import asyncio
import json
import tracemalloc

import pytest
from fastapi.testclient import TestClient

from otel_grpo.sidecar import SidecarSettings, create_app
from otel_grpo.sidecar.api.deps import STREAM_FLUSH_BYTES
from otel_grpo.sidecar.otlp._extract import Batch, SampleRecord
from otel_grpo.sidecar.store import SampleQuery
from otel_grpo.sidecar.store._queries import SAMPLE_CHUNK_ROWS
from otel_grpo.sidecar.store._step_reads import step_piece_rows
from otel_grpo.sidecar.store._step_scalars import _STEP_UPSERT, NO_WRITER

SAMPLES, TEXT, READS, COLUMNS = 5000, 100, 4, 20
PIECE = step_piece_rows(COLUMNS)  # rows of every column a piece holds
STEPS = 10 * PIECE
MiB = 2**20
ROW = b'"run_id":'


def _fill(store, steps: int = STEPS) -> None:
    """SAMPLES samples of TEXT-long prompts, STEPS steps of COLUMNS scalars (stored as a batch of write
    versions at once: a merge per step took most of the test on PostgreSQL)."""
    batch = Batch()
    batch.runs["big"] = {}
    for i in range(SAMPLES):
        batch.samples.append(SampleRecord("big", i // 500, f"u{i}", i % 500, i / SAMPLES, 0.0, 10.0,
                                          f"prompt {i} " + "p" * TEXT, f"completion {i}", 1.0, {"selection": "top"}))
    store.write_batch(batch)
    with store._tx() as conn:
        conn.executemany(_STEP_UPSERT, [("big", step, 1.0, 2.0, 2.0, json.dumps({f"m{k}": step + k / 10 for k in range(COLUMNS)}),
                                         step + 1, NO_WRITER) for step in range(steps)])
        conn.execute("UPDATE runs SET step_version = ? WHERE run_id = 'big'", (steps,))


async def _get(app, path: str, query: str) -> tuple[int, int, int, int]:
    """(status, rows, body messages, largest message in bytes) of one GET, the body itself dropped."""
    seen = {"status": 0, "rows": 0, "messages": 0, "largest": 0}
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client never leaves

    async def send(message):
        if message["type"] == "http.response.start":
            seen["status"] = message["status"]
        elif message["type"] == "http.response.body" and message.get("body"):
            body = message["body"]
            seen["rows"] += body.count(ROW)
            seen["messages"] += 1
            seen["largest"] = max(seen["largest"], len(body))

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return seen["status"], seen["rows"], seen["messages"], seen["largest"]


def _reads(app, path: str, query: str, reads: int) -> tuple[list[tuple], int]:
    """`reads` concurrent GETs; their results and the heap's peak growth over them."""
    async def all_of() -> list[tuple]:
        return await asyncio.gather(*(_get(app, path, query) for _ in range(reads)))

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        results = asyncio.run(all_of())
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return results, peak


def test_a_store_hands_out_page_reads_a_bounded_piece_at_a_time(db):
    from otel_grpo.sidecar.store import open_store

    store = open_store(db)
    try:
        _fill(store, 2 * PIECE + 5)
        chunks = list(store.sample_chunks("big", SampleQuery(step_min=0, limit=SAMPLES)))
        assert [len(c) for c in chunks] == [SAMPLE_CHUNK_ROWS] * (SAMPLES // SAMPLE_CHUNK_ROWS)
        assert [r["sample_index"] for c in chunks for r in c] == [i % 500 for i in range(SAMPLES)]
        pieces = list(store.steps_pieces("big", limit=STEPS))  # every column
        assert [p.count(ROW) for p in pieces] == [PIECE, PIECE, 5]
        assert store.steps_json("big", limit=STEPS) == b"[" + b",".join(pieces) + b"]"
        # A piece is counted in values: rows of one column and the step come 16,384 to a piece.
        narrow = list(store.steps_pieces("big", ["m1"], limit=STEPS, fields=("step",)))
        assert [p.count(b'"step"') for p in narrow] == [2 * PIECE + 5] and step_piece_rows(1, 1) == 16384
    finally:
        store.close()


@pytest.fixture
def sqlite_client(tmp_path):
    """The app on SQLite only: what is measured is the API's streaming, above the store; each store's
    pieces are checked above, on both backends."""
    with TestClient(create_app(SidecarSettings(db=tmp_path / "s.db", ingest_workers=0))) as client:
        yield client


def _check(app, path: str, query: str, rows: int, small: int, piece: int, row: int) -> None:
    """One page of `rows` takes about the heap one of `small` rows (two pieces) takes; READS such pages at
    once are answered whole, each message at most the flush size and one piece, in about READS times the
    heap of one (their tasks and threads interleave: not all of them hold a piece at the same moment)."""
    (one_small,), small_peak = _reads(app, path, query.format(small), 1)
    (one,), peak = _reads(app, path, query.format(rows), 1)
    pages, together = _reads(app, path, query.format(rows), READS)
    print(f"{path}: pages of {rows * row / MiB:.1f} MiB: the heap's peak grew {peak / MiB:.2f} MiB for one "
          f"({small_peak / MiB:.2f} for {small} rows), {together / MiB:.1f} MiB for {READS} at once")
    assert one_small[:2] == (200, small) and [p[:2] for p in [one, *pages]] == [(200, rows)] * (READS + 1)
    assert all(p[2] >= rows // piece // 2 and p[3] <= STREAM_FLUSH_BYTES + piece * row for p in [one, *pages])
    assert peak < 1.5 * small_peak + MiB / 4, "a larger page took more heap: it was not read piece by piece"
    assert together < 1.5 * READS * peak + MiB, f"{together / MiB:.1f} MiB"


def test_concurrent_large_pages_are_answered_within_the_pieces_in_flight(sqlite_client):
    """Pages of 5,000 samples and of ten pieces of steps: a page holds a chunk (piece) of rows at a time (the one
    being written, and the one before it being sent), so a page five times as long as two chunks takes about
    the same heap (built whole: five times as much), and READS of them at once about READS times that."""
    client = sqlite_client
    _fill(client.app.state.store)
    assert client.get("/api/runs/big/steps", params={"limit": 1}).status_code == 200  # the run's steps held
    # A short page is one message, written whole (no thread hop per chunk); a long one streams.
    (short,), _ = _reads(client.app, "/api/runs/big/samples", "step_min=0&limit=100", 1)
    assert short[:3] == (200, 100, 1)
    assert "content-length" in client.get("/api/runs/big/samples", params={"step_min": 0, "limit": 100}).headers
    assert "content-length" not in client.get("/api/runs/big/samples", params={"step_min": 0, "limit": 5000}).headers
    row = len(client.get("/api/runs/big/samples", params={"step_min": 0, "limit": 1}).content)
    _check(client.app, "/api/runs/big/samples", "step_min=0&limit={}", SAMPLES, 2 * SAMPLE_CHUNK_ROWS,
           SAMPLE_CHUNK_ROWS, row)
    row = len(client.get("/api/runs/big/steps", params={"limit": 1}).content)
    _check(client.app, "/api/runs/big/steps", "limit={}", STEPS, 2 * PIECE, PIECE, row)
