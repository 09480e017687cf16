"""Schema migrations of both stores: one Alembic revision chain, run on start.

    found = migrate_sqlite(path, conn)          # conn: any open sqlite3 connection to the file
    found = migrate_postgres(connect, timeout_s=600.0)   # connect(): a new psycopg connection (autocommit off)

Revision `vN` takes a database to schema version N, in one transaction, so a crash mid-migration
leaves the previous version intact; each revision's upgrade() branches on the dialect only where the
DDL differs (`versions/`). Alembic is the runner only: the stores' reads and writes stay raw sqlite3 /
psycopg. It is imported only when a database is behind: a store at the head opens without it.

Databases made before Alembic keep their version in `PRAGMA user_version` (SQLite) or the one-row
table `schema_version` (PostgreSQL): one at version N is stamped `vN`, then upgraded. Both counters
are still set by every revision (`env.py`), so an older sidecar refuses a newer database instead of
reading it. PostgreSQL migrates in one transaction under a transaction-level advisory lock: replicas
starting together migrate once, the others wait and find the head. A session lock would not hold behind a
transaction pooler (PgBouncer's `pool_mode = transaction`), where the lock, the migration and the unlock
may each run on another server session: the lock stayed with a session the pooler kept, so it excluded
nothing, and every migration after it waited out its timeout.

A release that changes the schema adds a revision (`alembic revision` with this folder as the
script location, `down_revision` the previous head), never edits one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

HEAD = 10
"""The schema version (revision `v{HEAD}`) this sidecar reads and writes."""
PG_LOCK = 0x6F74_6770  # "otgp": the advisory lock key of migrations and of every write transaction


class SchemaError(RuntimeError):
    """The database was written by a newer sidecar than this one."""


def revision(version: int) -> str:
    return f"v{version}"


def _version(rev: str | None, legacy: int) -> int:
    if rev is None:
        found = legacy
    elif rev.startswith("v") and rev[1:].isdigit():
        found = int(rev[1:])
    else:
        found = HEAD + 1  # a revision this sidecar does not know: a newer one's
    if found > HEAD or legacy > HEAD:
        raise SchemaError(f"database schema version {max(found, legacy)} is newer than this sidecar's ({HEAD}); "
                          "upgrade otel-grpo")
    return found


def sqlite_version(conn: sqlite3.Connection) -> int:
    """The schema version of an SQLite database (0: empty); raises SchemaError if newer than HEAD."""
    legacy = conn.execute("PRAGMA user_version").fetchone()[0]
    has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'").fetchone()
    rev = conn.execute("SELECT version_num FROM alembic_version").fetchone() if has_table else None
    return _version(None if rev is None else rev[0], legacy)


def migrate_sqlite(path: Path, conn: sqlite3.Connection, to: int = HEAD) -> int:
    """Bring the SQLite database at `path` to version `to`; returns the version it found.
    Raises sqlite3.Error as the database raises it (a full disk: sqlite3.OperationalError)."""
    found = sqlite_version(conn)
    if found >= to:
        return found
    from ._runner import run_sqlite

    run_sqlite(path, found, revision(to))
    return found


def migrate_postgres(connect: Callable[[], object], to: int = HEAD, timeout_s: float | None = None) -> int:
    """Bring a PostgreSQL database to version `to`; `connect()` opens a psycopg connection used for this run
    only; `timeout_s`: the migration transaction's statement and lock timeouts (None: the server's). Returns the
    version found before migrating."""
    conn = connect()
    try:
        found = postgres_version(conn)
        conn.commit()
        if found >= to:
            return found
        from ._runner import run_postgres

        return run_postgres(conn, revision(to), timeout_s)  # under the lock: perhaps another replica's work by then
    finally:
        conn.close()


def postgres_version(conn) -> int:
    """The schema version of a PostgreSQL database (0: empty); raises SchemaError if newer than HEAD."""
    tables = {r[0] for r in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
        "AND table_name IN ('alembic_version', 'schema_version')")}
    legacy = conn.execute("SELECT version FROM schema_version").fetchone() if "schema_version" in tables else None
    rev = conn.execute("SELECT version_num FROM alembic_version").fetchone() if "alembic_version" in tables else None
    return _version(None if rev is None else rev[0], 0 if legacy is None else legacy[0])


__all__ = ["HEAD", "PG_LOCK", "SchemaError", "migrate_postgres", "migrate_sqlite", "postgres_version", "revision",
           "sqlite_version"]
