"""The statements a store's reads send its database, counted: each is a round trip to the database.

    with read_statements(store) as statements:
        store.runs_steps_pieces(runs)
    len(statements), [s.rows for s in statements]

Every read of either store runs its statements through `execute` on the connection `store.read()`
lends (SQLite's pooled connection, PostgreSQL's `_Connection`); this lends the same connection with
`execute` recorded, so the statements run on the real database as they would. (SQLite's own hook,
`set_trace_callback`, is taken by the statement deadline; PostgreSQL here has no
pg_stat_statements.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Statement:
    sql: str
    rows: int = 0
    """Rows taken from its result so far."""


class _Result:
    """A statement's cursor that counts the rows taken from it."""

    def __init__(self, cursor, statement: Statement) -> None:
        self._cursor, self._statement = cursor, statement

    def fetchall(self) -> list:
        rows = self._cursor.fetchall()
        self._statement.rows += len(rows)
        return rows

    def fetchone(self):
        row = self._cursor.fetchone()
        self._statement.rows += row is not None
        return row

    def __iter__(self):
        for row in self._cursor:
            self._statement.rows += 1
            yield row


class _Recorded:
    def __init__(self, conn, statements: list[Statement]) -> None:
        self._conn, self._statements = conn, statements

    def execute(self, sql: str, params=()) -> _Result:
        statement = Statement(sql)
        self._statements.append(statement)
        return _Result(self._conn.execute(sql, params), statement)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


@contextlib.contextmanager
def read_statements(store) -> Iterator[list[Statement]]:
    """The statements the store's reads execute while in the block, in order."""
    statements: list[Statement] = []
    lend = store.read

    @contextlib.contextmanager
    def read():
        with lend() as conn:
            yield _Recorded(conn, statements)

    store.read = read
    try:
        yield statements
    finally:
        del store.read
