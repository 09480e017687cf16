"""A small bounded pool of SQLite read connections (PostgreSQL's is psycopg_pool's).

    pool = ConnectionPool(connect, size=8)
    with pool.connection() as conn:
        conn.execute("SELECT 1")

The server runs reads on up to 40 threads. With one connection per thread, each SQLite
connection kept its page cache for good (concurrent queries multiplied the sidecar's memory:
benchmarks/README.md); here at most `size` connections exist and a read waits for a free one.
`renew()` retires every connection made so far (each is closed instead of reused): SQLite loads
the planner's statistics when a connection opens and never again. A read waits at most `wait_s`
for a connection, then gets StoreUnavailable (a 503): with the database hung, reads used to pile
up behind the pool and hold the server's threads for as long as it hung.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._errors import StoreUnavailable


class ConnectionPool:
    def __init__(self, connect: Callable[[], Any], size: int, wait_s: float | None = None) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self.wait_s = wait_s
        self._connect = connect
        self._idle: list[tuple[Any, int]] = []  # (connection, generation)
        self._generation = 0
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0
        """Connections made so far."""

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        if not self._slots.acquire(timeout=self.wait_s):
            raise StoreUnavailable(f"no database connection free within {self.wait_s:g} s "
                                   f"(all {self.size} busy)")
        try:
            conn, generation = self._take_idle()
            if conn is None:
                generation = self._generation
                conn = self._connect()
                self.opened += 1
            try:
                yield conn
            finally:
                with self._lock:
                    if self._closed or generation != self._generation:
                        conn.close()
                    else:  # LIFO: the warmest is used next
                        self._idle.append((conn, generation))
        finally:
            self._slots.release()

    def _take_idle(self) -> tuple[Any, int]:
        with self._lock:
            return self._idle.pop() if self._idle else (None, 0)

    def renew(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()
