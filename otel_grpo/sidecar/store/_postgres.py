"""The PostgreSQL store: the same reads and writes as SQLite's, on a server many sidecars share.

    store = PgStore.open("postgresql://user:pass@host:5432/db")
    store.write_batch(extract(request))      # committed (and durable) before returning

Replicas are stateless: everything lives in the database. Write transactions take one
transaction-level advisory lock, so writers serialize across replicas as they do on SQLite's
single writer (no deadlocks between the upserts of concurrent requests, no lost merges, no
retry loops); reads never wait for it. An ingest inserts its samples before it takes the lock
(inserts unique on (run, step, sample id) are safe side by side, and a transaction that holds
the lock never inserts samples, so none waits for another in a cycle). Statements are the shared ones (`?` placeholders), rewritten
once each for psycopg (`%s`).
"""

from __future__ import annotations

import functools
import logging
import threading
from urllib.parse import urlsplit, urlunsplit

import psycopg

from . import _queries, _writes
from ._dialect import POSTGRES
from ._health import WriteHealth
from ._pool import ConnectionPool
from ._step_series import StepCache
from ._schema import PG_LOCK, migrate_postgres

log = logging.getLogger("otel_grpo.sidecar")
URL_SCHEMES = ("postgresql://", "postgres://")
READ_CONNECTIONS = 8
CONNECT_TIMEOUT_S = 10


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def _clean(params) -> tuple:
    # PostgreSQL text cannot hold NUL (SQLite's can): a NUL in a prompt or completion would fail
    # the whole request, so it is stored as U+FFFD, the replacement character.
    return tuple(p.replace("\x00", "\ufffd") if type(p) is str and "\x00" in p else p for p in params)


class _Connection:
    """A psycopg connection that speaks the shared statements (and sqlite3's execute/executemany)."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params=()) -> psycopg.Cursor:
        return self.raw.execute(_pg_sql(sql), _clean(params))

    def executemany(self, sql: str, rows) -> psycopg.Cursor:
        cursor = self.raw.cursor()
        cursor.executemany(_pg_sql(sql), [_clean(r) for r in rows])
        return cursor

    @property
    def broken(self) -> bool:
        return self.raw.broken or self.raw.closed

    def close(self) -> None:
        self.raw.close()


# One statement for a request's samples: the rows go as one array per column, in the binary
# format (%b; the text format escapes every element with a regex). An executemany (pipelined)
# spent most of its time in psycopg's per-row protocol work in Python (benchmarks/README.md).
_SAMPLE_INSERT_ARRAYS = """
INSERT INTO samples (run_id, step, uid, sample_index, reward, advantage, completion_length,
                     prompt, completion, time, data)
SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bigint[], %b::float8[], %b::float8[],
                     %b::float8[], %b::text[], %b::text[], %b::float8[], %b::text[])
ON CONFLICT (run_id, step, uid) DO NOTHING
"""


def _alive(conn: _Connection) -> bool:
    try:
        conn.raw.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


class PgStore(_queries.Reads, _writes.Writes):
    """Runs, steps, phases, samples and alerts in one PostgreSQL database."""

    dialect = POSTGRES

    def __init__(self, url: str, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
                 step_cache: StepCache | None = None) -> None:
        self.step_cache = StepCache() if step_cache is None else step_cache
        self.url = url
        # The sidecar's durability setting, in PostgreSQL's terms. NORMAL, as in SQLite: a 200 is
        # committed on the server, so it survives the sidecar being killed, but the server flushes
        # its WAL within ~0.2 s rather than before answering (a crash of the database machine may
        # lose that much). FULL: flushed before the COMMIT returns, as PostgreSQL does by default.
        self._synchronous_commit = "on" if synchronous == "FULL" else "off"
        self.health = WriteHealth(None, redact(url))
        self.found_version: int | None = None
        self._wlock = threading.Lock()
        self._writer: _Connection | None = None
        self._pool = ConnectionPool(self._connect, read_connections, alive=_alive)
        self._closed = False

    @classmethod
    def open(cls, url: str, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
             step_cache: StepCache | None = None) -> "PgStore":
        """Connect and migrate; raises psycopg.OperationalError if the server cannot be reached."""
        store = cls(url, synchronous, read_connections, step_cache)
        conn = store._connect()
        try:
            store.found_version = migrate_postgres(conn.raw)
        except BaseException:
            conn.close()
            raise
        store._writer = conn
        return store

    @classmethod
    def open_writer(cls, url: str, synchronous: str = "NORMAL") -> "PgStore":
        """A write handle for an ingest worker process (the opening process migrated). It connects
        at its first write, so a worker started while the server is away still starts."""
        return cls(url, synchronous, read_connections=1)

    def _connect(self) -> _Connection:
        # autocommit: a statement outside `_tx` is its own transaction, so a pooled read
        # connection never sits "idle in transaction" holding back vacuum.
        raw = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                              application_name="otel-grpo-sidecar")
        raw.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        return _Connection(raw)

    def read(self):
        """Context manager: a pooled read connection."""
        return self._pool.connection()

    def _insert_samples(self, conn: _Connection, rows: list[tuple]) -> int:
        columns = [list(column) for column in zip(*(_clean(r) for r in rows))]
        return conn.raw.execute(_SAMPLE_INSERT_ARRAYS, columns).rowcount

    def _tx(self, samples_first: bool = False):
        return _Transaction(self, lock=not samples_first)

    def _serialize(self, conn: _Connection) -> None:
        conn.raw.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))

    def wake_checkpointer(self) -> None:
        """Nothing to do: the server runs its own checkpoints."""

    def optimize(self) -> None:
        """Nothing to do: autovacuum keeps the planner's statistics current."""

    def size_bytes(self) -> int:
        try:
            with self.read() as conn:
                return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
        except psycopg.Error:
            return 0

    def close(self) -> None:
        self._closed = True
        with self._wlock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self._pool.close()


class _Transaction:
    """The write lock, a transaction and the advisory lock; reconnects once if the connection was lost."""

    def __init__(self, store: PgStore, lock: bool) -> None:
        self.store = store
        self.lock = lock
        self.tx = None

    def __enter__(self) -> _Connection:
        store = self.store
        store._wlock.acquire()
        try:
            if store._closed:
                raise RuntimeError("store is closed")
            try:
                self._begin()
            except psycopg.OperationalError:
                # The connection may have died while idle (the server restarted): a new one, once.
                self._reconnect()
                self._begin()
        except BaseException:
            store._wlock.release()
            raise
        return store._writer

    def _reconnect(self) -> None:
        store = self.store
        if store._writer is not None:
            store._writer.close()
            store._writer = None
        store._writer = store._connect()

    def _begin(self) -> None:
        if self.store._writer is None or self.store._writer.broken:
            self._reconnect()
        raw = self.store._writer.raw
        tx = raw.transaction()
        tx.__enter__()
        try:
            if self.lock:
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
            else:
                raw.execute("SELECT 1")  # a first statement here finds a connection that died idle
        except BaseException as exc:
            tx.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self.tx = tx

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.tx.__exit__(exc_type, exc, tb)
        finally:
            self.store._wlock.release()
