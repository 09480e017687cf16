"""A failure that repeats per request or per retry, said at most once per interval with its count.

    said = EveryInterval(60.0)
    count = said.hit()      # the failures to report now (this one included), or None: stay quiet
    if count is not None:
        log.error("... %d since the last report", count)

A fault of the process's surroundings (no file descriptors left, a database table locked by someone
else) fails every request alike: a line per request would bury the log (319 MB in 45 s of refused
accepts; a warning per read while a table was locked), one line per interval says it and how often.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class EveryInterval:
    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._count = 0
        self._lock = threading.Lock()  # reads fail on the thread pool's threads at once

    def hit(self) -> int | None:
        """One more failure: how many to report now (the first, then one line per interval), else None."""
        with self._lock:
            self._count += 1
            now = self._clock()
            if self._last is not None and now - self._last < self.interval_s:
                return None
            count, self._last, self._count = self._count, now, 0
            return count
