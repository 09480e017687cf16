"""/readyz's answer: the store probed off the server's shared thread pool, within a bound, briefly cached.

    readiness = Readiness(store, timeout_s=1.0)
    status, body = await readiness.check()     # (200, {"status": "ready"}) or (503, {... "detail": why})

A readiness handler that queried the store on the shared thread pool queued behind reads: with the
database hung, /readyz took as long as the hang (and /healthz too, sharing the pool), so probes
failed and pods restarted during a database hiccup. Here one dedicated thread runs at most one
probe at a time, on the store's own probe connection; a caller waits at most `timeout_s` for it and
is told the database did not answer in time; answers are reused for `fresh_s`.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from .store import describe

FRESH_S = 0.5


class Readiness:
    def __init__(self, store, timeout_s: float = 1.0, fresh_s: float = FRESH_S) -> None:
        self.store = store
        self.timeout_s = timeout_s
        self.fresh_s = fresh_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="otel-grpo-readyz")
        self._probe: asyncio.Future | None = None
        self._last: tuple[float, str | None] | None = None  # (when, the probe's error or None)

    async def check(self) -> tuple[int, dict]:
        """(status code, body) for /readyz; the body's `detail` says why when not ready."""
        error = await self._ping_result()
        if error is not None:
            return 503, {"status": "unavailable", "detail": error}
        problem = self.store.health.problem()  # reads work, but every ingest would get 503
        if problem is not None:
            return 503, {"status": "not_writable", "detail": problem, "reads": "ok"}
        return 200, {"status": "ready"}

    async def _ping_result(self) -> str | None:
        if self._last is not None and time.monotonic() - self._last[0] < self.fresh_s:
            return self._last[1]
        if self._probe is None:  # one probe at a time: a hung database holds one thread, not one per call
            self._probe = asyncio.wrap_future(self._thread.submit(self._ping))
            self._probe.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.shield(self._probe), self.timeout_s)
        except TimeoutError:
            return f"the database did not answer within {self.timeout_s:g} s"

    def _ping(self) -> str | None:
        try:
            return None if self.store.ping() else "the database answered SELECT 1 wrongly"
        except Exception as exc:  # any store failure means "not ready", never a 500
            return describe(exc)

    def _done(self, probe: asyncio.Future) -> None:
        self._probe = None
        if not probe.cancelled():
            self._last = (time.monotonic(), probe.result())

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
