"""A stop requested by a signal: however the signal lands in a wait, the waiter sees it and nothing hangs.

`otel-grpo up`, `otel-grpo follow` and the trainer wait on a `StopRequest` that SIGINT / SIGTERM set. Python
runs the handler on the main thread between two bytecodes, wherever that thread is. The probe below sends a
real SIGTERM (`signal.raise_signal`) at each line that a wait runs, one wait per line, in a process of its
own with a deadline. Run with `threading.Event` in place of `StopRequest` (what these commands waited on
before), the same probe hangs for good at the line of `Event.wait` that holds the Event's lock
(threading.py, CPython 3.11: measured while writing this test).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from otel_grpo._stop_request import StopRequest

PROBE = r'''
import signal, sys
from otel_grpo._stop_request import StopRequest

WATCHED = ("_stop_request.py", "threading.py")  # ours, and any lock it were to take

def traced_wait(at):
    """(whether the wait saw the stop, the lines it ran); with `at`, SIGTERM the first time it reaches that line."""
    stop, seen, fired = StopRequest(), [], []

    def local(frame, event, arg):
        if event == "line":
            where = (frame.f_code.co_filename, frame.f_lineno)
            seen.append(where)
            if where == at and not fired:
                fired.append(1)
                signal.raise_signal(signal.SIGTERM)
        return local

    with stop.installed():
        sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.endswith(WATCHED) else None)
        try:
            ok = stop.wait(0.2)
        finally:
            sys.settrace(None)
    return ok, seen

ok, lines = traced_wait(None)
assert not ok and lines
for at in dict.fromkeys(lines):
    ok, _ = traced_wait(at)
    assert ok, f"the stop was lost with SIGTERM at line {at[1]}"
print(len(set(lines)))
'''


def test_a_sigterm_at_any_line_of_a_wait_ends_it():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) >= 5  # every line of the wait's loop was probed


def test_the_signal_that_asked_is_kept_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    with stop.installed():
        assert not stop.is_set() and not stop.wait(0.01)
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # a second request keeps the first one's signal
        assert stop.wait(0) and stop.signum == signal.SIGTERM
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_request_from_another_thread_wakes_a_waiter_at_once():
    stop = StopRequest()
    threading.Timer(0.1, stop.request).start()
    began = time.monotonic()
    assert stop.wait(10.0)
    assert time.monotonic() - began < 5.0  # within a slice of the request, far from the timeout
    assert stop.signum == 0


@pytest.mark.parametrize("timeout", [0, 0.05])
def test_a_wait_that_nobody_stops_returns_false_after_its_timeout(timeout):
    assert StopRequest().wait(timeout) is False
