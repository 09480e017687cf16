"""Which store errors are the database's trouble (retryable: 503 + Retry-After) and which are bugs (500).

    try:
        store.write_batch(batch)
    except Exception as exc:
        if not unavailable(exc):
            raise            # a bug: a 500 that names itself
        ...                  # locked, full, unreachable, too slow: 503, retry later

sqlite3 raises OperationalError both for a locked or full database and for SQL that names a
missing column (SQLITE_ERROR): only the first kind is retryable, so SQLite's errors are told
apart by their primary result code. psycopg's OperationalError is the server's or the
connection's trouble (unreachable, restarting, statement or lock timeout, disk full); its
programming errors (a missing column) are ProgrammingError, never retryable.
"""

from __future__ import annotations

import sqlite3

import psycopg


class StoreUnavailable(Exception):
    """The store cannot take this request now (locked, full, read-only, unreachable, busy): retry later."""


# SQLite's primary result codes that describe the database's state, not the statement:
# BUSY, LOCKED, NOMEM, READONLY, INTERRUPT, IOERR, FULL, CANTOPEN, PROTOCOL.
_SQLITE_TRANSIENT = frozenset({5, 6, 7, 8, 9, 10, 13, 14, 15})

# Every error a store raises about its database; `unavailable()` says whether one is retryable.
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, psycopg.Error, StoreUnavailable)


def unavailable(exc: BaseException) -> bool:
    """True when `exc` means "the store cannot serve this now; the same request may work later"."""
    if isinstance(exc, (StoreUnavailable, psycopg.OperationalError)):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_TRANSIENT
    return False


def describe(exc: BaseException) -> str:
    """`exc` as any client may read it (/readyz and reads are open by default): our own and SQLite's
    messages, a psycopg timeout's; other psycopg errors by type alone, since libpq's messages name
    the database's host and port."""
    if isinstance(exc, (StoreUnavailable, sqlite3.Error, psycopg.errors.ConnectionTimeout, psycopg.errors.QueryCanceled)):
        return f"{type(exc).__name__}: {exc}".strip()
    return type(exc).__name__
