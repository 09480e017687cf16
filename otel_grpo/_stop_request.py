"""A stop that SIGINT or SIGTERM requests: what `otel-grpo up`, `otel-grpo follow` and the trainer wait on.

    stop = StopRequest()
    with stop.installed():          # SIGINT and SIGTERM request the stop inside the block
        while not stop.wait(1.0):   # True once requested
            ...

Python runs a signal handler on the main thread between two bytecodes, wherever that thread is: inside
`threading.Event.wait` too, which holds the Event's lock for a few bytecodes on each pass. A handler that
calls `Event.set()` there takes that lock again and waits for its own thread, forever: a process waiting in
a loop hangs for good on a SIGTERM that lands in that window (reproduced by a burst of signals at such a
loop: it hangs within seconds). A handler that raises instead (KeyboardInterrupt) can leave a lock that the
interrupted code held taken (`subprocess.Popen`'s waitpid lock, which stopping a child then waits for). So
the handler here only sets a field, which takes no lock, and `wait` sleeps in short slices that read it;
code that unwinds on Ctrl-C calls `check()` where it can stop, which raises KeyboardInterrupt there.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

SLICE_S = 0.05
"""The longest a waiter takes to see a request: 20 short wake-ups a second while it waits, nothing otherwise."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Requested once (by a signal inside `installed`, or by `request`), never cleared; any thread may wait."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The signal that requested the stop (0: `request()` without one); None while none did."""

    def request(self, signum: int = 0) -> None:
        """Ask waiters to stop; the first request's signal is kept. Takes no lock: safe in a signal handler."""
        if self.signum is None:
            self.signum = signum

    def is_set(self) -> bool:
        return self.signum is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Until requested or `timeout` seconds passed (None: no limit); whether it was requested."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.signum is None:
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)  # a signal in it runs the handler, then the sleep ends its slice (PEP 475)
        return self.signum is not None

    def check(self) -> None:
        """Raise KeyboardInterrupt once requested: Ctrl-C's exception, where the caller holds no lock."""
        if self.signum is not None:
            raise KeyboardInterrupt

    def on_signal(self, signum: int, frame: Any) -> None:
        """The handler `installed` puts in place; a subclass may do more, taking no lock."""
        self.request(signum)

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """SIGINT and SIGTERM request the stop inside the block, then get back the handlers they had. Both
        explicitly: a shell that starts us in the background leaves SIGINT ignored. Off the main thread,
        where Python cannot install handlers, the block runs without them."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self.on_signal) for s in _SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
