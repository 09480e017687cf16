"""Stores as the releases before Alembic left them: the schema of version N (the revisions' own DDL),
the version in `PRAGMA user_version` / table `schema_version`, no `alembic_version` table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from otel_grpo.sidecar.store.migrations import migrate_postgres, migrate_sqlite


def make(target: str | Path, version: int) -> None:
    """An empty store of schema `version` at `target` (an SQLite path or a PostgreSQL URL)."""
    if str(target).startswith("postgresql"):
        migrate_postgres(lambda: psycopg.connect(str(target)), to=version)
        with psycopg.connect(str(target), autocommit=True) as conn:
            conn.execute("DROP TABLE alembic_version")
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(version,)]
        return
    conn = sqlite3.connect(target, isolation_level=None)
    migrate_sqlite(Path(target), conn, to=version)
    conn.execute("DROP TABLE alembic_version")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    conn.close()
