"""The PostgreSQL store: the same reads and writes as SQLite's, on a server many sidecars share.

    store = PgStore.open("postgresql://user:pass@host:5432/db")
    store.write_batch(extract(request))      # committed (and durable) before returning

Replicas are stateless: everything lives in the database. Write transactions take one
transaction-level advisory lock, so writers serialize across replicas as they do on SQLite's
single writer (no deadlocks between the upserts of concurrent requests, no lost merges, no
retry loops); reads never wait for it. An ingest inserts its samples before it takes the lock
(inserts unique on (run, step, sample id) are safe side by side, and a transaction that holds
the lock never inserts samples, so none waits for another in a cycle). Statements are the shared ones (`?` placeholders), rewritten
once each for psycopg (`%s`). Every read and write is a transaction that sets its own timeouts (_pg_connection.begin),
so the store works through a transaction pooler (PgBouncer) as on a direct connection.

A database in trouble is a fast error, never a hang (each becomes a 503 + Retry-After): the
server cancels a statement after `timeout_s` (`statement_timeout`) and a lock wait after as long
(`lock_timeout`); a server that answers nothing at all (stopped, hung, a host gone silent whose
kernel still acknowledges packets, so TCP keepalives see nothing wrong) is given up on by the
client a second later (`BoundedConnection`); keepalives and `tcp_user_timeout` find a dead peer
on an idle or a sending connection. A request waits at most `timeout_s` for the write lock or a
read connection: reads share a psycopg_pool.ConnectionPool of `read_connections`, which opens them on
demand (its own threads) and replaces a broken one. The pool tries to connect for at most
`timeout_s` at a time (backing off 1, 2 s), then again at once while reads wait: reads work within a
few seconds of the server's return, and readiness asks the pool for a connection too.

A connection the server ended while it sat idle (a backend terminated by an administrator, a PgBouncer
restart, a failover, an idle timeout, a restart) is found by the first statement that uses it: a read's,
a write transaction's (BEGIN and its lock) or the readiness probe's. Nothing of it can have been kept,
so it runs once more on a new connection (`Connection.first`, in _pg_connection), whose wait shares the
same `timeout_s`, and the request succeeds; a lost read connection also drains the pool, whose other idle
connections were most likely ended with it. A statement after one that worked is never run again: a write
that may have committed is the client's to retry. A refused log-in (a rotated password) is told apart
(_login)."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from . import _queries, _writes
from ._dialect import POSTGRES
from ._errors import MAINTENANCE_APPLICATION_NAME, StoreUnavailable, describe, read_only, unavailable
from ._health import WriteHealth
from ._login import Login
from ._pg_connection import CONNECT, BoundedConnection, Connection, begin, clean, end
from ._step_columns import KnownColumns
from ._step_series import StepCache
from .migrations import PG_LOCK, migrate_postgres
from ._writes import MAINTENANCE_TIMEOUT_S

log = logging.getLogger("otel_grpo.sidecar")
URL_SCHEMES = ("postgresql://", "postgres://")
READ_CONNECTIONS = 8
GRACE_S = 1.0
"""How much longer than `statement_timeout` the client waits for the server's answer: enough for a
live server to report the cancelled statement itself, which keeps the connection usable."""
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
             "tcp_user_timeout": 30_000}
"""TCP keepalives and user timeout: a connection to a host that vanished (no RST ever comes) fails
within ~30 s, idle or sending, instead of the kernel's ~15 minutes of retransmissions. Defaults: each one that
the URL sets itself (`?tcp_user_timeout=10000`, libpq's names) is the URL's."""
READ_PROBE_S = 0.5
"""The longest the readiness probe waits for a read connection (its caller waits 1 s for the whole probe)."""
WRITE_PROBE_S = 0.4
WRITTEN_TABLES = ("alerts", "phases", "runs", "samples", "step_attempts", "step_columns", "step_scalars",
                  "step_spans", "steps")
"""The tables the store writes (the migrations' schema less its version): the probe write takes their lock.
Named, not listed from the catalog: a database the store shares may hold others' tables, whose locks are not
the store's problem (tests/sidecar/test_store.py checks this against a migrated database)."""
"""The readiness probe's write (`_probe_write`): its statement timeout, and its lock timeout's bound."""


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


# One statement for a request's samples: the rows go as one array per column, in the binary
# format (%b; the text format escapes every element with a regex). An executemany (pipelined)
# spent most of its time in psycopg's per-row protocol work in Python (benchmarks/README.md).
_SAMPLE_INSERT_ARRAYS = """
INSERT INTO samples (run_id, step, uid, sample_index, reward, advantage, completion_length,
                     prompt, completion, time, data, attempt)
SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::bigint[], %b::float8[], %b::float8[],
                     %b::float8[], %b::text[], %b::text[], %b::float8[], %b::text[], %b::bigint[])
ON CONFLICT (run_id, step, uid) DO NOTHING
"""


def _grow_if_awaited(pool: ConnectionPool) -> None:
    # The pool's attempt to open a connection gave up (after `reconnect_timeout`, the store's timeout: its
    # default of 300 s backed off 1, 2, 4 ... 128 s, and reads stayed 503 for up to half an outage after the
    # server was back). A read waiting now would otherwise wait out its timeout for nothing: start another.
    if pool.get_stats().get("requests_waiting"):
        pool.check()


class PgStore(_queries.Reads, _writes.Writes):
    """Runs, steps, phases, samples and alerts in one PostgreSQL database."""

    dialect = POSTGRES

    def __init__(self, url: str, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
                 step_cache: StepCache | None = None, timeout_s: float = 5.0) -> None:
        self.step_cache = StepCache() if step_cache is None else step_cache
        self.url = url
        self.known_columns = KnownColumns()
        # `synchronous` is SQLite's setting: on PostgreSQL every commit is flushed to the server's WAL
        # before it returns (synchronous_commit = on), so a 200 survives the server's processes being
        # killed too. With `off` (this store's old NORMAL), killing one backend with -9 lost 8 of 4,800
        # samples already answered 200 (the postmaster's crash restart drops unwritten WAL buffers).
        self.synchronous = synchronous
        self.timeout_s = timeout_s
        self.health = WriteHealth(None, redact(url), probe_writes=True)
        self.login = Login(redact(url), hold_s=timeout_s)  # the pool's reconnect_timeout, below
        logging.getLogger("psycopg.pool").addFilter(self.login)
        self.found_version: int | None = None
        self._wlock = threading.Lock()
        self._writer: Connection | None = None
        self._pool = ConnectionPool(
            url, connection_class=BoundedConnection,
            kwargs={"autocommit": True, "login": self.login, **self._connect_kwargs()},
            min_size=0, max_size=read_connections, timeout=timeout_s, open=True, name="otel-grpo-reads",
            configure=self._configure_read, reconnect_timeout=timeout_s, reconnect_failed=_grow_if_awaited)
        self._probe: Connection | None = None  # readiness's own connection (see ping)
        self._closed = False

    @classmethod
    def open(cls, url: str, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
             step_cache: StepCache | None = None, timeout_s: float = 5.0) -> "PgStore":
        """Connect and migrate; raises psycopg.OperationalError if the server cannot be reached."""
        store = cls(url, synchronous, read_connections, step_cache, timeout_s)
        # A migration may rewrite a large table, and a replica waits for another's migration (its
        # advisory lock) as long as that may take: the maintenance timeouts, on a connection of its own.
        try:
            store.found_version = migrate_postgres(
                lambda: store._connect_raw(autocommit=False, deadline_s=MAINTENANCE_TIMEOUT_S),
                timeout_s=MAINTENANCE_TIMEOUT_S)
            store._writer = store._connect()
        except BaseException:
            store.close()  # the pool's threads
            raise
        return store

    @classmethod
    def open_writer(cls, url: str, synchronous: str = "NORMAL", timeout_s: float = 5.0) -> "PgStore":
        """A write handle for an ingest worker process (the opening process migrated). It connects
        at its first write, so a worker started while the server is away still starts."""
        return cls(url, synchronous, read_connections=1, timeout_s=timeout_s)

    def _connect(self, deadline_s: float | None = None) -> Connection:
        return Connection(self._connect_raw(deadline_s=deadline_s))

    def _connect_raw(self, autocommit: bool = True, deadline_s: float | None = None) -> "BoundedConnection":
        # autocommit: the store begins and ends every transaction itself (`begin`, `end`), so a pooled read
        # connection never sits "idle in transaction" holding back vacuum.
        raw = BoundedConnection.connect(self.url, autocommit=autocommit, login=self.login, **self._connect_kwargs())
        raw.deadline_s = deadline_s or self.timeout_s + GRACE_S
        return raw

    def _connect_kwargs(self) -> dict:
        # No session settings (`options`): each transaction sets its own (_pg_connection.begin).
        # psycopg lets keyword arguments override the URL's own parameters: the URL's keepalives stay its own.
        own = conninfo_to_dict(self.url)
        keepalive = {k: v for k, v in KEEPALIVE.items() if k not in own}
        return dict(application_name="otel-grpo-sidecar",
                    connect_timeout=max(2, math.ceil(self.timeout_s)), **keepalive, **CONNECT)  # libpq's least: 2 s

    def ping(self) -> bool:
        """Whether the server answers, on a connection of its own (readiness never waits behind reads for a
        pooled one), and whether it takes writes, which `health` is told (`checked`): a server made read-only
        or demoted to a hot standby answered every ingest 503 while /readyz said 200. Called from one thread
        at a time (the readiness probe's)."""
        if self._probe is None or self._probe.broken:
            self._probe = self._connect()
        self._probe.renew = self._reconnect
        try:
            standby, read_only = self._probe.execute(
                "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").fetchone()
        except psycopg.Error:
            self._probe.close()
            self._probe = None
            raise
        self.health.checked("the database is a hot standby (in recovery)" if standby else
                            "the database refuses writes (default_transaction_read_only)" if read_only == "on" else None)
        self._ping_reads()
        if self.health.write_held():
            self._probe_write()
        return True

    def _probe_write(self) -> None:
        """Tell `health` whether a write works now (`probe_wrote`), tried in a transaction rolled back: the lock
        every write takes on each of the store's tables (a table locked past the timeouts, by a DBA's LOCK TABLE, a
        VACUUM FULL or an ALTER TABLE, fails it) and a new page of a new table (a full disk fails its extension).
        A temporary table lives in the database's default tablespace unless `temp_tablespaces` names another, as
        the store's tables do unless moved: a full disk elsewhere is told by the next ingest. An error that is not
        the database's state (the TEMPORARY privilege revoked) tells nothing: the failure is then held as one no
        probe sees (`HOLD_S`), not for good."""
        raw = self._probe.raw
        try:
            begin(raw, WRITE_PROBE_S, min(WRITE_PROBE_S, self.timeout_s))
            raw.execute(f"LOCK TABLE {', '.join(WRITTEN_TABLES)} IN ROW EXCLUSIVE MODE")
            raw.execute("CREATE TEMPORARY TABLE otel_grpo_write_probe (written integer)")
            raw.execute("INSERT INTO otel_grpo_write_probe VALUES (1)")
        except psycopg.Error as exc:
            self.health.probe_wrote(describe(exc), told=unavailable(exc))
            return
        finally:
            end(raw, commit=False)
        self.health.probe_wrote(None)

    def _ping_reads(self) -> None:
        """StoreUnavailable when the read pool cannot give a connection within `READ_PROBE_S` although one is
        free or can be made: after a restart the probe's own connection is back before the pool's (which
        reconnects on its schedule), and /readyz said 200 while every read was 503. Every connection in use
        is a pool at work (a read waits for one at most `timeout_s`): ready."""
        stats = self._pool.get_stats()
        if stats.get("pool_available", 0) == 0 and stats.get("pool_size", 0) >= self._pool.max_size:
            return
        try:
            raw = self._pool.getconn(timeout=min(READ_PROBE_S, self.timeout_s))
        except PoolTimeout:
            raise self._no_connection(f"the database answers, but no read connection could be opened within "
                                      f"{min(READ_PROBE_S, self.timeout_s):g} s (reconnecting)") from None
        self._pool.putconn(raw)

    def _configure_read(self, raw: BoundedConnection) -> None:
        raw.deadline_s = self.timeout_s + GRACE_S

    def _reconnect(self, dead: psycopg.Connection) -> BoundedConnection:
        """A new connection of its own in place of `dead` (the writer's, the probe's)."""
        dead.close()
        return self._connect_raw()

    def _no_connection(self, why: str) -> StoreUnavailable:
        """The 503 of a read that got no connection: why, or that the database refuses the sidecar's log-in, and
        why the last connection attempt failed (every slot taken, the server down)."""
        problem = self.login.problem
        if problem is not None and self.login.auth:
            return StoreUnavailable(problem, auth=True)
        return StoreUnavailable(why if problem is None else f"{why}; {problem}")

    def _read_connection(self, deadline: float) -> BoundedConnection:
        try:
            return self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
        except PoolTimeout:
            raise self._no_connection(f"no database connection free within {self.timeout_s:g} s "
                                      f"(all {self._pool.max_size} busy, or the database unreachable)") from None

    def _renew_read(self, dead: psycopg.Connection, deadline: float) -> BoundedConnection:
        # The server ended it while idle, and most likely the pool's other idle connections with it (a restart, a
        # failover, all terminated): each would cost a request its one retry.
        self._pool.putconn(dead)  # broken: the pool discards it
        self._pool.drain()
        return self._read_connection(deadline)

    @contextlib.contextmanager
    def read(self):
        """Context manager: a pooled read connection in a transaction of the read's timeouts; StoreUnavailable
        (a 503) when none is free (or can be made) within `timeout_s`, the wait for a new one in place of a lost
        one included."""
        deadline = time.monotonic() + self.timeout_s
        conn = Connection(self._read_connection(deadline), lambda dead: self._renew_read(dead, deadline))
        try:
            conn.first(lambda raw: begin(raw, self.timeout_s, self.timeout_s))
            yield conn
        finally:
            if conn.raw is not None:
                end(conn.raw, commit=False)  # a read writes nothing
                self._pool.putconn(conn.raw)

    def _insert_samples(self, conn: Connection, rows: list[tuple]) -> int:
        columns = [list(column) for column in zip(*(clean(r) for r in rows))]
        return conn.raw.execute(_SAMPLE_INSERT_ARRAYS, columns).rowcount

    def _tx(self, samples_first: bool = False, timeout_s: float | None = None):
        return _Transaction(self, lock=not samples_first, timeout_s=timeout_s)

    def _serialize(self, conn: Connection) -> None:
        conn.raw.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))

    def wake_checkpointer(self) -> None:
        """Nothing to do: the server runs its own checkpoints."""

    def optimize(self) -> None:
        """Nothing to do: autovacuum keeps the planner's statistics current."""

    def size_bytes(self) -> int:
        """The database's size on disk; raises what the database raises (the gauge keeps its last value)."""
        with self.read() as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])

    def close(self) -> None:
        self._closed = True
        with self._wlock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        self._pool.close()
        logging.getLogger("psycopg.pool").removeFilter(self.login)


