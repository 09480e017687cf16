"""Alembic, run programmatically over a SQLAlchemy connection made for the run (no alembic.ini)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from .._pg_connection import transaction_settings
from . import PG_LOCK, postgres_version, revision, sqlite_version


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", "otel_grpo.sidecar.store:migrations")
    config.attributes["connection"] = conn  # env.py migrates over it
    return config


def _upgrade(conn: Connection, found: int, to: str) -> None:
    """Stamp and upgrade, then commit; where `conn` is in a transaction already, Alembic runs in it."""
    config = _config(conn)
    try:
        if found:  # made before Alembic, or by it: (re)stamp the version found
            command.stamp(config, revision(found), purge=True)
        command.upgrade(config, to)
        conn.commit()
    except DBAPIError as exc:  # the stores handle the driver's own errors (sqlite3's full disk, psycopg's)
        raise exc.orig from exc


def run_sqlite(path: Path, found: int, to: str) -> None:
    # pysqlite begins transactions lazily, after DDL, if at all: issue BEGIN IMMEDIATE ourselves so each
    # revision is one transaction, serialized with the store's other writers (SQLAlchemy's recipe).
    engine = create_engine("sqlite://", poolclass=NullPool,
                           creator=lambda: sqlite3.connect(path, isolation_level=None, timeout=30.0))
    event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
    try:
        with engine.connect() as conn:
            _upgrade(conn, found, to)
    finally:
        engine.dispose()


def run_postgres(raw, to: str, timeout_s: float | None = None) -> int:
    """`raw`: a psycopg connection, not in a transaction; returns the version found under the lock. One transaction
    under a transaction-level lock: a replica starting meanwhile waits for it, then finds the head."""
    engine = create_engine("postgresql+psycopg://", poolclass=NullPool, creator=lambda: raw)
    try:
        with engine.connect() as conn:
            if timeout_s is not None:
                conn.exec_driver_sql(transaction_settings(timeout_s, timeout_s))
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
            found = postgres_version(raw)
            if revision(found) != to:
                _upgrade(conn, found, to)  # Alembic joins this transaction and commits it
            conn.rollback()  # the head, found under the lock: nothing to do
        return found
    except DBAPIError as exc:
        raise exc.orig from exc
    finally:
        engine.dispose()
