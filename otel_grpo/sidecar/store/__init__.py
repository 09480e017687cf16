"""The sample store: SQLite (WAL) by default, PostgreSQL for teams (replicas on one database).

    store = open_store("sidecar.db")                          # a path: SQLite
    store = open_store("postgresql://u:p@db:5432/otel")       # a URL: PostgreSQL

Both hold runs, per-step scalar history, phase durations, samples and alerts, behind the same
methods (`write_batch`, `runs`, `samples`, ...).
"""

from __future__ import annotations

from pathlib import Path

from ._errors import STORE_ERRORS, StoreUnavailable, auth_failed, describe, read_only, unavailable
from ._postgres import PgStore, is_postgres_url, redact
from ._queries import SAMPLE_CORE_COLUMNS, SampleQuery
from .migrations import HEAD as SCHEMA_VERSION
from .migrations import SchemaError
from ._step_series import StepCache
from ._store import STARTUP_LOCK_TIMEOUT_S, Store

PG_SCHEMA_VERSION = SCHEMA_VERSION  # one revision chain: both dialects share the version number
DB_TIMEOUT_S = 5.0  # see SidecarSettings.db_timeout_s


def open_store(target: str | Path, synchronous: str = "NORMAL", read_connections: int = 8,
               step_cache: StepCache | None = None, timeout_s: float = DB_TIMEOUT_S,
               startup_lock_timeout_s: float = STARTUP_LOCK_TIMEOUT_S) -> Store | PgStore:
    """Open (creating and migrating) the store at `target`: a PostgreSQL URL or an SQLite path.
    `step_cache`: the runs' steps held for reads, with their bound and column names (see
    _step_series); default: 256 MiB, the stored names. `timeout_s`: the longest a statement, or a
    wait for a connection or the write lock, may take before StoreUnavailable or OperationalError.
    `startup_lock_timeout_s` (SQLite): the longest the migration waits for another process's write
    lock (PostgreSQL replicas wait for one another's migration as long as maintenance may take)."""
    if is_postgres_url(target):
        return PgStore.open(str(target), synchronous, read_connections, step_cache, timeout_s)
    return Store.open(target, synchronous, read_connections, step_cache, timeout_s, startup_lock_timeout_s)


def open_writer(target: str | Path, synchronous: str = "NORMAL", timeout_s: float = DB_TIMEOUT_S) -> Store | PgStore:
    """A write handle on a store `open_store` has created (for ingest worker processes)."""
    if is_postgres_url(target):
        return PgStore.open_writer(str(target), synchronous, timeout_s)
    return Store.open_writer(target, synchronous, timeout_s)


__all__ = ["DB_TIMEOUT_S", "PG_SCHEMA_VERSION", "SAMPLE_CORE_COLUMNS", "SCHEMA_VERSION", "STORE_ERRORS", "PgStore",
           "SampleQuery", "SchemaError", "StepCache", "Store", "StoreUnavailable", "auth_failed", "describe",
           "is_postgres_url", "open_store", "open_writer", "read_only", "redact", "unavailable"]
