"""Whether the database lets the sidecar connect, as each new connection finds out; said in the log once.

    login = Login("postgresql://otel:***@db:5432/otel", hold_s=30)
    login.refused(exc)     # a connection attempt failed (a rotated password, every slot taken, the server down):
                           # logged the first time, once one had got in (a failure at start-up fails the
                           # start-up, which says so)
    login.accepted()       # one got in: logged if some failed before
    login.problem          # None, or what the 503s and /readyz say (AUTH_FAILED, "cannot connect ...")
    login.auth             # the problem is a refused log-in
    logging.getLogger("psycopg.pool").addFilter(login)   # its warnings per attempt, dropped meanwhile (a
                                                         # timeout's too, for `hold_s` after the last one:
                                                         # the requests' failures say it)

A password rotated under a running sidecar, or every connection slot taken by other clients (max_connections),
surfaces when it next connects (a restart of the database, terminated sessions, the read pool growing). A
rotation used to read "OperationalError" in every 503 and in /readyz, "no database connection free ... (all 8
busy ...)" in reads, and a warning per connection attempt and per request in the log; the slots taken, 42
warnings of psycopg_pool's in 20 s. The store keeps running and retrying; one error line names the cause, one
line says when it is over.
"""

from __future__ import annotations

import logging
import threading
import time

from ._errors import auth_failed, connect_failure, describe

log = logging.getLogger("otel_grpo.sidecar")


class Login(logging.Filter):
    def __init__(self, name: str, hold_s: float) -> None:
        super().__init__()
        self.name = name
        """How the store is named in the log (its URL without the password)."""
        self.hold_s = hold_s
        """How long after a timed-out attempt psycopg_pool's warnings are held back: the pool's longest wait
        between two attempts (its reconnect_timeout). Not until a connection gets in: a pool that no longer
        needs one would hold back every later warning, about anything, for as long as the sidecar runs."""
        self.problem: str | None = None
        self.auth = False
        self._refusals = 0
        self._got_in = False
        self._said = False  # the refusal was logged: its end is too
        self._unanswered_until = 0.0  # monotonic: an attempt timed out (the server did not answer) before this
        self._lock = threading.Lock()

    def refused(self, exc: BaseException) -> None:
        """A connection attempt failed with `exc`."""
        auth = auth_failed(exc)
        if not auth and connect_failure(exc) is None:
            # not an attempt the server answered or refused (a timeout: the requests' failures say so, once a
            # streak); psycopg_pool's warnings of each attempt are held back until one gets in, or `hold_s` passes
            # without another attempt timing out
            self._unanswered_until = time.monotonic() + self.hold_s
            return
        problem = describe(exc)
        with self._lock:
            first, self.problem, self.auth = self.problem is None, problem, auth
            self._refusals += 1
            say = first and self._got_in
            self._said = self._said or say
        if not say:
            return
        if auth:
            log.error("store %s refused the sidecar's log-in (%s): requests answer 503 and /readyz says "
                      "\"authentication failed\" until a connection gets in; the sidecar keeps trying", self.name,
                      str(exc).strip())
        else:
            log.error("store %s: the sidecar cannot connect (%s): requests that need a new connection answer 503 "
                      "and /readyz says why until one gets in; the sidecar keeps trying", self.name,
                      connect_failure(exc))

    def accepted(self) -> None:
        self._got_in, self._unanswered_until = True, 0.0
        if self.problem is None:
            return
        with self._lock:
            count, self.problem, self._refusals, auth = self._refusals, None, 0, self.auth
            said, self._said, self.auth = self._said, False, False
        if said:
            log.warning("store %s %s again, after %d failed connection attempt(s)", self.name,
                        "lets the sidecar log in" if auth else "takes the sidecar's connections", count)

    def filter(self, record: logging.LogRecord) -> bool:
        """As a filter of psycopg_pool's logger: while connections fail or time out, its warnings (an error
        connecting, a reconnection given up, every few seconds while reads wait) are all about that, said once
        here or by the requests' failures (a database that does not answer: 33 lines in a minute of 7 reads)."""
        return (self.problem is None and time.monotonic() >= self._unanswered_until) or record.levelno > logging.WARNING