class _Transaction:
    """The write lock, a transaction and the advisory lock; on a new connection once if its first statements found
    the writer's lost (`Connection.first`). `timeout_s`: a maintenance transaction's longer statement timeout."""

    def __init__(self, store: PgStore, lock: bool, timeout_s: float | None = None) -> None:
        self.store = store
        self.lock = lock
        self.timeout_s = timeout_s

    def __enter__(self) -> Connection:
        store = self.store
        if not store._wlock.acquire(timeout=store.timeout_s):
            raise StoreUnavailable(f"the store's write lock was not free within {store.timeout_s:g} s "
                                   "(another write of this process holds it, or its retention pass)")
        try:
            if store._closed:
                raise RuntimeError("store is closed")
            if store._writer is None or store._writer.broken:
                store._writer = store._connect()
            store._writer.renew = store._reconnect
            store._writer.first(self._begin)
        except BaseException:
            store._wlock.release()
            raise
        return store._writer

    def _begin(self, raw: "BoundedConnection") -> None:
        store = self.store
        raw.deadline_s = (self.timeout_s or store.timeout_s) + GRACE_S
        # also finds a connection that died idle; a maintenance transaction names itself while it waits and holds
        # the writers' lock, for whoever finds a write waited for it (`_errors`)
        begin(raw, self.timeout_s or store.timeout_s, store.timeout_s,
              None if self.timeout_s is None else MAINTENANCE_APPLICATION_NAME)
        if self.lock:
            try:
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK,))
            except BaseException:
                end(raw, commit=False)
                raise

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            end(self.store._writer.raw, commit=exc is None)
        finally:
            if exc is not None and read_only(exc) and self.store._writer is not None:
                # A session keeps the read-only default it began with (`ALTER DATABASE ... SET
                # default_transaction_read_only`, a failover's new primary reached through the same
                # address): the next write starts a new one, which sees the database's current setting.
                self.store._writer.close()
                self.store._writer = None
            self.store._wlock.release()
