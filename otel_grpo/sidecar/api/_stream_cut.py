"""A streamed response whose store read fails after its status went out: cut off, and said once a minute.

    return StreamingResponse(cut_on_store_error(chunks), ...)

A large page or an export sends its status and first rows before it has read the rest; a store error in a
later chunk (a statement timeout, a database gone) can no longer be a 503. The connection is then closed
without the body's end, so no client takes the part it got for the whole (a CSV has no closing bracket to
miss). The failure is one warning a minute with its count, as failed reads are (`_app._store_error`), where the
server logged each cut response's traceback twice over at ERROR (some 100 lines a request in an outage):
`QuietStreamCuts` keeps uvicorn's "Exception in ASGI application" for it out of the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from .._every import EveryInterval
from ..store._errors import STORE_ERRORS, describe, unavailable

log = logging.getLogger("otel_grpo.sidecar")
_cuts = EveryInterval()  # per process, as the log it keeps quiet


class StreamCut(Exception):
    """The store failed under a streamed response: the server closes the connection mid-body."""


def cut_on_store_error(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """`chunks`, where the database's trouble (`unavailable`: unreachable, timed out) becomes a `StreamCut`, said
    once a minute with how many; any other store error is a bug, raised as it is (its traceback logged)."""
    try:
        yield from chunks
    except STORE_ERRORS as exc:
        if not unavailable(exc):
            raise
        count = _cuts.hit()
        if count is not None:
            log.warning("store failed under a streamed response (%s): it was cut off, unfinished; %d cut since the "
                        "last report", describe(exc), count)
        raise StreamCut(describe(exc)) from None


class QuietStreamCuts(logging.Filter):
    """For uvicorn's error log: its traceback of a `StreamCut` goes (the cut is said above)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamCut))


QUIET = QuietStreamCuts()
