"""The store: one writer connection behind a lock, one read connection per thread.

    store = Store.open("sidecar.db")
    store.write_batch(extract(request))      # commits before returning
    store.runs()

SQLite in WAL mode lets readers run while the writer commits. Every write
method holds `_wlock` for its whole transaction: one writer, as SQLite wants,
whichever thread calls.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Mapping
from urllib.parse import quote

import orjson

from ..otlp._extract import PHASE_COLUMN, Batch
from . import _queries, _retention
from ._alerts import upsert_episodes
from ._checkpoint import TRUNCATE_BYTES, VALVE_PAGES, Checkpointer
from ._health import WriteHealth
from ._schema import migrate

# Sample rows are 1-4 KiB (prompt + completion), so with SQLite's default 4 KiB pages most
# rows take a page of their own: a new store was 26% padding and every byte is written twice
# (WAL, then the checkpoint). 32 KiB pages pack ten rows a page; ingest's write and checkpoint
# cost fell ~30% (benchmarks/README.md). An existing database keeps the page size it has.
PAGE_BYTES = 32768
log = logging.getLogger("otel_grpo.sidecar")

_SAMPLE_INSERT = """
INSERT INTO samples (run_id, step, uid, sample_index, reward, advantage, completion_length,
                     prompt, completion, time, data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step, uid) DO NOTHING
"""
_STEP_UPSERT = """
INSERT INTO steps (run_id, step, start_time, end_time, updated_at, metrics) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET
    start_time = coalesce(excluded.start_time, start_time),
    end_time = coalesce(excluded.end_time, end_time),
    updated_at = excluded.updated_at,
    metrics = excluded.metrics
"""
_VALUE_UPSERT = """
INSERT INTO step_values (run_id, key, step, value) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, key, step) DO UPDATE SET value = excluded.value
"""
_RUN_UPSERT = """
INSERT INTO runs (run_id, service_name, model, host, first_seen, last_update) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    service_name = coalesce(excluded.service_name, service_name),
    model = coalesce(excluded.model, model),
    host = coalesce(excluded.host, host),
    last_update = excluded.last_update
"""
_RUN_PROGRESS = """
UPDATE runs SET first_step = min(coalesce(first_step, ?1), ?1), last_step = max(coalesce(last_step, ?2), ?2),
                sample_count = sample_count + ?3
WHERE run_id = ?4
"""


def _merge_step(conn: sqlite3.Connection, run_id: str, step: int, start: float | None, end: float | None,
                now: float, metrics: dict) -> None:
    """Upsert a step, merging its scalars into what earlier exports stored.

    Merged here rather than with SQLite's json_patch, which re-renders every number with 15
    significant digits: Python's json keeps each double exact (17 digits where needed).
    """
    row = conn.execute("SELECT metrics FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
    merged = {**json.loads(row[0]), **metrics} if row else metrics
    conn.execute(_STEP_UPSERT, (run_id, step, start, end, now, json.dumps(merged, separators=(",", ":"))))


def _as_writer(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Checkpoint settings of a writing connection (the store's own or a worker's)."""
    conn.execute(f"PRAGMA wal_autocheckpoint = {VALVE_PAGES}")  # checkpoints: see _checkpoint
    conn.execute(f"PRAGMA journal_size_limit = {TRUNCATE_BYTES}")  # the writer is who restarts the WAL
    return conn


