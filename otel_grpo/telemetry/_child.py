"""The telemetry process of `emit_in="process"`: an ordinary `Telemetry` fed over a pipe.

    python -m otel_grpo.telemetry._child FD

`ProcessEmitter` starts it with one end of a socket pair as `FD`. Messages in are
pickled tuples: the start-up settings first, then `("step", seq, StepRecord)`,
`("scalars", None, values)`, `("flush", token, timeout_s)` and `("shutdown", None,
finished)`. Messages out: `("ready", prometheus_port)`; `("done", seq)` once every step up
to `seq` is emitted, spill lines written (one per batch of steps that arrived together);
`("flushed", token, ok)` and `("closed", None)`. The training process going away (end of the
pipe, or a send that finds it closed) shuts the telemetry down as a crash would, without a
traceback of ours (a crashed torchrun rank's own is the last one): `grpo.run.finished` stays 0. Ctrl-C is the training process's business:
this process ignores SIGINT and is closed by it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._telemetry import Telemetry


def main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        start = conn.recv()
    except EOFError:
        return
    # The training process's rank: detect_rank reads these (torch is never imported here).
    os.environ.update({"RANK": str(start["rank"]), "WORLD_SIZE": str(start["world_size"]),
                       "LOCAL_RANK": str(start["local_rank"])})
    from ._settings import TelemetrySettings
    from ._telemetry import Telemetry

    settings = start["settings"]
    # A second less than the training process waits for it: this side finishes, that side never kills
    # a child that is about to (and emits everything again).
    timeout = settings["shutdown_timeout_s"]
    settings = {**settings, "emit_in": "thread", "shutdown_timeout_s": max(timeout - 1.0, timeout / 2)}
    tel = Telemetry(TelemetrySettings(**settings))
    try:
        _serve(conn, tel)
    except _Gone:  # the training process died (a crashed torchrun rank): its traceback is the one that matters
        tel.shutdown(finished=False)


class _Gone(Exception):
    """The training process's end of the pipe is closed."""


def _serve(conn: Connection, tel: Telemetry) -> None:
    emitter = tel._emitter  # this process is Telemetry's back end: it feeds the emitter directly

    def send(message: object) -> None:
        try:
            conn.send(message)
        except OSError as exc:  # BrokenPipeError, ConnectionResetError
            raise _Gone from exc

    send(("ready", tel.prometheus_port))
    unacked: int | None = None  # the last step submitted, not yet acknowledged

    def ack() -> None:
        nonlocal unacked
        if unacked is not None:
            send(("done", unacked))
            unacked = None

    while True:
        if unacked is not None and not conn.poll():  # one acknowledgement per batch the sender sent
            emitter.drain(None)  # acknowledged once emitted: until then the training process keeps a copy
            ack()
        try:
            kind, key, payload = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as exc:  # the training process is gone
            raise _Gone from exc
        if kind == "step":
            emitter.submit(payload)
            unacked = key
        elif kind == "scalars":
            emitter.submit_scalars(payload)
        elif kind == "flush":
            ok = tel.flush(payload)  # drains the emitter first
            ack()
            send(("flushed", key, ok))
        elif kind == "shutdown":
            tel.shutdown(finished=payload)  # emits everything queued first
            ack()
            try:
                send(("closed", None))
            except _Gone:
                pass  # closed already: nothing to shut down twice
            return


if __name__ == "__main__":
    main(int(sys.argv[1]))
    # Everything is emitted, spilled and closed within the shutdown bound by now. A normal exit would
    # run the SDK's own exit hooks, which retry a dead endpoint for its whole export timeout.
    sys.stderr.flush()
    os._exit(0)
