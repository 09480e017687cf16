"""/readyz's answer: the store probed off the server's shared thread pool, within a bound, briefly cached.

    readiness = Readiness(store, timeout_s=1.0)
    status, body = await readiness.check()     # (200, {"status": "ready"}) or (503, {... "detail": why})

A readiness handler that queried the store on the shared thread pool queued behind reads: with the
database hung, /readyz took as long as the hang (and /healthz too, sharing the pool), so probes
failed and pods restarted during a database hiccup. Here the probe runs through `Latest` (one
thread of its own, at most one probe at a time) on the store's own probe connection; a caller
waits at most `timeout_s` for it and is told the database did not answer in time; answers are
reused for `fresh_s`.
"""

from __future__ import annotations

from ._latest import Latest
from .store import describe

FRESH_S = 0.5


class Readiness:
    def __init__(self, store, timeout_s: float = 1.0, fresh_s: float = FRESH_S) -> None:
        self.store = store
        self.timeout_s = timeout_s
        self._ping = Latest(self._ping_once, fresh_s, name="readyz")

    async def check(self) -> tuple[int, dict]:
        """(status code, body) for /readyz; the body's `detail` says why when not ready."""
        try:
            error = await self._ping.fresh(self.timeout_s)
        except TimeoutError:
            error = f"the database did not answer within {self.timeout_s:g} s"
        if error is not None:
            return 503, {"status": "unavailable", "detail": error}
        problem = self.store.health.problem()  # reads work, but every ingest would get 503
        if problem is not None:
            return 503, {"status": "not_writable", "detail": problem, "reads": "ok"}
        return 200, {"status": "ready"}

    def _ping_once(self) -> str | None:
        """None when the store answered, else why not (never raises: an error is an answer to reuse)."""
        try:
            return None if self.store.ping() else "the database answered SELECT 1 wrongly"
        except Exception as exc:  # any store failure means "not ready", never a 500
            return describe(exc)

    def close(self) -> None:
        self._ping.close()
