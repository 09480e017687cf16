"""`bounded`: a call that can block for long (an export to a dead endpoint, a store whose host died) run on a
daemon thread and waited for at most a bound, so that it never holds a run's exit or a signal handler.

    ran = bounded(lambda: store.get(key), "otel-grpo-rank-ends", 2.0)
    if ran.finished and ran.error is None: use(ran.value)   # a call that raised is logged at debug

A call still running at the bound is left behind on its daemon thread: the process exits without it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

logger = logging.getLogger("otel_grpo.telemetry")

T = TypeVar("T")


@dataclass
class Ran(Generic[T]):
    finished: bool = False
    """The call returned or raised within the bound."""
    value: T | None = None
    """What it returned; None where it raised or did not finish."""
    error: Exception | None = None
    """What it raised, if it did."""


def bounded(call: Callable[[], T], name: str, timeout_s: float) -> Ran[T]:
    """Run `call` on a daemon thread named `name`, waited for `timeout_s` at most."""
    ran: Ran[T] = Ran()

    def run() -> None:
        try:
            ran.value = call()
        except Exception as error:  # the caller decides what it means; the traceback stays in the debug log
            ran.error = error
            logger.debug("otel-grpo: %s failed", name, exc_info=True)

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    worker.join(timeout_s)
    ran.finished = not worker.is_alive()
    return ran
