"""A PostgreSQL connection as the store uses it: the shared statements, a bound on every wait, one retry.

    raw = BoundedConnection.connect(url, login=login)   # waits at most `raw.deadline_s` for any answer
    conn = Connection(raw, renew=lambda dead: new_one())
    conn.execute("SELECT ... WHERE run_id = ?", (run_id,))  # run again on new_one() if it found raw lost

The statements are SQLite's (`?` placeholders), rewritten once each for psycopg (`%s`).

Every transaction carries its own settings, and no statement is prepared on the server, so that a store works the
same through a transaction pooler (PgBouncer's `pool_mode = transaction`, RDS Proxy, the poolers of managed
databases), which runs each transaction on whichever server session is free:

    begin(raw, statement_s=5.0, lock_s=5.0)    # BEGIN and its timeouts (SET LOCAL), in one round trip
    ...
    end(raw, commit=True)                      # COMMIT (False: ROLLBACK, quietly on a lost connection)

Session settings would stay on (or miss) another client's session, and a pooler refuses them in the start-up
packet (`options`: "unsupported startup parameter"); a statement prepared on one session is unknown to the next
("prepared statement _pg3_0 does not exist"), hence `prepare_threshold=None` on every connection (`CONNECT`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors

from .._nul import NUL, without_nul
from ._errors import connection_lost
from ._login import Login

_WAIT_TIMEOUT = getattr(pg_errors, "_WaitTimeout", pg_errors.ConnectionTimeout)  # psycopg >= 3.2 bounds waits with it
T = TypeVar("T")
CONNECT = {"prepare_threshold": None}
"""psycopg's arguments of every connection: no server-side prepared statement (see above)."""


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def clean(params) -> tuple:
    """`params` with the NULs of their strings as U+FFFD (`_nul`): PostgreSQL text cannot hold one, and a statement
    given one fails whole."""
    return tuple(without_nul(p) if type(p) is str and NUL in p else p for p in params)


LOCK_SHARE = 0.9
"""The share of a statement's timeout that a lock wait in it may take at most: a statement waiting for a lock that
someone else holds (a DBA's LOCK TABLE, a VACUUM FULL, an ALTER TABLE) then fails as a lock timeout (55P03,
"canceling statement due to lock timeout"), which says to look at locks; with both timeouts equal, the statement's
fired first and read as a slow statement."""


def transaction_settings(statement_s: float, lock_s: float) -> str:
    """The settings of one transaction, as statements to run first in it: the server cancels a statement after
    `statement_s` and a lock wait after `lock_s` (at most `LOCK_SHARE` of `statement_s`); its commit is flushed to
    the server's WAL before it returns (a database whose default is `synchronous_commit = off` would lose
    acknowledged writes to a crash)."""
    return (f"SET LOCAL statement_timeout = {_ms(statement_s)}; "
            f"SET LOCAL lock_timeout = {_ms(min(lock_s, LOCK_SHARE * statement_s))}; SET LOCAL synchronous_commit = on")


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))  # 0 would mean no timeout at all


def begin(raw: psycopg.Connection, statement_s: float, lock_s: float, name: str | None = None) -> None:
    """BEGIN on `raw` (an autocommit connection) and the transaction's settings, one message: no parameters, so
    psycopg sends it as a simple query, which may hold several statements. `name`: the session's
    `application_name` for this transaction (pg_stat_activity shows it), a plain constant."""
    named = "" if name is None else f"; SET LOCAL application_name = '{name}'"
    raw.execute("BEGIN; " + transaction_settings(statement_s, lock_s) + named)


def end(raw: psycopg.Connection, commit: bool) -> None:
    """COMMIT the transaction `begin` started (raises what the commit raises), or ROLLBACK it; a rollback that fails
    leaves a lost connection behind, which the server rolled back and whose owner replaces it."""
    if commit:
        raw.execute("COMMIT")
        return
    if raw.closed or raw.broken or raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        raw.execute("ROLLBACK")
    except psycopg.Error:
        pass


class Connection:
    """A psycopg connection that speaks the shared statements (and sqlite3's execute/executemany).

    `renew`, while set: what replaces the connection if the next statement finds it lost (`first`)."""

    __slots__ = ("raw", "renew")

    def __init__(self, raw: psycopg.Connection | None,
                 renew: Callable[[psycopg.Connection], psycopg.Connection] | None = None) -> None:
        self.raw = raw
        self.renew = renew

    def first(self, statement: Callable[[psycopg.Connection], T]) -> T:
        """`statement(raw)`; where it found the connection lost (`connection_lost`) and `renew` is set, once more on
        `renew(dead)`, the new connection. Clears `renew`: only a first statement is ever run twice. While `renew`
        runs, `raw` is None (a renew that raises has given the dead one back)."""
        renew, self.renew = self.renew, None
        try:
            return statement(self.raw)
        except psycopg.OperationalError as exc:
            if renew is None or not connection_lost(exc, self.raw):
                raise
        dead, self.raw = self.raw, None
        self.raw = renew(dead)
        return statement(self.raw)

    def execute(self, sql: str, params=()) -> psycopg.Cursor:
        if self.renew is not None:
            return self.first(lambda raw: raw.execute(_pg_sql(sql), clean(params)))
        return self.raw.execute(_pg_sql(sql), clean(params))

    def executemany(self, sql: str, rows) -> psycopg.Cursor:
        cursor = self.raw.cursor()
        cursor.executemany(_pg_sql(sql), [clean(r) for r in rows])
        return cursor

    @property
    def broken(self) -> bool:
        return self.raw is None or self.raw.broken or self.raw.closed

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()


class BoundedConnection(psycopg.Connection):
    """A psycopg connection that waits at most `deadline_s` for the server's answer to any one
    operation (a statement, a COMMIT, a fetch), then closes itself and raises ConnectionTimeout
    (an OperationalError): a stopped server otherwise held the calling thread for as long as it was
    stopped, since libpq has no client-side timeout beyond `connect_timeout`."""

    deadline_s: float | None = None

    @classmethod
    def connect(cls, conninfo: str = "", *, login: Login | None = None, **kwargs) -> "BoundedConnection":
        """psycopg's connect; `login` is told whether the server let it in (every connection of a store, the read
        pool's included, is made here)."""
        try:
            conn = super().connect(conninfo, **kwargs)
        except psycopg.OperationalError as exc:
            if login is not None:
                login.refused(exc)
            raise
        if login is not None:
            login.accepted()
        return conn

    def wait(self, gen, interval: float = 0.1, timeout: float | None = None):
        bound = self.deadline_s if timeout is None else timeout
        try:
            return super().wait(gen, interval, bound)
        except _WAIT_TIMEOUT:
            # Mid-protocol, the connection's state is unknown: close it (the pool and the writer
            # replace a closed connection). The server rolls back whatever it had open.
            self.pgconn.finish()
            raise pg_errors.ConnectionTimeout(f"the database did not answer within {bound:g} s") from None
