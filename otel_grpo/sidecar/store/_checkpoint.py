"""WAL checkpoints on a background thread, off the commit path of ingest.

With SQLite's default auto-checkpoint, the commit that pushes the WAL past 1,000 pages
(4 MiB: two or three ingest requests of 512 samples) also copies the WAL into the database
file and fsyncs it, all inside that request. Profiling put that at over half of the write
time. Here the writer's auto-checkpoint is raised to a safety valve (`VALVE_BYTES`, only
reached if this thread falls behind) and this thread runs PASSIVE checkpoints, which never
block the writer or readers, on its own connection; sqlite3 releases the GIL meanwhile, so
the copy and fsync overlap with the next request's decoding.

Durability is unchanged: a transaction is durable once its COMMIT is in the WAL; moving
frames into the database file later only bounds the WAL's size.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("otel_grpo.sidecar")

VALVE_BYTES = 256 * 1024 * 1024  # the writer checkpoints itself only past this much WAL
TRUNCATE_BYTES = 64 * 1024 * 1024  # after a checkpoint, a WAL file larger than this is cut back


def valve_pages(conn: sqlite3.Connection) -> int:
    """`VALVE_BYTES` in the database's pages, for `wal_autocheckpoint` (which counts pages).

    A fixed page count was 256 MiB with 4 KiB pages but 2 GiB with the 32 KiB pages of a new store.
    """
    return max(1, VALVE_BYTES // conn.execute("PRAGMA page_size").fetchone()[0])


class Checkpointer:
    """Runs `PRAGMA wal_checkpoint(PASSIVE)` after commits, at most one at a time."""

    def __init__(self, path: Path, synchronous: str) -> None:
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
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:  # busy or I/O: the next commit wakes us to try again
                log.warning("background WAL checkpoint failed", exc_info=True)

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()
        self._conn.close()
