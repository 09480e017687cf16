"""The sample store: SQLite (WAL) by default, PostgreSQL for teams (replicas on one database).

    store = open_store("sidecar.db")                          # a path: SQLite
    store = open_store("postgresql://u:p@db:5432/otel")       # a URL: PostgreSQL

Both hold runs, per-step scalar history, phase durations, samples and alerts, behind the same
methods (`write_batch`, `runs`, `samples`, ...).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from ._postgres import PgStore, is_postgres_url, redact
from ._queries import SAMPLE_CORE_COLUMNS, SampleQuery
from ._schema import PG_SCHEMA_VERSION, SCHEMA_VERSION, SchemaError
from ._step_series import StepCache
from ._store import Store


class StoreUnavailable(Exception):
    """The store cannot take a write now (locked, full, read-only, server unreachable): retry later."""


# The errors that mean "the store cannot take this write now" (the ingest route's 503 + Retry-After).
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.OperationalError, psycopg.OperationalError,
                                                       StoreUnavailable)


def open_store(target: str | Path, synchronous: str = "NORMAL", read_connections: int = 8,
               step_cache: StepCache | None = None) -> Store | PgStore:
    """Open (creating and migrating) the store at `target`: a PostgreSQL URL or an SQLite path.
    `step_cache`: the runs' steps held for reads, with their bound and column names (see
    _step_series); default: 256 MiB, the stored names."""
    if is_postgres_url(target):
        return PgStore.open(str(target), synchronous, read_connections, step_cache)
    return Store.open(target, synchronous, read_connections, step_cache)


def open_writer(target: str | Path, synchronous: str = "NORMAL") -> Store | PgStore:
    """A write handle on a store `open_store` has created (for ingest worker processes)."""
    if is_postgres_url(target):
        return PgStore.open_writer(str(target), synchronous)
    return Store.open_writer(target, synchronous)


__all__ = ["PG_SCHEMA_VERSION", "SAMPLE_CORE_COLUMNS", "SCHEMA_VERSION", "UNAVAILABLE_ERRORS", "PgStore",
           "SampleQuery", "SchemaError", "StepCache", "Store", "StoreUnavailable", "is_postgres_url", "open_store", "open_writer", "redact"]
