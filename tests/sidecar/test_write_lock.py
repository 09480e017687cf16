"""A writer that holds SQLite's cross-process write lock and never lets go (stuck on a disk that answers
nothing, stopped) costs the other writers `db_timeout_s`, then a retryable 503, never a hang.

The holder is a real process taking the same `flock` on `<db>-ingest.lock` as every SQLite writer does.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import Store, StoreUnavailable
from otel_grpo.sidecar.store._errors import unavailable
from otel_grpo.sidecar.store._store import lock_path
from tests._support.waiting import wait_for

PB = {"Content-Type": "application/x-protobuf"}
HOLD_AT_MOST_S = 20  # the holder lets go by itself then, so that a writer that waits for it fails the test
HOLD = """
import fcntl, select, sys
lock = open(sys.argv[1], "a+b")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))  # until the test closes our stdin
"""


class Holder:
    """A process that holds the store's write lock until `release()`."""

    def __init__(self, db) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_path(db)), str(HOLD_AT_MOST_S)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


def test_a_held_write_lock_is_a_retryable_error_after_the_timeout(tmp_path, otlp):
    def batch(step):
        return extract(otlp.request(otlp.spans("held", [step], samples=2)))

    store = Store.open(tmp_path / "s.db", timeout_s=0.3)
    try:
        store.write_batch(batch(0))
        holder = Holder(store.path)
        try:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable, match="ingest.lock") as raised:
                store.write_batch(batch(1))
            waited = time.monotonic() - start
            assert unavailable(raised.value)  # the store's trouble: the routes answer 503 + Retry-After
            assert 0.3 <= waited < 3, waited  # the timeout, not forever (nor at once)
        finally:
            holder.release()
        store.write_batch(batch(2))  # the write lock was given back: the next write goes through
        with store.read() as conn:
            steps = [s for (s,) in conn.execute("SELECT step FROM steps ORDER BY step")]
        assert steps == [0, 2]  # the refused write changed nothing
    finally:
        store.close()


@pytest.mark.parametrize("workers", ["2", "0"])
def test_ingest_behind_a_held_write_lock_is_a_fast_503(sidecar_factory, tmp_path, otlp, workers):
    """A real sidecar (ingest workers as by default, then in its own process): while another process
    holds the write lock every ingest request answers 503 + Retry-After within about `db_timeout_s`,
    where it used to wait as long as the holder; once it lets go, the same request is stored."""
    db = tmp_path / "locked.db"
    proc = sidecar_factory(db=db, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "1",
                                       "OTEL_GRPO_SIDECAR_INGEST_WORKERS": workers})

    def post(step):
        body = otlp.request(otlp.spans("held", [step], samples=2)).SerializeToString()
        start = time.monotonic()
        answer = httpx.post(proc.url + "/v1/traces", content=body, headers=PB, timeout=20)
        return answer, time.monotonic() - start

    assert post(0)[0].status_code == 200
    holder = Holder(db)
    try:
        for _ in range(2):  # both workers (or the server's own writer) give up, none stays stuck
            answer, took = post(1)
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["Retry-After"]) >= 1
            assert 1 <= took < 1 + 5, took  # db_timeout_s, plus slack for a loaded machine
        assert httpx.get(proc.url + "/healthz", timeout=5).status_code == 200
    finally:
        holder.release()
    answer, _ = post(1)  # the exporter's retry
    assert answer.status_code == 200, answer.text
    steps = httpx.get(proc.url + "/api/runs/held/steps", timeout=10).json()
    assert [s["step"] for s in steps] == [0, 1]


