"""`ProcessSink`: step records pickled to a child process that runs the same `Backend`, off the trainer's GIL.

    sink = ProcessSink(settings, rank=0, world_size=1, local_rank=0)
    sink.submit(record)        # training thread: one pickle, one non-blocking write
    sink.flush(5.0)            # the child emitted and flushed everything so far
    sink.close(10.0, finished=True, preempted=False)

Why a process: the backend and the SDK's exporter threads hold the GIL for part of every
step (metric points, span attributes, sample events, OTLP encoding; how much:
benchmarks/README.md, trl). A training loop releases the GIL around every torch op and,
while such a thread runs, may wait up to the interpreter's switch interval
(`sys.getswitchinterval()`) to get it back, so on a Python-bound loop that work is paid by
training.

The hand-over wakes no thread of this process: the training thread pickles the step record and
writes it to the socket itself, without blocking (`MSG_DONTWAIT`), when nothing is queued ahead of
it and the socket has room for it. Waking a sleeping sender thread instead cost the training thread
the wake-up and then the GIL while the sender ran (benchmarks/README.md, handover). The sender thread
is the fallback: it writes, blocking, what did not fit (a child that falls behind or is stopped) and
the flush and shutdown messages, and sleeps otherwise. The child acknowledges in batches
(`_child.ACK_EVERY_S`), so the thread here that reads the acknowledgements wakes once a batch, not
once a step.

No sample is lost to a child that dies, stops or falls behind: each record is kept here
(pickled) until the child says it has emitted it (spill lines written). When the child
exits, acknowledges nothing for `UNACKED_LIMIT_S` while records wait (stopped by SIGSTOP, hung),
or the records it has not acknowledged exceed `UNACKED_LIMIT_BYTES` (slower than training, or
stopped under a fast loop), this process takes over (one warning): the
child is killed, and a `ThreadSink` here, which builds its own exporters on its own thread,
emits the unacknowledged records again and every later one. The training thread never waits.
A step in the socket is the child's to read even once this process is gone, so a training
process killed outright (SIGKILL, the OOM killer) loses only what the fallback still held.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from multiprocessing import Pipe
from typing import Any, Mapping

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider

from . import _clock as clock
from ._backend import Backend
from ._quiet import ExportHealth
from ._record import Heartbeat, StepRecord
from ._settings import TelemetrySettings
from ._sinks import BACKLOG_WARNING, ThreadSink
from ._step import run_deferred

logger = logging.getLogger("otel_grpo.telemetry")

START_TIMEOUT_S = 60.0  # the child imports the OTel SDK and binds its exporters; a loaded node is slow
SEND_BUFFER_BYTES = 4 << 20
"""Asked of the kernel for the socket's send buffer (it grants up to `net.core.wmem_max`): room for many
logged steps, so that the training thread's own write fits and the sender stays asleep."""
UNACKED_LIMIT_BYTES = 64 << 20
"""Most bytes of pickled records held for a child that has not acknowledged them; beyond it this
process takes over. Far above what a healthy child holds (the steps of its last acknowledgement batch)."""
UNACKED_LIMIT_S = 30.0
"""A child that acknowledges nothing for this long while steps wait for it (stopped, hung) is taken over, however
few steps a slow loop sends. A healthy child acknowledges every `_child.ACK_EVERY_S` while it has steps. The time
is counted in the acknowledgement reader's own waits (`_SILENT_WAITS` of them, each begun with steps waiting), so
a whole job stopped and continued (a suspended batch job), whose pause every process sees at once, is no silence."""
_SILENT_WAITS = 3
_PLAIN = (str, int, float, bool, type(None))


