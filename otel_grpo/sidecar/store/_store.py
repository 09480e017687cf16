"""The SQLite store: one writer connection behind a lock, a small pool of read connections.

    store = Store.open("sidecar.db")
    store.write_batch(extract(request))      # commits before returning
    store.runs()

SQLite in WAL mode lets readers run while the writer commits. Every write holds `_wlock`
and an `flock` of `<db>-ingest.lock` for its whole transaction: one writer at a time, as
SQLite wants, whichever thread or process (the ingest workers) calls; the kernel drops the
flock of a process that dies. Waiting on the flock rather than on SQLite's busy handler
spares the busy sleeps. A write waits for both locks, and then SQLite's own (which a process that
knows nothing of the flock may hold), at most `timeout_s` in all (PostgreSQL's `lock_timeout`), then
raises a retryable error (a 503): a writer that holds a lock and never lets go (blocked on a disk that
answers nothing, stopped) no longer holds every other writer.
Start-up migrates under the same flock and waits for it at most `startup_lock_timeout_s`; then an
existing database is served read-only, as when its migration cannot run, naming who holds the lock,
until `writable_again()` finds the lock free (or the disk with room).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from . import _queries, _writes
from ._checkpoint import TRUNCATE_BYTES, Checkpointer, past_valve, truncate_wal
from ._deadline import StatementDeadline
from ._dialect import SQLITE
from ._errors import StoreUnavailable, unavailable
from ._health import WriteHealth
from ._pool import ConnectionPool
from ._step_columns import KnownColumns
from ._step_series import StepCache
from .migrations import HEAD as SCHEMA_VERSION
from .migrations import migrate_sqlite, sqlite_version

# Sample rows are 1-4 KiB (prompt + completion), so with SQLite's default 4 KiB pages most
# rows take a page of their own: a new store was 26% padding and every byte is written twice
# (WAL, then the checkpoint). 32 KiB pages pack ten rows a page; ingest's write and checkpoint
# cost fell ~30% (benchmarks/README.md). An existing database keeps the page size it has.
PAGE_BYTES = 32768
log = logging.getLogger("otel_grpo.sidecar")

READ_CONNECTIONS = 8  # reads at once; more wait for a free connection (see _pool)
STARTUP_LOCK_TIMEOUT_S = 60.0  # see SidecarSettings.startup_lock_timeout_s


FLOCK_POLL_S = (0.0002, 0.002)
"""A writer waiting for another process's flock tries again after the first pause, doubling up to the
second: the kernel has no timed flock, and a blocked `flock()` in a thread other than the main one
cannot be interrupted (Python retries it after a signal). 2 ms at most costs a few hundred system
calls a second per waiting writer and rarely misses the gaps between another process's transactions
(each worker decodes its next request between two): three processes writing 8-sample requests,
decoding each as a worker does, kept a blocking flock's throughput; their slowest wait for the lock
was 0.06-0.23 s, a blocking flock's 0.04-0.07 s (the kernel wakes a blocked waiter at once)."""


def lock_path(db: Path) -> Path:
    return Path(str(db) + "-ingest.lock")


FOREIGN_LOCK_PROBE_S = 0.1
"""How long the statistics pass (`Store.optimize`) waits for SQLite's lock held by a process without our flock."""


def flock_until(file, deadline: float) -> bool:
    """Take an exclusive flock of `file`, waiting until `deadline` (`time.monotonic()`) at most;
    False if another process held it all that time."""
    pause, longest = FLOCK_POLL_S
    while True:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(2 * pause, longest)


def lock_holder(path: Path) -> str:
    """Who holds the flock of `path`: "pid N (its command line)" as Linux's /proc/locks tells, else
    "another process". For the log and /readyz: a wait on the lock should name what to look at."""
    try:
        st = os.stat(path)
        inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as locks:
            # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:99 0 EOF"; waiters' lines have "->" after the number
            pids = [f[4] for f in map(str.split, locks) if f[1:2] == ["FLOCK"] and f[5:6] == [inode]]
    except OSError:
        return "another process"
    if not pids:
        return "another process"
    try:
        command = " ".join(Path(f"/proc/{pids[0]}/cmdline").read_bytes().decode(errors="replace")
                           .replace("\0", " ").split())
    except OSError:  # gone meanwhile, or another user's
        command = ""
    return f"pid {pids[0]}" + (f" ({command[:80]})" if command else "")


