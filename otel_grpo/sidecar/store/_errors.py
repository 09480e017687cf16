"""Which store errors are the database's trouble (retryable: 503 + Retry-After) and which are bugs (500).

    try:
        store.write_batch(batch)
    except Exception as exc:
        if not unavailable(exc):
            raise            # a bug: a 500 that names itself
        ...                  # locked, full, unreachable, too slow: 503, retry later

sqlite3 raises OperationalError both for a locked or full database and for SQL that names a
missing column (SQLITE_ERROR): only the first kind is retryable, so SQLite's errors are told
apart by their primary result code. PostgreSQL's are told apart by their SQLSTATE, not by
psycopg's class: a read-only server (a primary demoted to a hot standby, or
`default_transaction_read_only` set, 25006) raises InternalError, and a deadlock raises
OperationalError beside SQL routine errors that are bugs. An error with no SQLSTATE was raised
by the client (cannot connect, no answer within the bound, pool exhausted): retryable when it is
an OperationalError.

A refused log-in (a password rotated under a running sidecar) is retryable too, on purpose: an OTLP
exporter drops a batch answered 500 or 4xx and retries one answered 503, and the sidecar reconnects
by itself once the password is fixed. It must still reach a person: `auth_failed` tells it apart,
`describe` says so in the 503 and in /readyz, and the store logs it once (_login).

`describe` says what went wrong in words any client may read: a connection attempt's reason without the host
and port that libpq's message names (the server's "sorry, too many clients already" was "OperationalError"),
and the server's own message of an error it raised ("DiskFull" alone did not say which disk or why).
"""

from __future__ import annotations

import re
import sqlite3

import psycopg


class StoreUnavailable(Exception):
    """The store cannot take this request now (locked, full, read-only, unreachable, busy): retry later.
    `read_only`: the database refused the write as read-only (an ingest worker's error, passed on as text)."""

    def __init__(self, message: str = "", read_only: bool = False, auth: bool = False) -> None:
        super().__init__(message)
        self.read_only = read_only
        self.auth = auth
        """The database refused the sidecar's log-in (see `auth_failed`)."""


# SQLite's primary result codes that describe the database's state, not the statement:
# BUSY, LOCKED, NOMEM, READONLY, INTERRUPT, IOERR, FULL, CANTOPEN, PROTOCOL.
_SQLITE_TRANSIENT = frozenset({5, 6, 7, 8, 9, 10, 13, 14, 15})

_SQLITE_READONLY = 8

# PostgreSQL's SQLSTATEs (classes of two characters, or whole codes) that describe the server's or the
# connection's state, not the statement: the same request may work once the state passes.
_PG_TRANSIENT = frozenset({
    "08",     # connection exception (the server went away mid-request, refused a connection)
    "28",     # authorization: a password rotated under a running sidecar (see the module's docstring)
    "53",     # insufficient resources: disk full, out of memory, too many connections
    "57",     # operator intervention: admin or crash shutdown, cannot connect now (starting, recovering),
              # query cancelled (statement_timeout), database dropped, idle session timeout
    "58000", "58030",                    # system error, I/O error
    "25006",                             # read-only transaction: default_transaction_read_only, a hot standby
    "25P03", "25P04",                    # idle-in-transaction and transaction timeouts
    "40001", "40P01", "40003",           # serialization failure, deadlock, statement completion unknown
    "55P03", "55006",                    # lock not available (lock_timeout), object in use
    "72000",                             # snapshot too old
})
_PG_READ_ONLY = "25006"

# libpq gives a failed connection attempt no SQLSTATE (no result carries one), only the text: the server's
# messages of class 28 at log-in (28P01 a wrong password, also an unknown role's; 28000 no pg_hba.conf entry,
# a role without LOGIN) and libpq's own for a URL without a password the server asks for.
_LOGIN_REFUSED = re.compile(r"authentication failed|no pg_hba\.conf entry|not permitted to log in|no password supplied")
# libpq's message of a failed connection attempt: one line per address tried, each naming the host and port
# ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  sorry, too many clients already'); the
# reason follows the last "failed: " (the server's FATAL or libpq's own: "Connection refused", "timeout expired").
_CONNECT_FAILED = re.compile(r'connection to server (?:at|on socket) .*? failed: (?:FATAL:\s+)?(.+)')
# The server refuses a log-in when every connection slot is taken (SQLSTATE 53300, which libpq does not pass on).
_NO_SLOT = re.compile(r"too many clients already|remaining connection slots are reserved")
# What to look at, where the server's message alone does not say.
MAINTENANCE_APPLICATION_NAME = "otel-grpo-sidecar retention"
"""A PostgreSQL store's maintenance transactions' `application_name` (pg_stat_activity), the sidecar's own
otherwise: a write that waited past the timeout for the writers' lock may have waited for one."""
_HINTS = {
    # the writers' advisory lock or a table's: the holder may be a sidecar's own retention pass, which names itself
    "55P03": (f"the writers' lock (a write, or a retention pass: application_name '{MAINTENANCE_APPLICATION_NAME}') "
              "or a table lock: pg_locks and pg_stat_activity say which"),
    "53100": "the database server's disk is full",
}
AUTH_FAILED = ("authentication failed: the database refused the sidecar's user or password (changed or rotated?); "
               "give the sidecar the current password, or set the role's back: it reconnects by itself")

