"""Close connections that never sent a request: uvicorn times out only those that did.

    app.state.connections = lambda: server.server_state.connections   # set by `otel-grpo sidecar`
    task = asyncio.create_task(close_idle(app.state.connections, idle_s=15))

uvicorn arms its keep-alive timer after a response, so a connection that is opened and then
sends nothing, or a request line and half its headers, is held for good: 1,200 of them took a
1,024-descriptor server down. A sweep every `idle_s / 2` closes any connection seen without a
request (uvicorn's protocol has no `cycle` yet) for `idle_s` or longer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("otel_grpo.sidecar")


async def close_idle(connections: Callable[[], Iterable], idle_s: float) -> None:
    first_seen: dict[int, float] = {}
    while True:
        await asyncio.sleep(idle_s / 2)
        now, waiting, closed = time.monotonic(), {}, 0
        for proto in list(connections()):
            if getattr(proto, "cycle", True) is not None:  # a request came: uvicorn's timers apply
                continue
            since = first_seen.get(id(proto), now)
            if now - since >= idle_s:
                proto.transport.close()
                closed += 1
            else:
                waiting[id(proto)] = since
        first_seen = waiting
        if closed:
            log.info("closed %d connection(s) that sent no request within %g s", closed, idle_s)
