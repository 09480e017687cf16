"""`ProcessEmitter`: the emitter and the exporters in a child process, off the training process's GIL.

    emitter = ProcessEmitter(settings, rank=0, world_size=1, local_rank=0, take_over=make_thread_emitter)
    emitter.submit(record)        # training thread: one pickle, one deque append
    emitter.drain(5.0)            # the child emitted and flushed everything so far
    emitter.close_child(10.0, finished=True)

Why a process: the emitter thread and the SDK's exporter threads hold the GIL for
about a millisecond a step (metric points, span attributes, sample events, OTLP
encoding). A training loop releases the GIL around every torch op and, while such a
thread runs, may wait up to the interpreter's switch interval (5 ms) to get it back,
so on a Python-bound loop that work is paid by training. Here the training thread
pickles the step record and a sender thread passes the queued records every 0.25 s to
`otel_grpo.telemetry._child`, which runs an ordinary `Telemetry`.

No sample is lost to a dead child: each record is kept here until the child says it
has emitted it (spill lines written). If the child dies, this process takes over
(one warning): `take_over` builds a thread emitter with its own exporters here and the
records not yet acknowledged are emitted again through it.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
from multiprocessing import Pipe
from typing import Any, Callable, Mapping

from ._emitter import BACKLOG_WARNING, Emitter, StepRecord
from ._settings import TelemetrySettings

logger = logging.getLogger("otel_grpo.telemetry")

START_TIMEOUT_S = 60.0  # the child imports the OTel SDK and binds its exporters; a loaded node is slow
SEND_EVERY_S = 0.25
"""How often the sender wakes to send the steps queued meanwhile; flush and shutdown wake it at once.
Waking it at every step cost the training thread a wake-up call, and each wake-up of a thread CPU
time (benchmarks/README.md, costs). The price: a training process killed outright (SIGKILL, the OOM killer)
loses the steps of its last quarter second; an exception or Ctrl-C still sends everything."""
_PLAIN = (str, int, float, bool, type(None))


class ProcessEmitter:
    """`Emitter`'s interface, served by a child process; a thread emitter here once the child is gone."""

    def __init__(self, settings: TelemetrySettings, *, rank: int, world_size: int, local_rank: int,
                 take_over: Callable[[], Emitter]) -> None:
        self._settings = settings
        self._take_over_with = take_over
        self._lock = threading.Lock()
        self._taking_over = threading.Lock()  # the reader and close_child may both find the child gone
        self._pending: dict[int, bytes] = {}  # sent, not yet acknowledged: replayed if the child dies
        self._seq = itertools.count()
        self._tokens = itertools.count()
        self._flushes: dict[int, list[Any]] = {}  # token -> [Event, ok]
        self._local: Emitter | None = None
        self._closed = threading.Event()  # the child acknowledged its shutdown
        self._gone = threading.Event()  # the child's end of the pipe closed
        self._out: collections.deque[bytes | None] = collections.deque()  # the sender's, appended without a wake-up
        self._send_now = threading.Event()
        self._warned_pickle = self._warned_backlog = False
        self.prometheus_port: int | None = None
        self._proc: subprocess.Popen | None = None
        try:
            self._start(rank, world_size, local_rank)
        except Exception as exc:  # telemetry goes on in this process
            logger.warning("otel-grpo: the telemetry process did not start (%s); emitting in this process", exc)
            self._stop_child()
            self._local = take_over()
            return
        threading.Thread(target=self._write, name="otel-grpo-emit-send", daemon=True).start()
        threading.Thread(target=self._read, name="otel-grpo-emit-ack", daemon=True).start()

    # ---- start-up ------------------------------------------------------------------------
    def _start(self, rank: int, world_size: int, local_rank: int) -> None:
        ours, theirs = Pipe()
        try:
            # A new session: Ctrl-C in the terminal reaches the trainer only, which then closes us.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "otel_grpo.telemetry._child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), start_new_session=True, env=_child_env(),
            )
        finally:
            theirs.close()
        self._conn = ours
        ours.send({"settings": self._settings.model_dump(), "rank": rank, "world_size": world_size,
                   "local_rank": local_rank})
        if not ours.poll(START_TIMEOUT_S):
            raise TimeoutError(f"no answer within {START_TIMEOUT_S:.0f}s")
        kind, port = ours.recv()  # EOFError: the child failed (its traceback is on stderr)
        if kind != "ready":
            raise RuntimeError(f"unexpected first message {kind!r}")
        self.prometheus_port = port

    # ---- the training thread's side --------------------------------------------------------
    def submit(self, record: StepRecord) -> None:
        with self._lock:
            if self._local is not None:
                self._local.submit(record)
                return
            seq = next(self._seq)
            data = self._pickle(seq, record)
            self._pending[seq] = data
        self._out.append(data)
        if not self._warned_backlog and len(self._pending) > BACKLOG_WARNING:
            self._warned_backlog = True
            logger.warning("otel-grpo: %d steps wait to be emitted; the telemetry process falls behind",
                           BACKLOG_WARNING)

    def _pickle(self, seq: int, record: StepRecord) -> bytes:
        try:
            return pickle.dumps(("step", seq, record), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a sample row with a value that does not pickle (a lock, a generator)
            if not self._warned_pickle:
                self._warned_pickle = True
                logger.warning("otel-grpo: a sample row does not pickle (%s); such values are sent as text", exc)
            record.rows = [(ns, [_plain_row(r) for r in rows], group) for ns, rows, group in record.rows]
            return pickle.dumps(("step", seq, record), protocol=pickle.HIGHEST_PROTOCOL)

    def submit_scalars(self, values: dict[str, float]) -> None:
        with self._lock:
            if self._local is not None:
                self._local.submit_scalars(values)
                return
        self._send(pickle.dumps(("scalars", None, values)))

    def drain(self, timeout_s: float | None) -> bool:
        """The child emits everything sent so far and flushes its exporters; False on timeout or if it died."""
        if self._local is not None:
            return self._local.drain(timeout_s)
        token = next(self._tokens)
        done = self._flushes[token] = [threading.Event(), False]
        self._send(pickle.dumps(("flush", token, timeout_s)))
        done[0].wait(None if timeout_s is None else timeout_s + 1.0)  # the child's own flush is bounded by it
        self._flushes.pop(token, None)
        if self._local is not None:  # it died meanwhile: what it had is being emitted here
            return self._local.drain(timeout_s)
        return bool(done[1])

    def close(self, timeout_s: float) -> bool:
        """After `close_child` returned False: stop the emitter that took over."""
        return self._local.close(timeout_s) if self._local is not None else True

    def close_child(self, timeout_s: float, finished: bool) -> bool:
        """The child emits what is queued, ends the run (`finished`: `grpo.run.finished` = 1, the
        Prometheus linger) and closes its exporters. False: this process holds the telemetry now (the
        child died or never started) and the caller closes it as a thread emitter's."""
        if self._local is None:
            self._send(pickle.dumps(("shutdown", None, finished)))
            linger = self._settings.prometheus_linger_s if finished and self.prometheus_port is not None else 0.0
            self._gone.wait(timeout_s + linger)  # it exits right after acknowledging
            if self._closed.is_set() and not self._pending:
                self._send(None)
                self._stop_child(wait_s=1.0)
                return True
            if not self._gone.is_set():  # alive but stuck: what it holds is emitted here
                logger.warning("otel-grpo: shutdown: the telemetry process did not finish within %.1fs; "
                               "stopping it", timeout_s + linger)
                self._stop_child()
                self._gone.wait(2.0)
            self._take_over()
        self._send(None)
        return False

    # ---- the pipe's threads ------------------------------------------------------------------
    def _send(self, data: bytes | None) -> None:
        """Queue a message and wake the sender now (None: the sender's last)."""
        self._out.append(data)
        self._send_now.set()

    def _write(self) -> None:
        out = self._out
        while True:
            self._send_now.wait(SEND_EVERY_S)
            self._send_now.clear()
            while out:
                data = out.popleft()
                if data is None:
                    return
                try:
                    self._conn.send_bytes(data)
                except OSError:  # the child is gone: the reader takes over
                    return

    def _read(self) -> None:
        try:
            while True:
                msg = self._conn.recv()
                if msg[0] == "done":  # every step up to this one
                    with self._lock:
                        pending = self._pending
                        while pending and next(iter(pending)) <= msg[1]:
                            del pending[next(iter(pending))]
                elif msg[0] == "flushed":
                    waiter = self._flushes.get(msg[1])
                    if waiter is not None:
                        waiter[1] = msg[2]
                        waiter[0].set()
                elif msg[0] == "closed":
                    self._closed.set()
        except (EOFError, OSError):
            pass
        self._gone.set()
        if not self._closed.is_set():
            code = self._proc.wait() if self._proc is not None else None
            logger.warning("otel-grpo: the telemetry process exited (code %s); emitting in this process, "
                           "%d unacknowledged steps again", code, len(self._pending))
            self._take_over()
        for waiter in list(self._flushes.values()):
            waiter[0].set()

    def _take_over(self) -> None:
        """A thread emitter here, fed first with every record the child did not acknowledge."""
        with self._taking_over:
            if self._local is not None:
                return
            local = self._take_over_with()  # outside the submit lock: builds exporters, may take a moment
            with self._lock:
                for data in self._pending.values():
                    _, _, record = pickle.loads(data)
                    local.submit(record)
                self._pending.clear()
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

    @property
    def pid(self) -> int | None:
        """The child's process id (None once this process took over)."""
        return self._proc.pid if self._proc is not None and self._local is None else None


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
