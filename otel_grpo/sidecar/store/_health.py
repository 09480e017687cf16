"""Whether the store can take writes, as /readyz reports it and the log tells it.

    health = WriteHealth(Path("sidecar.db"))
    health.failed(exc)     # an ingest could not commit (disk full, I/O error, read-only)
    health.ok()            # the next commit worked
    health.checked(why)    # the readiness probe's own finding: the database refuses writes (why), or not (None)
    health.write_held()    # whether the probe should try a write of its own (a failure only a write can end) ...
    health.probe_wrote(why)  # ... and how that went: refused (why), or written (None)
    health.watch()         # remember which file the path names (SQLite) ...
    health.file_problem()  # ... and say so when it names another or none
    health.problem()       # None when writable, else a one-line reason

A full disk used to be invisible: /readyz said 200 while every ingest got 503, and nothing was
logged. The first failure of a streak is logged, then every `LOG_EVERY`-th, then the recovery.
A streak of read-only refusals, or of refused log-ins (a rotated password), ends when the probe finds the
database writable (it got in to ask), with no ingest: a pod that /readyz takes out of its Service gets no
ingest that could end it.

Other failures (a lock held by someone else past the timeouts, a statement timeout, the server's disk full) are
states the probe cannot ask about, only try: a store that `probe_writes` (PostgreSQL) has the probe write in a
transaction of its own while one is held (`write_held`), and `problem()` reports the failure until that write,
or an ingest's commit, works. A failure reported until the next commit kept every replica out of its Service for
good after the database recovered (no ingest reaches a pod that is not ready); one reported for a fixed while
after the latest let /readyz flip to 200 every 10 s with no ingest arriving, while the database still refused
writes. A failure no such write can see (a failed connection attempt, every slot taken while the probe's own
connection is open), and every failure of a store that does not probe writes (SQLite, whose full disk the free
space says), is reported for `HOLD_S` after the latest: while ingest keeps failing, /readyz stays 503; once none
has failed for that long, /readyz says ready and the next ingest tells.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

from ._errors import auth_failed, cannot_connect, read_only

log = logging.getLogger("otel_grpo.sidecar")
LOG_EVERY = 100
LOW_DISK_BYTES = 1024 * 1024  # below this much free space a commit is about to fail
HOLD_S = 10.0
"""How long /readyz reports a failed write that no probe write can see pass (see the module's docstring): long
enough that a steady fault keeps it at 503 between the exporters' retries (1 s Retry-After, then backing off),
short enough that a pod taken out of its Service for it is back within seconds to try again."""


class WriteHealth:
    def __init__(self, path: Path | None, name: str | None = None, probe_writes: bool = False) -> None:
        self.path = path
        """The database file (None for a server database: no local disk to watch)."""
        self.probe_writes = probe_writes
        """The readiness probe tries a write of its own while a failure is held (`write_held`)."""
        self.name = name or str(path)
        """How the store is named in the log (a PostgreSQL URL without its password)."""
        self.read_only: str | None = None
        """Why the store was opened read-only (None: it was opened for writing)."""
        self.failure: str | None = None
        self.refused: str | None = None
        """Why the readiness probe found the database refusing writes (read-only, a hot standby); None: it takes them."""
        self.rejected = 0
        self._failed_at = 0.0  # time.monotonic() of the latest failure
        self._probe_ends: str | None = None  # the streak's last failure is one the probe sees end (see checked)
        self._write_ends = False  # the streak's last failure is one a probe write sees end (see write_held)
        self._identity: tuple[int, int] | None = None  # the database file's (st_dev, st_ino) when opened
        self._lock = threading.Lock()

    def watch(self) -> None:
        """Remember which file `path` names now (its device and inode), for `file_problem`."""
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def file_problem(self) -> str | None:
        """Why the database file is no longer the one opened (deleted, or another file at its path), else None.

        A deleted file stays open, so its connections went on committing into it: ingest answered 200 for
        rows that nothing could read after a restart, and a new connection made a new, empty file."""
        if self._identity is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            found = None
        except OSError:  # cannot tell (a permission changed): the statements will say
            return None
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return None
            found = st.st_ino
        return (f"the database file {self.path} was deleted or replaced ({'none' if found is None else 'another'} "
                "is at its path) while the sidecar had it open; restore it or restart the sidecar")

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.rejected += 1
            first, self.failure = self.failure is None, str(exc)
            self._failed_at = time.monotonic()
            self._probe_ends = "read-only" if read_only(exc) else "refusing the log-in" if auth_failed(exc) else None
            self._write_ends = self.probe_writes and not self._probe_ends and not cannot_connect(exc)
            count = self.rejected
        if (first or count % LOG_EVERY == 0) and not auth_failed(exc):  # a refused log-in: said once (_login)
            log.error("store %s cannot take writes (%s): ingest answers 503, reads still work; %d request(s) "
                      "rejected so far (free on its disk: %s)", self.name, exc, count, self.free_text())
        else:
            log.debug("ingest rejected, store not writable: %s", exc)

    def checked(self, refused: str | None) -> None:
        """The readiness probe asked the database whether it takes writes: `refused` says why not, None that it
        does. Once it does, a streak of read-only refusals or refused log-ins is over (others end with a commit)."""
        was, self.refused = self.refused, refused
        if refused is not None and was is None:
            log.error("store %s refuses writes (%s): ingest answers 503, reads still work", self.name, refused)
        elif refused is None and (was is not None or self._probe_ends):
            with self._lock:
                if self.failure is not None and not self._probe_ends:
                    return  # a failure the probe cannot see pass (a full disk): the next commit ends it
                count, self.failure, self.rejected = self.rejected, None, 0
                self._probe_ends, why = None, self._probe_ends or "read-only"
            log.warning("store %s takes writes again (it was %s), after %d rejected ingest request(s)",
                        self.name, why, count)

    def write_held(self) -> bool:
        """Whether a failed write is held that only a write can show passed (a lock, a full disk): the probe
        then tries one of its own and says how it went (`probe_wrote`)."""
        return self._write_ends and self.failure is not None

    def probe_wrote(self, refused: str | None, told: bool = True) -> None:
        """The readiness probe's own write (rolled back) was refused (`refused` says why), or worked (None): the
        held failure is over, with no ingest needed to end it. `told`: False where the refusal says nothing of
        the database's state (a privilege the probe lacks): failures are then held for `HOLD_S` only."""
        with self._lock:
            if not self._write_ends or self.failure is None:
                return  # a commit ended the streak meanwhile, or another failure followed
            if not told:
                self._write_ends = self.probe_writes = False
                log.warning("store %s: the readiness probe cannot try a write (%s); until a restart, a failed write "
                            "is reported for %g s after the latest", self.name, refused, HOLD_S)
                return
            if refused is not None:
                self.failure = refused  # what stands in the way now (the same lock, the same full disk)
                return
            count, self.failure, self.rejected, self._write_ends = self.rejected, None, 0, False
        log.warning("store %s takes writes again (the readiness probe's write worked), after %d rejected ingest "
                    "request(s)", self.name, count)

    def ok(self) -> None:
        """Writes work (one committed, or a read-only store opened for writing): a failing streak is over."""
        if self.failure is None and self.read_only is None:
            return
        with self._lock:
            was = "read-only" if self.read_only else "failing"
            count, self.failure, self.read_only, self.rejected = self.rejected, None, None, 0
            self._probe_ends, self._write_ends = None, False
        log.warning("store %s takes writes again (it was %s), after %d rejected ingest request(s)", self.name, was,
                    count)

    def free_bytes(self) -> int | None:
        if self.path is None:
            return None
        try:
            return shutil.disk_usage(self.path.resolve().parent).free
        except OSError:
            return None

    def free_text(self) -> str:
        free = self.free_bytes()
        return "unknown" if free is None else f"{free} bytes"

    def problem(self) -> str | None:
        """A one-line reason why writes fail or are about to; None when the store is writable."""
        moved = self.file_problem()
        if moved:
            return moved
        if self.read_only:
            return f"read-only: {self.read_only}"
        if self.refused:
            return f"read-only: {self.refused}"
        free = self.free_bytes()
        if free is not None and free < LOW_DISK_BYTES:
            return f"disk full: {free} bytes free on the database's filesystem"
        if self.failure and (self._probe_ends or self._write_ends or time.monotonic() - self._failed_at < HOLD_S):
            return f"last write failed: {self.failure}"  # the probe ends these streaks (`checked`, `probe_wrote`)
        return None
