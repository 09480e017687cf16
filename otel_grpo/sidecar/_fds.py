"""File-descriptor exhaustion as one log line per interval, not a traceback per refused accept.

    RefusalLog(interval_s=60).install(asyncio.get_running_loop())

When the process is out of file descriptors, asyncio's accept loop reports every failed
`accept()` to the loop's exception handler with a full traceback, then retries a second later:
1,200 idle connections on a 1,024-fd limit wrote 319 MB of them in 45 s. The connections it
cannot accept wait in the kernel's backlog or are refused there, which is the degradation
wanted; only the logging needs a bound. Idle connections are closed by uvicorn's keep-alive
timeout and new ones past `max_connections` get 503 (see `otel-grpo sidecar`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ._every import EveryInterval

log = logging.getLogger("otel_grpo.sidecar")
_OUT_OF_RESOURCES = "out of system resource"  # asyncio's message for EMFILE, ENFILE, ENOBUFS, ENOMEM


class RefusalLog:
    def __init__(self, interval_s: float = 60.0, clock=time.monotonic) -> None:
        self._said = EveryInterval(interval_s, clock)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        previous = loop.get_exception_handler()

        def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
            if _OUT_OF_RESOURCES in str(context.get("message", "")):
                self.refused(context.get("exception"))
            elif _retry_after_close(context):
                log.debug("accept retry after the listening socket closed: %s", context.get("exception"))
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handle)

    def refused(self, exc: BaseException | None) -> None:
        count = self._said.hit()
        if count is not None:
            log.error("cannot accept connections (%s): out of file descriptors or memory; %d accept(s) failed "
                      "since the last report; idle connections close after the keep-alive timeout", exc, count)


def _retry_after_close(context: dict) -> bool:
    # After a failed accept asyncio retries a second later; if the server closed its socket in
    # between (shutdown), the retry raises ValueError on fd -1. Nothing is wrong by then.
    return isinstance(context.get("exception"), ValueError) and "_start_serving" in repr(context.get("handle"))