def _as_writer(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Checkpoint settings of a writing connection (the store's own or a worker's)."""
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # never inside COMMIT: see _checkpoint
    conn.execute(f"PRAGMA journal_size_limit = {TRUNCATE_BYTES}")  # the writer is who restarts the WAL
    return conn


class Store(_queries.Reads, _writes.Writes):
    """Runs, steps, phases, samples and alerts in one SQLite file."""

    dialect = SQLITE

    def __init__(self, path: Path, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
                 step_cache: StepCache | None = None, timeout_s: float = 5.0) -> None:
        self.step_cache = StepCache() if step_cache is None else step_cache
        self.path = Path(path)
        self.known_columns = KnownColumns()
        self.synchronous = synchronous
        self.timeout_s = timeout_s
        self._wlock = threading.Lock()
        self._pool = ConnectionPool(self._read_connection, read_connections, wait_s=timeout_s)
        self._probe: sqlite3.Connection | None = None  # readiness's own connection (see ping)
        self._flock = None  # the cross-process write lock file, opened with the writer
        self._writer: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self._analyzed_at: int | None = None  # samples written (the last id) when the statistics were last taken
        self.found_version: int | None = None
        self.health = WriteHealth(self.path)
        self._uri: str | None = None  # set when opened read-only
        self.stale_schema: str | None = None
        """Why reads are refused: opened read-only at an older schema version than this sidecar reads."""

    @classmethod
    def open(cls, path: str | Path, synchronous: str = "NORMAL", read_connections: int = READ_CONNECTIONS,
             step_cache: StepCache | None = None, timeout_s: float = 5.0,
             startup_lock_timeout_s: float = STARTUP_LOCK_TIMEOUT_S) -> "Store":
        """Open (creating if needed) and migrate; the writer connection is ready on return.

        An existing database that cannot be written (a full disk, a read-only mount) or whose write
        lock another process holds for all of `startup_lock_timeout_s` is opened read-only instead:
        reads work, writes raise StoreUnavailable, and `health.read_only` says why. If it is at an
        older schema version (its migration is what failed), reads raise StoreUnavailable naming both
        versions. A database that cannot be created (or migrated: the lock) raises.
        """
        store = cls(Path(path), synchronous, read_connections, step_cache, timeout_s)
        store.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            store._open_for_writing(startup_lock_timeout_s)
        except (sqlite3.OperationalError, StoreUnavailable) as exc:
            if not store.path.is_file() or store.path.stat().st_size == 0:
                raise
            store._open_read_only(exc)
        store.health.watch()
        return store

    def _open_for_writing(self, lock_wait_s: float) -> None:
        """Connect the writer and migrate under the write lock (waiting for it at most `lock_wait_s`); the
        writer is set only once the schema is at the head."""
        conn = self._connect(writable=True)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # takes effect only in a new database
            if self._flock is None:
                self._open_flock()
            self.found_version = self._migrate(conn, lock_wait_s)
        except BaseException:
            conn.close()
            raise
        with self._wlock:
            self._writer = _as_writer(conn)
        self._checkpointer = Checkpointer(self.path, self.synchronous)
        self.optimize()

    def writable_again(self) -> bool:
        """A store served read-only: open it for writing if it now can be (the lock's holder let go, the disk
        has room), without waiting; True once it is writable.

        The sidecar asks every few seconds (`_maintenance_loop`): a fallback that lasted until a restart
        kept every ingest at 503 after the stuck writer was killed or the disk cleaned, a page nobody
        could clear but by hand. Reads go on meanwhile; the read connections, opened read-only (or
        `immutable`, blind to later commits), are renewed once the writer is open.
        """
        if self.health.read_only is None:
            return self._writer is not None
        try:
            self._open_for_writing(lock_wait_s=0)
        except (sqlite3.OperationalError, StoreUnavailable):
            return False  # still held or still full: said once at start-up, the next try is silent
        self.stale_schema, self._uri = None, None
        self._pool.renew()
        self.health.ok()  # says so in the log
        return True

    def _migrate(self, conn: sqlite3.Connection, wait_s: float) -> int:
        # Under the write lock: of two processes opening one old file together, one migrates and the
        # other then finds the head (the version is read again under the lock). The switch to WAL too:
        # two connections switching a rollback-journal file at once each hold a shared lock and want
        # the exclusive one, and SQLite answers one of them "database is locked" without waiting.
        if self._flock is not None:
            self._lock_to_migrate(wait_s)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return migrate_sqlite(self.path, conn)
        finally:
            if self._flock is not None:
                fcntl.flock(self._flock, fcntl.LOCK_UN)

    def _lock_to_migrate(self, wait_s: float) -> None:
        # A holder that never lets go (a stopped or hung writer) held start-up for good, saying nothing.
        if flock_until(self._flock, time.monotonic()):  # free: the usual case
            return
        lock = lock_path(self.path)
        if wait_s > 0:  # 0: the start-up check (`otel-grpo sidecar`) has already waited the whole budget
            log.warning("store %s: waiting up to %g s for %s to check the schema; %s holds it", self.path, wait_s,
                        lock.name, lock_holder(lock))
        if wait_s <= 0 or not flock_until(self._flock, time.monotonic() + wait_s):
            raise StoreUnavailable(f"{lock.name} was not free within the start-up wait (startup_lock_timeout_s), so the "
                                   f"schema could not be checked; held by {lock_holder(lock)}, a writer stuck or stopped?")

    def _open_read_only(self, exc: sqlite3.OperationalError | StoreUnavailable) -> None:
        # mode=ro still needs the WAL index (-shm), which a full disk cannot hold; immutable=1 reads
        # the main file alone (frames still in a -wal file stay unseen until the disk has room).
        locked = isinstance(exc, StoreUnavailable)  # the write lock's holder, not the disk
        self.health.read_only = str(exc) if locked else \
            f"{exc} at start-up (free on its disk: {self.health.free_text()})"
        for flags in ("mode=ro", "immutable=1"):
            self._uri = f"file:{quote(str(self.path.resolve()))}?{flags}"
            try:
                self._connect().execute("SELECT count(*) FROM runs").fetchone()
                break
            except sqlite3.OperationalError:
                continue
        else:
            raise exc
        found = sqlite_version(self._connect())
        if found != SCHEMA_VERSION:  # its migration is what could not run: reads would name missing columns
            self.stale_schema = (f"the database is at schema version {found} and this sidecar reads version "
                                 f"{SCHEMA_VERSION}; the migration could not run ({exc})")
            self.health.read_only += f"; {self.stale_schema}"
        log.error("store %s is not writable (%s): serving it read-only (%s); ingest answers 503 until %s (tried "
                  "again every few seconds)%s", self.path, exc, flags, "the lock is free" if locked else
                  "the disk has room",
                  "" if self.stale_schema is None else f"; reads answer 503 too: {self.stale_schema}")

    @classmethod
    def open_writer(cls, path: str | Path, synchronous: str = "NORMAL", timeout_s: float = 5.0) -> "Store":
        """A write-only handle on a store that `Store.open` has already created and migrated.

        For ingest worker processes: no migration, no planner statistics and no checkpoint
        thread (the opening process runs those; call its `wake_checkpointer` after a commit
        made here). Commits are as durable as `write_batch` on the opening handle.
        """
        store = cls(Path(path), synchronous, read_connections=1, timeout_s=timeout_s)
        store._writer = _as_writer(store._connect(writable=True, create=False))
        store.health.watch()
        store._open_flock()
        return store

    def _open_flock(self) -> None:
        try:
            self._flock = open(lock_path(self.path), "a+b")  # noqa: SIM115 - closed in close()
        except OSError:  # a full disk may refuse even the empty lock file: serialize in process only
            self._flock = None

    def wake_checkpointer(self) -> None:
        """Another connection (a worker process) committed: copy its WAL frames in the background."""
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def _connect(self, writable: bool = False, create: bool = True) -> sqlite3.Connection:
        """A connection to the file; only the opening writer (`writable` and `create`) may create it: a read
        connection opened after the file was deleted made a new, empty one (reads then named missing tables)."""
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, so "committed" means committed.
        if writable and create:
            target, uri = self.path, False
        else:
            target, uri = self._uri if self._uri is not None and not writable else \
                f"file:{quote(str(self.path.resolve()))}?mode=rw", True
        conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False, timeout=30.0)
        if writable:
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA cache_size = -32768")  # 32 MiB page cache per connection
        return conn

    def _read_connection(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -8192")  # 8 MiB: at most READ_CONNECTIONS of these exist
        # PostgreSQL's lock_timeout and statement_timeout: a read waits at most `timeout_s` for a lock
        # another process holds (rather than the connection's 30 s) and runs at most `timeout_s`.
        conn.execute(f"PRAGMA busy_timeout = {round(self.timeout_s * 1000)}")
        StatementDeadline(conn, self.timeout_s)
        return conn

    def read(self):
        """Context manager: a pooled read connection (WAL: it sees the last committed state)."""
        if self.stale_schema is not None:
            raise StoreUnavailable(self.stale_schema)
        self._same_file()
        return self._pool.connection()

    def _same_file(self) -> None:
        """StoreUnavailable (a 503) when the path no longer names the file opened (deleted, replaced)."""
        moved = self.health.file_problem()
        if moved is not None:
            raise StoreUnavailable(moved)

    def ping(self) -> bool:
        """`SELECT 1` on a connection of its own: readiness never waits behind reads for a pooled one.
        Called from one thread at a time (the readiness probe's)."""
        self._same_file()
        if self._probe is None:
            self._probe = self._read_connection()
        return self._probe.execute("SELECT 1").fetchone()[0] == 1

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        with self._wlock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self._pool.close()
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self._flock is not None:
            self._flock.close()
            self._flock = None

    def _tx(self, samples_first: bool = False, timeout_s: float | None = None):
        """Context: the write lock plus one IMMEDIATE transaction, committed on success. (SQLite has one
        writer: serialized from the start; no statement timeout. The locks are waited for at most the
        store's `timeout_s`, whatever `timeout_s` says, as PostgreSQL's `lock_timeout`.)"""
        return _Transaction(self)

    def optimize(self) -> None:
        """Refresh the query planner's statistics once twice as many samples were written as when they were
        last taken (bounded sampling, so cheap at any size; the sidecar asks every few seconds).

        Without them SQLite walks the step index for `step >= 0 ORDER BY reward` instead of the
        reward index, far slower on a large run (benchmarks/README.md); statistics within a factor of two
        of the truth plan alike. A connection reads them only when it opens, so the read connections
        are renewed: those of a sidecar started on an empty database otherwise planned without
        statistics for good.
        """
        with self._wlock:
            if self._writer is None:  # read-only: nothing here changes the statistics
                return
            written = self._writer.execute("SELECT coalesce(max(id), 0) FROM samples").fetchone()[0]
        if self._analyzed_at is not None and written < 2 * max(self._analyzed_at, 1):
            return
        try:
            # A write like the others: under both write locks. Our flock is waited for as long (its holders
            # commit and let go); SQLite's, held by a process without the flock (the sqlite3 shell's transaction
            # left open), only briefly: waiting longer held our flock meanwhile, so the writes of the other
            # processes failed naming our lock file instead of SQLite's lock, whose holder is the one to find.
            with _Transaction(self, foreign_wait_s=FOREIGN_LOCK_PROBE_S) as conn:
                conn.execute("PRAGMA analysis_limit = 1000")
                conn.execute("ANALYZE")
        except Exception as exc:  # a lock held (our flock, or SQLite's by a process without it), the disk full:
            if not unavailable(exc):  # the writes say so; next time
                raise
            return
        self._analyzed_at = written
        self._pool.renew()

    def size_bytes(self) -> int:
        """Database plus WAL file size on disk."""
        total = 0
        for suffix in ("", "-wal"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                total += p.stat().st_size
        return total


class _Transaction:
    def __init__(self, store: Store, foreign_wait_s: float | None = None) -> None:
        self.store = store
        self.foreign_wait_s = foreign_wait_s
        """How long to wait for SQLite's own lock where a process without our flock holds it; None: what is
        left of the store's timeout, as every write."""

    def __enter__(self) -> sqlite3.Connection:
        store = self.store
        deadline = time.monotonic() + store.timeout_s  # for both locks together
        if not store._wlock.acquire(timeout=store.timeout_s):
            raise StoreUnavailable(f"the store's write lock was not free within {store.timeout_s:g} s")
        conn = store._writer
        if conn is None:
            store._wlock.release()
            if store.health.read_only:
                raise StoreUnavailable(f"store is read-only ({store.health.read_only})")
            raise RuntimeError("store is closed")
        try:
            if store._flock is not None and not flock_until(store._flock, deadline):
                raise StoreUnavailable(f"{lock_path(store.path).name} was not free within {store.timeout_s:g} s "
                                       "(another process writing to this database holds it: a sidecar's write or "
                                       "retention pass, or a writer stuck or stopped)")
        except BaseException:
            store._wlock.release()
            raise
        try:
            store._same_file()  # else it commits into a deleted file, or one no longer at the path
            # SQLite's own lock, within what is left: a process that writes without the flock (the sqlite3
            # shell with a transaction left open) held each write for the connection's 30 s.
            left = deadline - time.monotonic()
            wait_s = left if self.foreign_wait_s is None else min(left, self.foreign_wait_s)
            conn.execute(f"PRAGMA busy_timeout = {max(1, round(wait_s * 1000))}")
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._unlock()
            raise
        return conn

    def _unlock(self) -> None:
        if self.store._flock is not None:
            fcntl.flock(self.store._flock, fcntl.LOCK_UN)
        self.store._wlock.release()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.store._writer.execute("COMMIT" if exc_type is None else "ROLLBACK")
            if exc_type is None and past_valve(self.store.path):
                truncate_wal(self.store._writer)  # while this writer still holds the others off
        finally:
            self._unlock()
        if exc_type is None and self.store._checkpointer is not None:
            self.store._checkpointer.committed()
