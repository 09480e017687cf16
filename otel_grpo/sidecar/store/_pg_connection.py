"""A PostgreSQL connection as the store uses it: the shared statements, a bound on every wait, one retry.

    raw = BoundedConnection.connect(url, login=login)   # waits at most `raw.deadline_s` for any answer
    conn = Connection(raw, renew=lambda dead: new_one())
    conn.execute("SELECT ... WHERE run_id = ?", (run_id,))  # run again on new_one() if it found raw lost

The statements are SQLite's (`?` placeholders), rewritten once each for psycopg (`%s`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors

from ._errors import connection_lost
from ._login import Login

_WAIT_TIMEOUT = getattr(pg_errors, "_WaitTimeout", pg_errors.ConnectionTimeout)  # psycopg >= 3.2 bounds waits with it
T = TypeVar("T")


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def clean(params) -> tuple:
    # PostgreSQL text cannot hold NUL (SQLite's can): a NUL in a prompt or completion would fail
    # the whole request, so it is stored as U+FFFD, the replacement character.
    return tuple(p.replace("\x00", "\ufffd") if type(p) is str and "\x00" in p else p for p in params)


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
