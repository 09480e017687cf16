"""WAL checkpoints on a background thread, off the commit path of ingest.

With SQLite's default auto-checkpoint, the commit that pushes the WAL past 1,000 pages
(4 MiB: two or three ingest requests of 512 samples) also copies the WAL into the database
file and fsyncs it, all inside that request. Profiling put that at over half of the write
time. Here the writers never checkpoint inside COMMIT (`wal_autocheckpoint = 0`, `_store`)
and checkpoints have two owners, one per regime:

- Below the valve (`VALVE_BYTES`), this thread runs PASSIVE checkpoints, which never block
  the writer or readers, on its own connection; sqlite3 releases the GIL meanwhile, so the
  copy and fsync overlap with the next request's decoding.
- PASSIVE checkpoints alone do not bound the WAL under continuous ingest: SQLite starts the
  WAL over only when a checkpoint has copied every frame before the next commit, and new
  frames keep arriving while this thread copies (a 10M-sample fill grew the WAL by gigabytes
  between resets: benchmarks/README.md, sidecar). So past the valve this thread stands aside
  and the next writer, after its COMMIT and before it lets the other writers in (`_store`'s
  transaction), runs a TRUNCATE checkpoint (`truncate_wal`): nothing else writes meanwhile,
  so it copies what is left and cuts the file to zero.

Durability is unchanged: a transaction is durable once its COMMIT is in the WAL; moving
frames into the database file later only bounds the WAL's size.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

log = logging.getLogger("otel_grpo.sidecar")

VALVE_BYTES = 256 * 1024 * 1024  # past this much WAL the writer checkpoints (see above)
TRUNCATE_BYTES = 64 * 1024 * 1024  # after a checkpoint, a WAL file larger than this is cut back
TRUNCATE_WAIT_MS = 1000  # how long the valve waits for readers of older snapshots (a long read, an export)


def past_valve(db: Path) -> bool:
    """Whether the WAL file is larger than `VALVE_BYTES`. Its size is at least what its frames hold: a WAL
    started over keeps its length (up to `TRUNCATE_BYTES`) until a checkpoint cuts it."""
    try:
        return os.stat(f"{db}-wal").st_size > VALVE_BYTES
    except FileNotFoundError:
        return False


def truncate_wal(writer: sqlite3.Connection) -> None:
    """The valve, on a writer that has just committed and still holds the other writers off: a TRUNCATE
    checkpoint, tried again while the background thread's pass ends (one checkpoint at a time: SQLite
    answers busy at once), and waiting for readers of older snapshots, within `TRUNCATE_WAIT_MS` in all
    (ingest waits meanwhile). Never raises: the commit before it stands, and the next one tries again."""
    (usual,) = writer.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + TRUNCATE_WAIT_MS / 1000
    try:
        writer.execute(f"PRAGMA busy_timeout = {TRUNCATE_WAIT_MS}")
        while writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.002)
    except sqlite3.Error:  # a full disk, say: the database file cannot take the frames yet
        log.warning("WAL checkpoint past the valve failed", exc_info=True)
    finally:
        writer.execute(f"PRAGMA busy_timeout = {usual}")


class Checkpointer:
    """Runs `PRAGMA wal_checkpoint(PASSIVE)` after commits, at most one at a time."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        self._conn.execute(f"PRAGMA journal_size_limit = {TRUNCATE_BYTES}")
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """Called by the writer after each commit: there are new frames to copy."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            if past_valve(self._path):  # the next writer's TRUNCATE; a checkpoint here would make it give up
                continue
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:  # busy or I/O: the next commit wakes us to try again
                log.warning("background WAL checkpoint failed", exc_info=True)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()
        self._conn.close()
