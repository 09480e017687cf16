"""Whether the database lets the sidecar log in, as each new connection finds out; said in the log once.

    login = Login("postgresql://otel:***@db:5432/otel")
    login.refused(exc)     # a connection attempt was refused (a rotated password): logged the first time, once
                           # one had got in (a refusal at start-up fails the start-up, which says so)
    login.accepted()       # one got in: logged if some were refused before
    login.problem          # None, or what the 503s and /readyz say (AUTH_FAILED)
    logging.getLogger("psycopg.pool").addFilter(login)   # its warnings per attempt, dropped meanwhile

A password rotated under a running sidecar surfaces when it next connects (a restart of the database,
terminated sessions, the read pool growing). It used to read "OperationalError" in every 503 and in
/readyz, "no database connection free ... (all 8 busy ...)" in reads, and a warning per connection
attempt and per request in the log. The store keeps running and retrying; one error line names the
cause, one line says when it is over.
"""

from __future__ import annotations

import logging
import threading

from ._errors import AUTH_FAILED, auth_failed

log = logging.getLogger("otel_grpo.sidecar")


class Login(logging.Filter):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        """How the store is named in the log (its URL without the password)."""
        self.problem: str | None = None
        self._refusals = 0
        self._got_in = False
        self._said = False  # the refusal was logged: its end is too
        self._lock = threading.Lock()

    def refused(self, exc: BaseException) -> None:
        """A connection attempt failed with `exc`; only a refused log-in counts."""
        if not auth_failed(exc):
            return
        with self._lock:
            first, self.problem = self.problem is None, AUTH_FAILED
            self._refusals += 1
        if first and self._got_in:
            self._said = True
            log.error("store %s refused the sidecar's log-in (%s): requests answer 503 and /readyz says "
                      "\"authentication failed\" until a connection gets in; the sidecar keeps trying", self.name,
                      str(exc).strip())

    def accepted(self) -> None:
        self._got_in = True
        if self.problem is None:
            return
        with self._lock:
            count, self.problem, self._refusals = self._refusals, None, 0
            said, self._said = self._said, False
        if said:
            log.warning("store %s lets the sidecar log in again, after %d refused connection attempt(s)", self.name,
                        count)

    def filter(self, record: logging.LogRecord) -> bool:
        """As a filter of psycopg_pool's logger: while the log-in is refused, its warnings (an error connecting,
        a reconnection given up, every few seconds while reads wait) are all about that, said once here."""
        return self.problem is None or record.levelno > logging.WARNING