class ProcessSink:
    """A child process running the `Backend`; a `ThreadSink` here once the child is gone or stuck."""

    def __init__(self, settings: TelemetrySettings, *, rank: int, world_size: int, local_rank: int) -> None:
        self._settings = settings
        self._where = (rank, world_size, local_rank)
        self._lock = threading.RLock()
        self._pending: dict[int, bytes] = {}  # sent, not yet acknowledged: emitted here if the child is lost
        self.unacked_bytes = 0
        self._limit = UNACKED_LIMIT_BYTES
        self._silence_s = UNACKED_LIMIT_S
        self._seq = itertools.count()
        self._tokens = itertools.count()
        self._flushes: dict[int, list[Any]] = {}  # token -> [Event, ok]
        self._local: ThreadSink | None = None
        self._ending = threading.Event()  # the child emitted every step it was sent and closes the run
        self._closed = threading.Event()  # the child acknowledged its shutdown
        self._gone = threading.Event()  # the child's end of the pipe closed
        # The sender's: framed messages the training thread could not write at once, in order; None to stop.
        self._out: collections.deque[bytes | None] = collections.deque()
        self._send_now = threading.Event()
        # Held by whoever writes to the socket, for a whole message: the sender (blocking, while it drains
        # `_out`) or `submit` (only ever tried, never waited for).
        self._writing = threading.Lock()
        self._warned_pickle = False
        self._warned_defer = False
        self._warned_backlog = False
        self._port: int | None = None
        self._health = ExportHealth()  # the child's exporters report there; this one stays quiet
        self._proc: subprocess.Popen | None = None
        try:
            self._start()
        except Exception as exc:  # telemetry goes on in this process
            logger.warning("otel-grpo: the telemetry process did not start (%s); emitting in this process", exc)
            self._stop_child()
            self._local = ThreadSink(self._build_here)
            return
        threading.Thread(target=self._write, name="otel-grpo-emit-send", daemon=True).start()
        threading.Thread(target=self._read, name="otel-grpo-emit-ack", daemon=True).start()

    def _start(self) -> None:
        ours, theirs = Pipe()
        try:
            # A new session: Ctrl-C in the terminal reaches the trainer only, which then closes us.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "otel_grpo.telemetry._child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), start_new_session=True, env=_child_env(),
            )
        finally:
            theirs.close()
        self._conn = ours  # for reading: the acknowledgements
        rank, world_size, local_rank = self._where
        ours.send({"settings": self._settings.model_dump(), "rank": rank, "world_size": world_size,
                   "local_rank": local_rank, "clock": clock.anchor_ns()})
        if not ours.poll(START_TIMEOUT_S):
            raise TimeoutError(f"no answer within {START_TIMEOUT_S:.0f}s")
        kind, port = ours.recv()  # EOFError: the child failed (its traceback is on stderr)
        if kind != "ready":
            raise RuntimeError(f"unexpected first message {kind!r}")
        self._port = port
        # For writing: the same socket as a `socket.socket`, whose `send` takes `MSG_DONTWAIT` per call (a
        # non-blocking flag on the descriptor would make the reader's `recv` fail too).
        self._sock = socket.socket(fileno=os.dup(ours.fileno()))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)

    def _build_here(self) -> Backend:
        """The backend of this process, once the child has exited (its Prometheus port is then free). Where no
        exporters can be built here (a take-over at interpreter exit: the SDK's resource detection needs a thread
        pool that is shut down by then), one that exports nothing and still spills every step."""
        if self._proc is not None:
            self._proc.wait()
        try:
            return Backend.build(self._settings, *self._where)
        except Exception as exc:
            logger.warning("otel-grpo: this process cannot build exporters (%s: %s); the steps taken over are "
                           "spilled, not exported", type(exc).__name__, exc)
            return Backend.build(self._settings, *self._where, NoOpMeterProvider(), NoOpTracerProvider())

    # ---- what every sink has -----------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The child's process id (None once this process took over)."""
        return self._proc.pid if self._proc is not None and self._local is None else None

    @property
    def prometheus_port(self) -> int | None:
        local = self._local
        return local.prometheus_port if local is not None else self._port

    @property
    def export_health(self) -> ExportHealth:
        local = self._local
        return local.export_health if local is not None else self._health

    def submit(self, record: StepRecord | Heartbeat) -> None:
        with self._lock:  # seq order is write order: heartbeats may come from another thread
            if self._local is not None:
                self._local.submit(record)
                return
            data = self._pickle(record)
            seq = next(self._seq)
            self._pending[seq] = data
            self.unacked_bytes += len(data)
            over = self.unacked_bytes > self._limit
            queued = self._write_now(_frame(pickle.dumps(("step", seq, data), protocol=pickle.HIGHEST_PROTOCOL)))
        if queued:
            self._send_now.set()  # the fallback: the sender writes it, blocking
        if over:
            self._take_over("holds more than %d KiB of steps it has not acknowledged (stopped, or slower than "
                            "training); stopping it" % (self._limit >> 10))
        elif not self._warned_backlog and len(self._pending) > BACKLOG_WARNING:
            self._warned_backlog = True
            logger.warning("otel-grpo: %d steps wait to be emitted; the telemetry process falls behind",
                           BACKLOG_WARNING)

    def _write_now(self, frame: bytes) -> bool:
        """Write `frame` to the socket without blocking if nothing is queued ahead of it; True if (the rest of)
        it was queued for the sender instead: the sender is writing, has a backlog, or the socket is full."""
        if not self._writing.acquire(blocking=False):
            self._out.append(frame)  # the sender is writing: it takes this too, or, woken by `submit`, next
            return True
        try:
            if self._out:
                self._out.append(frame)
                return True
            try:
                sent = self._sock.send(frame, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
            except BlockingIOError:
                sent = 0
            except OSError:  # the child is gone: the record is pending, and the reader takes over
                return False
            if sent < len(frame):  # a partial write: the rest must follow before anything else
                self._out.append(frame[sent:])
                return True
            return False
        finally:
            self._writing.release()

    def _pickle(self, record: StepRecord | Heartbeat) -> bytes:
        if isinstance(record, StepRecord) and any(getattr(fn, "__module__", None) == "__main__"
                                                  for fn, _ in record.deferred):
            # the child's __main__ is not the training script: such a function runs here, said once
            self._run_here(record, "it is defined in the training script (__main__), which the telemetry process "
                                   "cannot import (define it in a module)")
        try:
            return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a sample row or a deferred argument that does not pickle (a lock, a generator)
            if isinstance(record, StepRecord) and record.deferred:
                self._run_here(record, f"its arguments do not pickle ({exc})")
                return self._pickle(record)
            if not self._warned_pickle:
                self._warned_pickle = True
                logger.warning("otel-grpo: a sample row does not pickle (%s); such values are sent as text", exc)
            record.rows = [(ns, [_plain_row(r) for r in rows], group) for ns, rows, group in record.rows]
            return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)

    def _run_here(self, record: StepRecord, why: str) -> None:
        """The step's deferred recordings on this (the training) thread: the child could not run them."""
        if not self._warned_defer:
            self._warned_defer = True
            names = ", ".join(sorted({getattr(fn, "__qualname__", repr(fn)) for fn, _ in record.deferred}))
            logger.warning("otel-grpo: the deferred %s runs on the training thread: %s", names, why)
        run_deferred(record, self._settings.run_id)

    def flush(self, timeout_s: float) -> bool:
        """The child emits everything sent so far and flushes its exporters; False on timeout or if it is gone."""
        deadline = time.monotonic() + timeout_s
        if self._local is None and not self._gone.is_set():
            token = next(self._tokens)
            done = self._flushes[token] = [threading.Event(), False]
            self._send(_frame(pickle.dumps(("flush", token, timeout_s))))
            done[0].wait(timeout_s + 1.0)  # the child's own flush is bounded by timeout_s
            self._flushes.pop(token, None)
            if done[1]:
                return True
        local = self._local  # the child died meanwhile: what it had is emitted here
        return local is not None and local.flush(max(deadline - time.monotonic(), 0.001))

    def close(self, timeout_s: float, *, finished: bool, preempted: bool) -> None:
        """The child emits what it was sent, ends the run and closes its exporters within half of `timeout_s`
        (plus the wait for an ended run's end to reach Prometheus); a child that does not is killed, and this
        process emits what it had not acknowledged, within what is left."""
        # An ended run waits for its end to reach Prometheus (`Exporters.deliver_end`): by a scrape or a push.
        reaches = self.prometheus_port is not None or "otlp" in self._settings.metrics_exporters
        linger = self._settings.prometheus_linger_s if (finished or preempted) and reaches else 0.0
        started = time.monotonic()
        if self._local is None:
            self._send(_frame(pickle.dumps(("shutdown", None, (timeout_s / 2, finished, preempted)))))
            bound = timeout_s / 2 + 0.5
            if self._ending.wait(bound):  # it emitted every step: only a child that answers waits for the end
                bound += linger
            self._gone.wait(max(started + bound - time.monotonic(), 0.0))  # it exits right after acknowledging
            if self._closed.is_set() and not self._pending:
                self._send(None)
                self._stop_child(wait_s=1.0)
                return
            self._take_over("did not finish within %.1fs; stopping it" % bound)
        self._send(None)
        # Its own bound, not the linger's: the local sink's exporters wait for the run's end themselves.
        self._local.close(max(started + timeout_s - time.monotonic(), 1.0), finished=finished, preempted=preempted)

    # ---- losing the child ----------------------------------------------------------------------
    def _take_over(self, why: str) -> None:
        """Kill the child and hand every record it did not acknowledge to a `ThreadSink` here (cheap:
        the sink builds its exporters on its own thread); later records go there too."""
        with self._lock:
            if self._local is not None:
                return
            if self._proc is not None and self._proc.poll() is None:
                try:
                    os.kill(self._proc.pid, signal.SIGKILL)  # a stopped process dies of it too
                except ProcessLookupError:
                    pass
            logger.warning("otel-grpo: the telemetry process %s; emitting in this process, %d unacknowledged "
                           "steps again", why, len(self._pending))
            local = ThreadSink(self._build_here, build_here=False)
            for data in self._pending.values():
                local.submit_pickled(data)
            self._pending.clear()
            self.unacked_bytes = 0
            self._out.clear()
            self._local = local

    def _stop_child(self, wait_s: float = 0.0) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ---- the pipe's threads ----------------------------------------------------------------------
    def _send(self, frame: bytes | None) -> None:
        """Queue a framed message behind any the training thread queued and wake the sender (None: its last)."""
        self._out.append(frame)
        self._send_now.set()

    def _write(self) -> None:
        """The sender: sleeps until woken, then writes everything queued, blocking while the socket is full."""
        out = self._out
        while True:
            self._send_now.wait()
            self._send_now.clear()  # before looking at the queue: a frame queued from now on sets it again
            with self._writing:  # `submit` queues behind us meanwhile, in order
                while out:
                    try:
                        frame = out.popleft()
                    except IndexError:  # emptied by a take-over meanwhile
                        break
                    if frame is None:
                        return
                    try:
                        self._sock.sendall(frame)
                    except OSError:  # the child is gone: the reader takes over
                        return

    def _read(self) -> None:
        silent = 0  # the reader's waits in a row, each begun with steps waiting, that got no message
        try:
            while True:
                waiting = bool(self._pending) and not self._flushes  # a flush may hold the child for its timeout
                if not self._conn.poll(self._silence_s / _SILENT_WAITS):
                    silent = silent + 1 if waiting else 0
                    if silent == _SILENT_WAITS:  # killed: the end of the pipe ends this loop
                        self._take_over("acknowledged nothing for %.0fs while steps waited (stopped or hung); "
                                        "stopping it" % self._silence_s)
                    continue
                silent = 0
                msg = self._conn.recv()
                if msg[0] == "done":  # every step up to this one
                    with self._lock:
                        pending = self._pending
                        while pending and next(iter(pending)) <= msg[1]:
                            self.unacked_bytes -= len(pending.pop(next(iter(pending))))
                elif msg[0] == "flushed":
                    waiter = self._flushes.get(msg[1])
                    if waiter is not None:
                        waiter[1] = msg[2]
                        waiter[0].set()
                elif msg[0] == "ending":
                    self._ending.set()
                elif msg[0] == "closed":
                    self._closed.set()
        except (EOFError, OSError):
            pass
        self._gone.set()
        if not self._closed.is_set():
            code = self._proc.wait() if self._proc is not None else None
            self._take_over(f"exited (code {code})")
        for waiter in list(self._flushes.values()):
            waiter[0].set()


def _frame(message: bytes) -> bytes:
    """`message` as `Connection.send_bytes` frames it (a 4-byte big-endian length first), for the child's
    `Connection.recv_bytes`."""
    n = len(message)
    return (struct.pack("!i", n) if n < 0x7FFFFFFF else struct.pack("!iQ", -1, n)) + message


def _child_env() -> dict[str, str]:
    """The child's environment: ours, with this package importable from where it was imported."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _plain(value: Any) -> Any:
    """`value` with anything that is not a str, number, bool, None, list, tuple or dict made text."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _plain(v) for k, v in row.items()}
