"""Sinks: how a finished `StepRecord` travels to the `Backend`. The backend is the same whatever the sink.

    sink = ThreadSink(lambda: Backend.build(settings, 0, 1, 0))   # a queue and a thread in this process
    sink = ProcessSink(settings, rank=0, world_size=1, local_rank=0)  # pickled to a child (_process_sink)
    sink = NullSink()                                             # a rank that does not export, telemetry off
    sink.submit(record)            # training thread: one queue put (ProcessSink: one pickle too); or a Heartbeat
    sink.flush(5.0)                # everything submitted so far emitted and pushed to the exporters
    sink.close(10.0, finished=True, preempted=False)

Every sink has the same five members (`submit`, `flush`, `close`, `prometheus_port`,
`export_health`) and `pid` (the child process's, for `ProcessSink`).
"""

from __future__ import annotations

import logging
import pickle
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ._backend import Backend
from ._quiet import ExportHealth
from ._record import Heartbeat, StepRecord

logger = logging.getLogger("otel_grpo.telemetry")

BACKLOG_WARNING = 256  # steps queued: the backend falls behind the training loop
_STOP = object()


@dataclass(frozen=True, slots=True)
class _Pickled:
    """A record as `ProcessSink` pickled it, taken over by this process: unpickled on the sink's thread."""

    data: bytes


class ThreadSink:
    """One daemon thread per `Telemetry`, fed through an unbounded queue, running a `Backend`.

    `build_here`: build the backend in the constructor (its errors raise here, its Prometheus port is
    known at once); else on the sink's thread, so that the caller never waits on exporters being built.
    """

    pid: int | None = None

    def __init__(self, build: Callable[[], Backend], *, build_here: bool = True) -> None:
        self._backend: Backend | None = build() if build_here else None
        self._build = build
        self._built = threading.Event()
        if build_here:
            self._built.set()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._warned_backlog = False
        self._inherited = 0  # taken-over records still queued: no backlog of this sink's (`submit_pickled`)
        self._dropping = False  # shutdown ran out of time: the thread drops what is still queued, counting it
        self._dropped: list[int] = []  # the steps dropped (-1: a taken-over record's, not unpickled to tell)
        self._thread = threading.Thread(target=self._run, name="otel-grpo-emit", daemon=True)
        self._thread.start()

    @property
    def prometheus_port(self) -> int | None:
        return self._backend.prometheus_port if self._backend is not None else None

    @property
    def export_health(self) -> ExportHealth:
        return self._backend.exporters.health if self._backend is not None else _NO_HEALTH

    def submit(self, record: StepRecord | Heartbeat | _Pickled) -> None:
        self._queue.put(record)
        if not self._warned_backlog and self._queue.qsize() - self._inherited > BACKLOG_WARNING:
            # Steps far shorter than the emit work (~ms per 1000 histogram values): memory grows.
            self._warned_backlog = True
            logger.warning("otel-grpo: %d steps wait to be emitted; the emitter thread falls behind", BACKLOG_WARNING)

    def submit_pickled(self, data: bytes) -> None:
        """A record pickled by `ProcessSink` (its child never acknowledged it). Not counted towards the backlog
        warning: a take-over hands over every waiting step at once, and its own warning says how many."""
        self._inherited += 1
        self._queue.put(_Pickled(data))

    def drain(self, timeout_s: float | None) -> bool:
        """Wait until everything submitted so far is emitted; False on timeout (or once the thread stopped)."""
        if not self._thread.is_alive():
            return not self._queue.qsize()
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout_s)

    def flush(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        if not self.drain(timeout_s) or not self._built.wait(max(deadline - time.monotonic(), 0)):
            return False
        backend = self._backend
        return backend is not None and backend.flush(max(deadline - time.monotonic(), 0.001))

    def close(self, timeout_s: float, *, finished: bool, preempted: bool) -> None:
        """Emit what is queued (half the time at most), then end the run and close the exporters. What is still
        queued then is dropped (the exporters' close needs the rest of the time) and said, with its steps: it
        was neither exported nor spilled, and no replay brings it back."""
        deadline = time.monotonic() + timeout_s
        self._queue.put(_STOP)
        self._thread.join(timeout_s / 2)
        if self._thread.is_alive():
            self._dropping = True  # the step being emitted ends; the rest goes at once
            self._drop_queued()
            self._thread.join(max(min(timeout_s / 4, deadline - time.monotonic()), 0.001))
            self._said_dropped(timeout_s / 2, whole=not self._thread.is_alive())
        if self._backend is not None:
            self._backend.close(max(deadline - time.monotonic(), 0.001), finished=finished, preempted=preempted)

    def _run(self) -> None:
        if self._backend is None:
            try:
                self._backend = self._build()
            except Exception:  # nothing to emit with; the queue is still consumed (never a growing backlog)
                logger.exception("otel-grpo: building the telemetry exporters failed; nothing more is emitted")
            finally:
                self._built.set()
        backend = self._backend
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            if isinstance(job, threading.Event):
                job.set()
            elif self._dropping:
                if isinstance(job, (StepRecord, _Pickled)):
                    self._dropped.append(job.step if isinstance(job, StepRecord) else -1)
            elif isinstance(job, _Pickled):
                self._inherited -= 1
                if backend is not None:
                    backend.emit(pickle.loads(job.data))
            elif backend is not None:
                backend.emit(job)

    def _drop_queued(self) -> None:
        """Take what is still queued here, counted as dropped, and queue the stop again behind it: the emitter
        drops a record at a time, microseconds each, and a backfill's tens of thousands outlasted the bound,
        leaving the loss said as "at least" a part of it. The emitter, once past its step, drops what it took
        meanwhile and stops."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, (StepRecord, _Pickled)):
                self._dropped.append(job.step if isinstance(job, StepRecord) else -1)
            elif isinstance(job, threading.Event):
                job.set()
        self._queue.put(_STOP)

    def _said_dropped(self, waited_s: float, whole: bool) -> None:
        dropped = list(self._dropped)
        if not dropped:  # nothing left behind but the step being emitted (still on it: left to finish alone)
            if not whole:
                logger.warning("otel-grpo: shutdown: the emitter was still on a step after %.1fs", waited_s)
            return
        steps = sorted(step for step in dropped if step >= 0)
        which = f" (steps {steps[0]} to {steps[-1]})" if steps else ""
        logger.warning("otel-grpo: shutdown: the emit queue did not drain within %.1fs: %s%d queued step records%s "
                       "are lost, neither exported nor spilled; the loop logged steps faster than they are emitted "
                       "(raise shutdown_timeout_s to wait longer)", waited_s, "" if whole else "at least ",
                       len(dropped), which)


class NullSink:
    """Takes every record and emits nothing: a rank that does not export, or telemetry turned off."""

    pid: int | None = None
    prometheus_port: int | None = None

    @property
    def export_health(self) -> ExportHealth:
        return _NO_HEALTH

    def submit(self, record: StepRecord | Heartbeat) -> None:
        pass

    def flush(self, timeout_s: float) -> bool:
        return True

    def close(self, timeout_s: float, *, finished: bool, preempted: bool) -> None:
        pass


_NO_HEALTH = ExportHealth()  # a sink without exporters: never failing