def test_a_sidecar_started_behind_a_held_write_lock_serves_read_only_until_the_holder_lets_go(sidecar_factory,
                                                                                             tmp_path, otlp):
    """Start-up migrates under the write lock. Behind a holder that never lets go (a stopped writer) it
    waited for good, saying nothing; now it waits `startup_lock_timeout_s`, then serves the store
    read-only as it does one whose migration cannot run, naming the lock and the process holding it.
    Once the holder is gone it takes writes again by itself (ingest workers as by default), where it
    used to answer 503 until restarted."""
    db, log = tmp_path / "held.db", tmp_path / "sidecar.log"
    store = Store.open(db)
    store.write_batch(extract(otlp.request(otlp.spans("before", [0], samples=2))))
    store.close()
    holder = Holder(db)
    try:
        proc = sidecar_factory(db=db, log=log, ready="/healthz",
                               env={"OTEL_GRPO_SIDECAR_STARTUP_LOCK_TIMEOUT_S": "1"})
        ready = httpx.get(proc.url + "/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        detail = ready.json()["detail"]
        assert detail.startswith("read-only: held.db-ingest.lock") and f"pid {holder.proc.pid}" in detail, detail
        assert [r["run_id"] for r in httpx.get(proc.url + "/api/runs", timeout=10).json()] == ["before"]
        body = otlp.request(otlp.spans("after", [0], samples=2)).SerializeToString()
        assert httpx.post(proc.url + "/v1/traces", content=body, headers=PB, timeout=20).status_code == 503
        time.sleep(6)  # a try for writes or more while the lock is still held: it stays read-only
        assert httpx.get(proc.url + "/readyz", timeout=10).status_code == 503
    finally:
        holder.release()
    wait_for(lambda: httpx.get(proc.url + "/readyz", timeout=10).status_code == 200, "writable again", timeout=30)
    assert httpx.post(proc.url + "/v1/traces", content=body, headers=PB, timeout=20).status_code == 200
    assert sorted(r["run_id"] for r in httpx.get(proc.url + "/api/runs", timeout=10).json()) == ["after", "before"]
    assert len(httpx.get(proc.url + "/api/runs/after/samples", params={"step": 0}, timeout=10).json()) == 2
    proc.stop()
    text = log.read_text()
    assert "serving it read-only" in text and f"pid {holder.proc.pid}" in text, text
    assert text.count("takes writes again (it was read-only)") == 1, text
    # the CLI's start-up check waited the whole budget; the server's own open did not wait again
    assert text.count("waiting up to") == 1, text


def test_a_new_store_behind_a_held_write_lock_is_an_error_naming_the_holder(tmp_path):
    db = tmp_path / "new.db"
    holder = Holder(db)  # the lock file exists, the database not yet
    try:
        with pytest.raises(StoreUnavailable, match=rf"new.db-ingest.lock .*pid {holder.proc.pid}"):
            Store.open(db, startup_lock_timeout_s=0.2)
    finally:
        holder.release()


def test_planner_statistics_wait_their_turn_for_the_write_lock(tmp_path, otlp):
    """`optimize` (the sidecar's statistics, every few seconds) writes like ingest: under the write lock. It ran
    ANALYZE beside another process holding the lock, one writer too many, and behind a writer stuck inside its
    transaction waited SQLite's 30 s holding the store's own lock. Now a held lock skips it, for the next try."""
    store = Store.open(tmp_path / "s.db", timeout_s=0.3)

    def analyzed() -> int:
        with store.read() as conn:
            return conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'samples'").fetchone()[0]

    try:
        store.write_batch(extract(otlp.request(otlp.spans("stats", [0, 1], samples=4))))
        holder = Holder(store.path)
        try:
            start = time.monotonic()
            store.optimize()
            assert time.monotonic() - start < 3  # the lock's timeout, not SQLite's 30 s
            assert analyzed() == 0  # nothing written while another process holds the lock
        finally:
            holder.release()
        store.optimize()
        assert analyzed() > 0  # the next try, once the lock is free
    finally:
        store.close()


def test_planner_statistics_behind_a_transaction_left_open_without_the_flock_wait_for_the_next_try(tmp_path, otlp):
    """SQLite's own write lock held by a process without our flock (the sqlite3 shell's `BEGIN IMMEDIATE` left
    open): `optimize` raised SQLite's "database is locked", which the sidecar's maintenance loop logged with a
    traceback at every try (every few seconds, while the shell stayed open). It skips, as behind the flock."""
    store = Store.open(tmp_path / "s.db", timeout_s=0.3)
    try:
        store.write_batch(extract(otlp.request(otlp.spans("stats", [0, 1], samples=4))))
        shell = sqlite3.connect(store.path, isolation_level=None)
        shell.execute("BEGIN IMMEDIATE")
        try:
            store.optimize()
        finally:
            shell.execute("COMMIT")
            shell.close()
        store.optimize()
        with store.read() as conn:
            assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'samples'").fetchone()[0] > 0
    finally:
        store.close()


def test_a_write_behind_a_transaction_left_open_without_the_flock_is_a_retryable_error_after_the_timeout(
        tmp_path, otlp):
    """SQLite's own write lock taken by a process that knows nothing of our flock (the sqlite3 shell, an
    operator's `BEGIN IMMEDIATE` left open): a write waits for it within `timeout_s`, as for the flock, where
    it waited the connection's 30 s, holding every other write of the store behind it."""
    store = Store.open(tmp_path / "s.db", timeout_s=0.3)
    shell = sqlite3.connect(store.path, isolation_level=None)
    try:
        shell.execute("BEGIN IMMEDIATE")
        start = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked") as raised:
            store.write_batch(extract(otlp.request(otlp.spans("shell", [0], samples=2))))
        assert time.monotonic() - start < 3  # the timeout, not the connection's 30 s
        assert unavailable(raised.value)  # the routes answer 503 + Retry-After
        shell.execute("ROLLBACK")
        store.write_batch(extract(otlp.request(otlp.spans("shell", [1], samples=2))))  # the lock is free again
    finally:
        shell.close()
        store.close()


def test_the_statistics_pass_behind_a_shells_transaction_leaves_the_flock_to_the_writes(tmp_path, otlp):
    """While the sqlite3 shell holds SQLite's lock (a transaction left open), the statistics pass waited for it
    for the store's whole timeout holding our flock, so another process's write failed naming our lock file
    (held by the sidecar itself) instead of SQLite's lock, whose holder is the one to find. The pass now gives
    up on SQLite's lock at once and lets go of the flock: the write waits on SQLite's lock and says so."""
    store = Store.open(tmp_path / "s.db", timeout_s=4)
    worker = Store.open_writer(tmp_path / "s.db", timeout_s=1)  # an ingest worker's handle: a flock of its own
    shell = sqlite3.connect(store.path, isolation_level=None)
    try:
        store.write_batch(extract(otlp.request(otlp.spans("stats", [0, 1], samples=4))))
        shell.execute("BEGIN IMMEDIATE")
        analyzing = threading.Thread(target=store.optimize)
        analyzing.start()
        time.sleep(0.5)  # the pass has met the shell's lock
        with pytest.raises(sqlite3.OperationalError, match="locked") as raised:
            worker.write_batch(extract(otlp.request(otlp.spans("stats", [2], samples=2))))
        assert unavailable(raised.value)
        analyzing.join()
    finally:
        shell.execute("ROLLBACK")
        shell.close()
        worker.close()
        store.close()
