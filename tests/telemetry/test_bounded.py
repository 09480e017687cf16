"""`bounded`: a blocking call never holds its caller past the bound, and what it raised is told apart."""

import threading
import time

from otel_grpo.telemetry._bounded import bounded


def test_a_call_that_blocks_is_left_behind_at_the_bound():
    release = threading.Event()
    began = time.monotonic()
    ran = bounded(release.wait, "otel-grpo-test", 0.2)
    assert time.monotonic() - began < 2
    assert not ran.finished and ran.value is None and ran.error is None
    release.set()


def test_a_call_that_returns_or_raises_in_time_says_which():
    assert bounded(lambda: 7, "otel-grpo-test", 5).value == 7
    ran = bounded(lambda: 1 / 0, "otel-grpo-test", 5)
    assert ran.finished and ran.value is None and isinstance(ran.error, ZeroDivisionError)
