"""A small bounded pool of read connections, shared by both backends.

    pool = ConnectionPool(connect, size=8)
    with pool.connection() as conn:
        conn.execute("SELECT 1")

The server runs reads on up to 40 threads. With one connection per thread, each SQLite
connection kept its page cache for good (40 concurrent queries took the sidecar from 61 to
1,726 MiB); here at most `size` connections exist and a read waits for a free one. A
connection that a failed read left broken (PostgreSQL restarted) is closed, not reused.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class ConnectionPool:
    def __init__(self, connect: Callable[[], Any], size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._connect = connect
        self._idle: list[Any] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0
        """Connections made so far (closed broken ones included)."""

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        self._slots.acquire()
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._connect()
                self.opened += 1
            try:
                yield conn
            except BaseException:
                if _broken(conn):
                    conn.close()
                    conn = None
                raise
            finally:
                if conn is not None:
                    with self._lock:
                        if self._closed:
                            conn.close()
                        else:
                            self._idle.append(conn)  # LIFO: the warmest connection is used next
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _broken(conn: Any) -> bool:
    return bool(getattr(conn, "broken", False))