# Every error a store raises about its database; `unavailable()` says whether one is retryable.
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, psycopg.Error, StoreUnavailable)


def unavailable(exc: BaseException) -> bool:
    """True when `exc` means "the store cannot serve this now; the same request may work later"."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        if state is None:  # the client's own: cannot connect, no answer in time, no pooled connection
            return isinstance(exc, psycopg.OperationalError)
        return state[:2] in _PG_TRANSIENT or state in _PG_TRANSIENT
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_TRANSIENT
    return False


def auth_failed(exc: BaseException) -> bool:
    """True when `exc` says the database refused the sidecar's log-in (SQLSTATE class 28)."""
    if isinstance(exc, StoreUnavailable):
        return exc.auth
    if not isinstance(exc, psycopg.Error):
        return False
    if exc.sqlstate is not None:
        return exc.sqlstate.startswith("28")
    return isinstance(exc, psycopg.OperationalError) and _LOGIN_REFUSED.search(str(exc)) is not None


def connection_lost(exc: BaseException, conn: psycopg.Connection) -> bool:
    """True when `exc` ended `conn`'s session rather than failing its statement (the backend terminated by an
    administrator, a PgBouncer restart, a failover, an idle timeout, a server restart): nothing more runs on
    `conn`, and a new connection may run the same statement. Not a ConnectionTimeout: a server that answered
    nothing within the bound would make a second try wait as long again."""
    return (isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.ConnectionTimeout)
            and (conn.broken or conn.closed))


def read_only(exc: BaseException) -> bool:
    """True when `exc` says the database refuses writes as a whole (read-only): a state the readiness probe can
    see pass by itself, unlike a failed commit."""
    if isinstance(exc, StoreUnavailable):
        return exc.read_only
    if isinstance(exc, psycopg.Error):
        return exc.sqlstate == _PG_READ_ONLY
    if isinstance(exc, sqlite3.OperationalError):
        return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_READONLY
    return False


def connect_failure(exc: BaseException) -> str | None:
    """Why a connection attempt failed, without the host and port (None: `exc` is not a failed attempt)."""
    if not isinstance(exc, psycopg.OperationalError) or exc.sqlstate is not None:
        return None
    reasons = _CONNECT_FAILED.findall(str(exc))
    return reasons[-1].strip() if reasons else None


def cannot_connect(exc: BaseException) -> bool:
    """True when `exc` is a failed connection attempt (every slot taken, the server away), also as an ingest
    worker passes it on (`describe`'s words): what a connection already open, as the readiness probe's, cannot
    try again."""
    if isinstance(exc, StoreUnavailable):
        return str(exc).startswith(_CANNOT_CONNECT)
    return connect_failure(exc) is not None


_CANNOT_CONNECT = "cannot connect to the database"


def describe(exc: BaseException) -> str:
    """`exc` as any client may read it (/readyz and reads are open by default): our own and SQLite's
    messages, a psycopg timeout's, the server's own message of an error it raised; a failed connection
    attempt by its reason alone, since libpq's messages name the database's host and port (other errors
    of the client by type alone); a refused log-in by what to do about it."""
    if auth_failed(exc):
        return AUTH_FAILED
    if isinstance(exc, (StoreUnavailable, sqlite3.Error, psycopg.errors.ConnectionTimeout)):
        return f"{type(exc).__name__}: {exc}".strip()
    if (reason := connect_failure(exc)) is not None:
        if _NO_SLOT.search(reason):
            return (f"{_CANNOT_CONNECT}: every connection slot is taken (max_connections): {reason}; "
                    "the sidecar keeps trying")
        return f"{_CANNOT_CONNECT}: {reason}"
    if isinstance(exc, psycopg.Error) and exc.sqlstate is not None and exc.diag.message_primary:
        said = f"{type(exc).__name__}: {exc.diag.message_primary}"  # the server's words: no host or port
        return f"{said} ({_HINTS[exc.sqlstate]})" if exc.sqlstate in _HINTS else said
    return type(exc).__name__
