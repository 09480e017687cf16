"""SQLite's statement timeout, which SQLite lacks: PostgreSQL cancels a statement after
`statement_timeout`; here a read connection gets the same bound from two of SQLite's hooks.

    StatementDeadline(conn, seconds=5.0)
    conn.execute(slow_sql)   # sqlite3.OperationalError("interrupted") after 5 s: a retryable 503

The trace hook runs as each statement starts and sets its deadline; the progress hook runs every
`CHECK_EVERY` virtual-machine instructions and interrupts the statement once the deadline passed.
A statement that runs on (a query over a store grown past what its indexes serve, a read behind a
slow disk that still answers) thus holds its pooled connection and its server thread at most
`seconds`, as on PostgreSQL, instead of for as long as it takes. A thread blocked inside one
system call (a disk that answers nothing at all) runs no instruction, so nothing here can free
it; the pool's bounded wait then answers the reads that follow with a 503 (see _pool).
"""

from __future__ import annotations

import math
import sqlite3
import time

CHECK_EVERY = 10_000
"""Instructions between two checks: a few hundred microseconds of work, so the check (one clock read
in Python) costs well under 1% of a statement and a statement overruns its deadline by less than a
millisecond."""


class StatementDeadline:
    def __init__(self, conn: sqlite3.Connection, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        self.seconds = seconds
        self._deadline = math.inf
        conn.set_trace_callback(self._started)
        conn.set_progress_handler(self._overdue, CHECK_EVERY)

    def _started(self, _sql: str) -> None:
        self._deadline = time.monotonic() + self.seconds

    def _overdue(self) -> bool:
        return time.monotonic() > self._deadline
