"""The telemetry's clock: the process's wall clock, which never steps.

    now_ns()    # ns since the epoch, on this process's clock

Every time the telemetry exports is read here: step starts and ends, phases, heartbeats, the liveness promise,
`grpo.process.clock`, the process's start and attempts. The wall clock is read once, at import, and advanced by
the monotonic clock from then on. The alerts estimate each process's offset from Prometheus's clock over
`clock_window` (the smallest lag of a scrape behind `grpo.process.clock`); a wall clock that NTP or an operator
steps mid-run would move every exported time at once while that estimate still held the old offset, and a
live run stepped back past `liveness_slack` would page as dead. The monotonic clock never steps, and NTP
corrects its rate as it does the wall clock's, so the offset measured once holds for the process's life.

The monotonic clock is the kernel's, the same in every process of the host: the telemetry process adopts its
training process's anchor (`adopt`), so both export times on one clock.
"""

from __future__ import annotations

import time

_anchor_ns = time.time_ns() - time.monotonic_ns()


def now_ns() -> int:
    """Now, in ns since the epoch, on this process's clock."""
    return _anchor_ns + time.monotonic_ns()


def now_s() -> float:
    """Now, in seconds since the epoch, on this process's clock."""
    return now_ns() / 1e9


def anchor_ns() -> int:
    """The wall clock minus the monotonic clock when this process's clock was set: what `adopt` takes."""
    return _anchor_ns


def adopt(anchor: int) -> None:
    """Read the clock of the process whose `anchor_ns()` this is (the telemetry process, its trainer's)."""
    global _anchor_ns
    _anchor_ns = int(anchor)


__all__ = ["adopt", "anchor_ns", "now_ns", "now_s"]
