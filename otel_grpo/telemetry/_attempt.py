"""A process's attempt at its run's steps (`grpo.attempt`, catalog `spans`): when the launcher started it.

    attempt = next_attempt(ranks=8)  # the first in a process of a job of ranks: the process's start; else now

The sidecar tells one job's ranks from a relaunch's by their attempts alone (`spans.writers_from`: halfway
between two jobs' claims), so the ranks of one job must carry attempts close together. A launcher
(torchrun, srun, mpirun) starts a job's ranks at one instant, but each rank builds its `Telemetry` when its
own set-up is done, which may be seconds apart (rank 0 alone preparing data, loading a checkpoint): an
attempt taken at construction put the crashed job's rank 1 on the relaunch's side of the boundary, or the
relaunch's rank 1 on the crashed job's, where the relaunch followed soon. The process's start time does not
depend on its set-up. A single process has no ranks to keep together, and its start may be long before its run
(a notebook's kernel resuming a run after a job launched later crashed, whose steps it must replace): its first
attempt is the time it is asked for, as is a later attempt in any process (a second `Telemetry`,
`new_attempt()` after a failed `train()`), after any earlier one.
"""

from __future__ import annotations

import os
import threading

from . import _clock as clock

_lock = threading.Lock()
_last: int | None = None


def next_attempt(ranks: int = 1) -> int:
    """A newer attempt than any this process gave before (ns since the epoch): the process's start the first time
    in a job of several `ranks`, else now."""
    global _last
    with _lock:
        if _last is None:
            _last = process_start_ns() if ranks > 1 else clock.now_ns()
        else:
            _last = max(clock.now_ns(), _last + 1)
        return _last


def process_start_ns() -> int:
    """When this process started, in ns since the epoch on its own clock: its age, from `/proc/self/stat`
    (clock ticks since boot) against `/proc/uptime` (since boot, from the kernel too), taken from now. So a
    wall clock that NTP stepped since boot does not shift it, nor does a clock faker preloaded into the process
    (libfaketime reports its fake wall time for CLOCK_BOOTTIME too, which put an age read from it at decades).
    Without procfs (macOS): now."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/uptime", "rb") as f:
            up_s = float(f.read().split()[0])
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, `starttime`
    except (OSError, IndexError, ValueError):
        return clock.now_ns()
    return clock.now_ns() - max(0, int((up_s - started_s) * 1e9))
