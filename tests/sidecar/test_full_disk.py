"""A real full filesystem (a 4 MiB tmpfs mounted for the test): the running sidecar reports it on
/readyz and in its log, and a sidecar started on it serves reads from a read-only store.

Mounting needs root (CAP_SYS_ADMIN); elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests._support.tmpfs import small_tmpfs
from tests._support.waiting import wait_for

PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    with small_tmpfs(mnt, "4m"):
        yield mnt


def _fill(mnt) -> None:
    """Write until the filesystem says ENOSPC (unbuffered: nothing left to flush on close)."""
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ingest(url: str, otlp, run_id: str, steps) -> httpx.Response:
    spans = otlp.spans(run_id, steps, samples=8, completion=lambda s, i: f"{run_id} {s}/{i} " + "y" * 3000)
    return httpx.post(url + "/v1/traces", content=otlp.request(spans).SerializeToString(), headers=PB, timeout=30)


def test_a_sidecar_starts_read_only_on_a_full_disk(sidecar_factory, small_disk, otlp, tmp_path):
    db, log = small_disk / "sidecar.db", tmp_path / "sidecar.log"
    first = sidecar_factory(db=db, log=log)
    assert _ingest(first.url, otlp, "before", range(3)).status_code == 200
    first.stop()  # a clean stop: the WAL is checkpointed and removed, as after any normal run
    assert not (small_disk / "sidecar.db-wal").exists()
    _fill(small_disk)

    again = sidecar_factory(db=db, log=log, ready="/healthz")  # used to exit 3: disk I/O error at a PRAGMA
    ready = httpx.get(again.url + "/readyz")
    assert ready.status_code == 503 and ready.json()["detail"].startswith("read-only"), ready.text
    rows = httpx.get(again.url + "/api/runs/before/samples", params={"step_min": 0, "limit": 100}).json()
    assert len(rows) == 24 and rows[0]["completion"].startswith("before 0/0 ")
    assert [r["run_id"] for r in httpx.get(again.url + "/api/runs").json()] == ["before"]
    assert httpx.get(again.url + "/api/runs/before/samples.csv", params={"step": 1}).text.count("before 1/") == 8
    assert _ingest(again.url, otlp, "after", [0]).status_code == 503
    (small_disk / "filler").unlink()  # room again: it takes writes without a restart
    wait_for(lambda: httpx.get(again.url + "/readyz").status_code == 200, "writable again", timeout=30)
    assert _ingest(again.url, otlp, "after", [0]).status_code == 200
    assert len(httpx.get(again.url + "/api/runs/after/samples", params={"step": 0}).json()) == 8
    again.stop()
    assert "serving it read-only" in log.read_text() and "takes writes again" in log.read_text()


def test_an_old_schema_that_cannot_migrate_is_a_503_naming_the_versions(sidecar_factory, small_disk, tmp_path):
    # A store at schema version 3 (before step versions) on a full disk: its migration cannot run, and
    # the steps endpoints answered 503 "no such column: step_epoch" for good, a retry that never works.
    import sqlite3

    from otel_grpo.sidecar.store import SCHEMA_VERSION
    from tests._support import old_schema

    db = small_disk / "sidecar.db"
    old_schema.make(db, 3)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO runs (run_id, first_seen, last_update) VALUES ('old', 0, 0)")
    conn.close()
    _fill(small_disk)
    proc = sidecar_factory(db=db, ready="/healthz")
    ready = httpx.get(proc.url + "/readyz")
    assert ready.status_code == 503 and f"schema version 3 and this sidecar reads version {SCHEMA_VERSION}" in \
        ready.json()["detail"], ready.text
    for path in ("/api/runs", "/api/runs/old/steps", "/api/runs/old/samples"):
        answer = httpx.get(proc.url + path)
        assert answer.status_code == 503 and "schema version 3" in answer.json()["detail"], (path, answer.text)
    (small_disk / "filler").unlink()  # room again: the migration runs, reads and writes work
    wait_for(lambda: httpx.get(proc.url + "/readyz").status_code == 200, "migrated", timeout=30)
    assert [r["run_id"] for r in httpx.get(proc.url + "/api/runs").json()] == ["old"]
    assert httpx.get(proc.url + "/api/runs/old/steps").status_code == 200


def test_a_disk_filling_up_is_reported_on_readyz_and_logged_once(sidecar_factory, small_disk, otlp, tmp_path):
    log = tmp_path / "sidecar.log"
    proc = sidecar_factory(db=small_disk / "sidecar.db", log=log)  # ingest workers as by default
    assert _ingest(proc.url, otlp, "before", range(3)).status_code == 200
    assert httpx.get(proc.url + "/readyz").status_code == 200
    _fill(small_disk)

    codes = [_ingest(proc.url, otlp, "during", range(s, s + 4)).status_code for s in range(0, 40, 4)]
    assert set(codes) <= {200, 503} and codes[-3:] == [503] * 3  # the first may still fit in the WAL
    ready = httpx.get(proc.url + "/readyz")
    assert ready.status_code == 503 and "disk full" in ready.json()["detail"] and ready.json()["reads"] == "ok"
    assert httpx.get(proc.url + "/api/runs/before/samples", params={"step": 2}).status_code == 200
    proc.stop()
    text = log.read_text()
    assert text.count("cannot take writes") == 1, text  # once per streak, not once per request
    assert "ingest answers 503" in text and "rejected so far" in text


def test_a_full_spill_disk_leaves_whole_lines_only(small_disk):
    import json

    from otel_grpo.telemetry._spill import SampleSpill, SpillReader

    spill = SampleSpill(small_disk / "run")
    spill.write(0, [{"run_id": "r", "step": 0, "sample_index": 0, "prompt": "first"}])
    _fill(small_disk)
    filler = small_disk / "filler"
    os.truncate(filler, filler.stat().st_size - 16384)  # room for part of the next write, not all of it
    rows = [{"run_id": "r", "step": 0, "sample_index": i, "prompt": "p" * 2000} for i in range(1, 40)]
    spill.write(0, rows)  # fails part-way: never raises into training
    spill.write_step("r", 0, 1, 2, {"kl": 0.1}, {"rollout": 0.5})  # may or may not fit; whole or nothing
    text = spill.path(0).read_text()
    assert text.endswith("\n") and [json.loads(line)["prompt"] for line in text.splitlines()] == ["first"]
    if spill.steps_path.exists():
        assert all(json.loads(line)["step"] == 0 for line in spill.steps_path.read_text().splitlines())
    filler.unlink()  # room again: the next write goes through whole
    spill.write(0, rows)
    spill = SpillReader(small_disk / "run")
    assert sum(len(spill.samples(step)) for step in spill.steps) == 40 and not spill.unreadable