class Store(_queries.Reads):
    """Runs, steps, phases, samples and alerts in one SQLite file."""

    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        self.path = Path(path)
        self.synchronous = synchronous
        self._wlock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self.found_version: int | None = None
        self.health = WriteHealth(self.path)
        self._uri: str | None = None  # set when opened read-only

    @classmethod
    def open(cls, path: str | Path, synchronous: str = "NORMAL") -> "Store":
        """Open (creating if needed) and migrate; the writer connection is ready on return.

        An existing database that cannot be written (a full disk, a read-only mount) is opened
        read-only instead: reads work, writes raise sqlite3.OperationalError, and
        `health.read_only` says why. A database that cannot be created raises.
        """
        store = cls(Path(path), synchronous)
        store.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = store._connect()
            conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # takes effect only in a new database
            conn.execute("PRAGMA journal_mode = WAL")
            store.found_version = migrate(conn)
        except sqlite3.OperationalError as exc:
            if not store.path.is_file() or store.path.stat().st_size == 0:
                raise
            store._open_read_only(exc)
            return store
        store._writer = _as_writer(conn)
        store._checkpointer = Checkpointer(store.path, synchronous)
        store.optimize()
        return store

    def _open_read_only(self, exc: sqlite3.OperationalError) -> None:
        # mode=ro still needs the WAL index (-shm), which a full disk cannot hold; immutable=1 reads
        # the main file alone (frames still in a -wal file stay unseen until the disk has room).
        self.health.read_only = f"{exc} at start-up (free on its disk: {self.health.free_text()})"
        for flags in ("mode=ro", "immutable=1"):
            self._uri = f"file:{quote(str(self.path.resolve()))}?{flags}"
            try:
                self._connect().execute("SELECT count(*) FROM runs").fetchone()
                break
            except sqlite3.OperationalError:
                continue
        else:
            raise exc
        log.error("store %s is not writable (%s): serving it read-only (%s); ingest answers 503 until restarted "
                  "with room on the disk", self.path, exc, flags)

    @classmethod
    def open_writer(cls, path: str | Path, synchronous: str = "NORMAL") -> "Store":
        """A write-only handle on a store that `Store.open` has already created and migrated.

        For ingest worker processes: no migration, no planner statistics and no checkpoint
        thread (the opening process runs those; call its `wake_checkpointer` after a commit
        made here). Commits are as durable as `write_batch` on the opening handle.
        """
        store = cls(Path(path), synchronous)
        store._writer = _as_writer(store._connect())
        return store

    def wake_checkpointer(self) -> None:
        """Another connection (a worker process) committed: copy its WAL frames in the background."""
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so "committed" means committed.
        if self._uri is not None:
            conn = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0)
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA cache_size = -32768")  # 32 MiB page cache per connection
        return conn

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (WAL: sees the last committed state)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def read_connection(self) -> sqlite3.Connection:
        """A new read-only connection the caller owns and closes (streamed exports).

        Its page cache is small: an export reads each page once, so a cache only adds resident memory.
        """
        conn = self._connect()
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -2048")
        return conn

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        with self._wlock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def _tx(self):
        """Context: the write lock plus one IMMEDIATE transaction, committed on success."""
        return _Transaction(self)

    # ---- writes -------------------------------------------------------------------------
    def write_batch(self, batch: Batch, now: float | None = None) -> int:
        """Store one request's records in one transaction; returns samples newly inserted."""
        now = time.time() if now is None else now
        if not (batch.steps or batch.phases or batch.samples):
            return 0
        with self._tx() as conn:
            for run_id, info in batch.runs.items():
                conn.execute(_RUN_UPSERT, (run_id, info.get("service.name"), info.get("grpo.model"),
                                           info.get("host.name"), now, now))
            for st in batch.steps:
                _merge_step(conn, st.run_id, st.step, st.start, st.end, now, st.metrics)
            conn.executemany(_VALUE_UPSERT, [
                (s.run_id, key, s.step, value) for s in batch.steps for key, value in s.metrics.items()])
            conn.executemany("INSERT OR REPLACE INTO step_spans VALUES (?, ?, ?)",
                             [(s.span_id, s.run_id, s.step) for s in batch.steps])
            self._write_phases(conn, batch, now)
            inserted = self._write_samples(conn, batch)
            self._write_progress(conn, batch, inserted)
        return sum(inserted.values())

    def _write_phases(self, conn: sqlite3.Connection, batch: Batch, now: float) -> None:
        conn.executemany("INSERT OR REPLACE INTO phases VALUES (?, ?, ?, ?, ?, ?, ?)", [
            (p.span_id, p.parent_span_id, p.name, p.duration, p.run_id, p.step, now) for p in batch.phases])
        if batch.phases or batch.steps:
            conn.execute("""UPDATE phases SET run_id = s.run_id, step = s.step FROM step_spans AS s
                            WHERE phases.run_id IS NULL AND phases.parent_span_id = s.span_id""")
        touched = {(s.run_id, s.step) for s in batch.steps}
        for p in batch.phases:
            row = conn.execute("SELECT run_id, step FROM phases WHERE span_id = ?", (p.span_id,)).fetchone()
            if row[0] is not None:
                touched.add((row[0], row[1]))
        # Sum per phase name over the step's phase spans: idempotent under re-delivery.
        for run_id, step in touched:
            sums = conn.execute("SELECT name, sum(duration) FROM phases WHERE run_id = ? AND step = ? GROUP BY name",
                                (run_id, step)).fetchall()
            if sums:
                values = {PHASE_COLUMN + name: total for name, total in sums}
                _merge_step(conn, run_id, step, None, None, now, values)
                conn.executemany(_VALUE_UPSERT, [(run_id, k, step, v) for k, v in values.items()])
                conn.execute(_RUN_UPSERT, (run_id, None, None, None, now, now))

    def _write_samples(self, conn: sqlite3.Connection, batch: Batch) -> dict[str, int]:
        # orjson: the per-row JSON of the dynamic columns was ~4 us a row with json.dumps, 0.4 here;
        # output is the same compact JSON (UTF-8 rather than \u escapes; ints are int64 by OTLP).
        dumps = orjson.dumps
        by_run: dict[str, list] = defaultdict(list)
        for s in batch.samples:
            by_run[s.run_id].append((s.run_id, s.step, s.uid, s.sample_index, s.reward, s.advantage,
                                     s.completion_length, s.prompt, s.completion, s.time,
                                     dumps(s.data).decode()))
        inserted = {}
        for run_id, rows in by_run.items():
            before = conn.total_changes
            conn.executemany(_SAMPLE_INSERT, rows)
            inserted[run_id] = conn.total_changes - before
        return inserted

    def _write_progress(self, conn: sqlite3.Connection, batch: Batch, inserted: dict[str, int]) -> None:
        steps: dict[str, list[int]] = defaultdict(list)
        for record in (*batch.steps, *batch.samples):
            steps[record.run_id].append(record.step)
        for p in batch.phases:
            if p.run_id is not None:
                steps[p.run_id].append(p.step)
        for run_id, values in steps.items():
            conn.execute(_RUN_PROGRESS, (min(values), max(values), inserted.get(run_id, 0), run_id))

    def upsert_alerts(self, alerts: list[dict], now: float | None = None,
                      group: Mapping[str, str] | None = None) -> int:
        """Alertmanager's alerts, one row per (fingerprint, episode) (`_alerts.py`); `group`: the
        notification's groupLabels, whose open episodes it does not list are resolved. Returns how many."""
        now = time.time() if now is None else now
        with self._tx() as conn:
            upsert_episodes(conn, alerts, group, now, _queries.iso(now) or "")
        return len(alerts)

    def apply_retention(self, max_runs: int | None = None, max_steps: int | None = None,
                        max_age_s: float | None = None, now: float | None = None) -> dict[str, int]:
        """Delete what the retention settings exclude; returns rows deleted per table."""
        now = time.time() if now is None else now
        with self._tx() as conn:
            return _retention.apply(conn, max_runs, max_steps, max_age_s, now)

    def optimize(self) -> None:
        """Refresh the query planner's statistics (bounded sampling, so cheap at any size).

        Without them SQLite walks the step index for `step >= 0 ORDER BY reward` instead of the
        reward index, which is 100x slower at a million samples.
        """
        with self._wlock:
            if self._writer is not None:
                self._writer.execute("PRAGMA analysis_limit = 1000")
                self._writer.execute("ANALYZE")

    def size_bytes(self) -> int:
        """Database plus WAL file size on disk."""
        total = 0
        for suffix in ("", "-wal"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total


class _Transaction:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        self.store._wlock.acquire()
        conn = self.store._writer
        if conn is None:
            self.store._wlock.release()
            if self.store.health.read_only:
                raise sqlite3.OperationalError(f"store is read-only ({self.store.health.read_only})")
            raise RuntimeError("store is closed")
        conn.execute("BEGIN IMMEDIATE")
        return conn

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.store._writer.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.store._wlock.release()
        if exc_type is None and self.store._checkpointer is not None:
            self.store._checkpointer.committed()
