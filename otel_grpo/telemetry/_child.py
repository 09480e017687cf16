"""The telemetry process of `emit_in="process"`: the same `Backend` as a `ThreadSink`'s, fed over a pipe.

    python -m otel_grpo.telemetry._child FD

`ProcessSink` starts it with one end of a socket pair as `FD`. Messages in are pickled:
the start-up dict (settings, rank, world_size, local_rank, the trainer's clock anchor) first, then tuples
`("step", seq, pickled StepRecord)`, `("flush", token, timeout_s)` and `("shutdown", None,
(timeout_s, finished, preempted))`. Messages out: `("ready", prometheus_port)`; `("done", seq)`
once every step up to `seq` is emitted, spill lines written (in batches: see `ACK_EVERY_S`);
`("flushed", token, ok)` and `("closed", None)`. The training process going away (end
of the pipe, or a send that finds it closed) closes the backend as a crash would, without a
traceback of ours (a crashed torchrun rank's own is the last one): `grpo.run.finished` stays 0.
It runs `emit_nice` (default 10) below the training process's CPU priority: background work, which
on a node whose cores are all busy must not take them from training. Ctrl-C and SIGTERM are the
training process's business: this process ignores both and is closed by
it. A scheduler signals every process of a job, and the training process then ends the run (as preempted)
through this one; if it dies outright, the end of the pipe still closes this one.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._backend import Backend

ACK_EVERY_S = 1.0
"""Steps are acknowledged together: once the oldest unacknowledged one was emitted this long ago, or
`ACK_EVERY_STEPS` of them wait, and before every answer to a flush or a shutdown. Each acknowledgement
wakes a thread of the training process, which then takes the GIL from training; the steps it
covers stay held there (pickled) meanwhile."""
ACK_EVERY_STEPS = 64  # below the trainer's backlog warning (`_sinks.BACKLOG_WARNING`)


def main(fd: int) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        start = conn.recv()
    except EOFError:
        return
    from . import _clock as clock
    from ._backend import Backend
    from ._settings import TelemetrySettings

    clock.adopt(start["clock"])  # the times it exports (its promise, its clock) on the trainer's clock
    settings = TelemetrySettings(**start["settings"])
    _lower_priority(settings.emit_nice)
    backend = Backend.build(settings, start["rank"], start["world_size"], start["local_rank"])
    try:
        _serve(conn, backend)
    except _Gone:  # the training process died (a crashed torchrun rank): its traceback is the one that matters
        backend.close(settings.shutdown_timeout_s / 2, finished=False, preempted=False)


def _lower_priority(increment: int) -> None:
    """Training first: this process's nice value `increment` above the training process's (where the platform
    has one; lowering needs no privilege)."""
    if increment > 0 and hasattr(os, "nice"):
        os.nice(increment)


class _Gone(Exception):
    """The training process's end of the pipe is closed."""


def _serve(conn: Connection, backend: Backend) -> None:
    def send(message: object) -> None:
        try:
            conn.send(message)
        except OSError as exc:  # BrokenPipeError, ConnectionResetError
            raise _Gone from exc

    send(("ready", backend.prometheus_port))
    unacked: int | None = None  # the last step emitted, not yet acknowledged
    held, due = 0, 0.0  # how many steps that covers, and when the oldest of them is to be acknowledged

    def ack() -> None:
        nonlocal unacked, held
        if unacked is not None:
            send(("done", unacked))
            unacked, held = None, 0

    while True:
        if unacked is not None:
            wait = due - time.monotonic()
            if held >= ACK_EVERY_STEPS or wait <= 0 or not conn.poll(wait):
                ack()
        try:
            kind, key, payload = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as exc:  # the training process is gone
            raise _Gone from exc
        if kind == "step":
            backend.emit(pickle.loads(payload))  # spans, metrics, spill lines: emitted when this returns
            if unacked is None:
                due = time.monotonic() + ACK_EVERY_S
            unacked, held = key, held + 1
        elif kind == "flush":
            ack()
            send(("flushed", key, backend.flush(payload)))
        elif kind == "shutdown":
            timeout_s, finished, preempted = payload
            ack()
            send(("ending", None))  # every step is emitted: what is left is the run's end and the exporters
            backend.close(timeout_s, finished=finished, preempted=preempted)
            try:
                send(("closed", None))
            except _Gone:
                pass  # closed already: nothing to close twice
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
    # Everything is emitted, spilled and closed within the shutdown bound by now. A normal exit would
    # run the SDK's own exit hooks, which retry a dead endpoint for its whole export timeout.
    sys.stderr.flush()
    os._exit(0)
