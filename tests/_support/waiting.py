"""Poll until something a real process does has happened (a bound on waiting, not a timing assertion)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.1) -> Any:
    """The first truthy value of `predicate()`; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Whether process `pid` still exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
