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

from . import PG_LOCK, postgres_version, revision, sqlite_version


def _config(conn: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", "otel_grpo.sidecar.store:migrations")
    config.attributes["connection"] = conn  # env.py migrates over it
    return config


def _upgrade(conn: Connection, found: int, to: str) -> None:
    config = _config(conn)
    try:
        if found:  # made before Alembic, or by it: (re)stamp the version found
            command.stamp(config, revision(found), purge=True)
            conn.commit()
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


def run_postgres(raw, to: str) -> int:
    """`raw`: a psycopg connection, not in a transaction; returns the version found under the lock."""
    engine = create_engine("postgresql+psycopg://", poolclass=NullPool, creator=lambda: raw)
    try:
        with engine.connect() as conn:
            # A session lock for the whole run: a replica starting meanwhile waits here, then finds the head.
            conn.exec_driver_sql("SELECT pg_advisory_lock(%s)", (PG_LOCK,))
            conn.commit()
            try:
                found = postgres_version(raw)
                conn.commit()
                if revision(found) != to:
                    _upgrade(conn, found, to)
            finally:
                conn.rollback()
                conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (PG_LOCK,))
                conn.commit()
        return found
    except DBAPIError as exc:
        raise exc.orig from exc
    finally:
        engine.dispose()
