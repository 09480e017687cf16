"""The latest answer of a call that may hang (one on the database), asked on a thread of its own.

    size = Latest(store.size_bytes, fresh_s=30.0, name="store-size")
    size.value                   # the last answer (None before the first); asks anew once stale
    await size.fresh(1.0)        # an answer at most fresh_s old, waiting at most 1 s (else TimeoutError)
    size.close()

The store size for a scrape and the readiness probe both used to run on the server's shared thread
pool: with the database hung, each request held one more thread for as long as the hang, and
/healthz queued behind them. Here one dedicated thread runs the call, at most one at a time, and
its answer is reused for `fresh_s`; a call that raised leaves the last answer as it was.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger("otel_grpo.sidecar")
T = TypeVar("T")


class Latest(Generic[T]):
    def __init__(self, call: Callable[[], T], fresh_s: float, name: str) -> None:
        self.fresh_s = fresh_s
        self.name = name
        self._call = call
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"otel-grpo-{name}")
        self._pending: Future | None = None
        self._lock = threading.Lock()  # `renew` is called from the event loop and from scrape threads
        self._last: tuple[float, T | None] = (-math.inf, None)  # (when answered, the answer): set as one

    @property
    def value(self) -> T | None:
        """The last answer, never waiting; a stale one starts a new call for the next reader."""
        when, answer = self._last
        if time.monotonic() - when >= self.fresh_s:
            self.renew()
        return answer

    async def fresh(self, timeout_s: float) -> T | None:
        """An answer at most `fresh_s` old: the last one, or the call in flight's, waited for at most
        `timeout_s` (TimeoutError; the call goes on, and its answer serves the next caller)."""
        when, answer = self._last
        if time.monotonic() - when < self.fresh_s:
            return answer
        # shield: a caller that gives up must not cancel the call the others share
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self.renew())), timeout_s)

    def renew(self) -> Future:
        """The call in flight, started if none is."""
        with self._lock:
            if self._pending is None or self._pending.done():
                self._pending = self._thread.submit(self._run)
            return self._pending

    def _run(self) -> T:
        try:
            answer = self._call()
        except Exception:
            log.debug("%s: no answer this time", self.name, exc_info=True)
            raise
        self._last = (time.monotonic(), answer)
        return answer

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
