"""Ingest worker processes: decode, extract and commit OTLP bodies on other cores.

    pool = IngestPool(2, "sidecar.db", "NORMAL", timeout_s=120)
    pool.start()                                   # once, at app start-up
    result = await pool.ingest(PROTOBUF, body)     # after the worker's COMMIT
    pool.close()

Decoding a request and reading its attributes is pure Python work under the GIL; in one
process it caps ingest near one core. Each worker is a process started once (forkserver:
never a fork of the threaded server) that takes the inflated body bytes in a shared
memory buffer (a memfd; only its size and media type go over the pipe),
decodes and extracts them with opentelemetry-proto and commits them to the store (SQLite
or PostgreSQL) itself, then answers with a few counts. The HTTP process answers 200 only after that
answer, so the durability rule (200 only after the commit) holds as in process.

Workers serialize their transactions as every writer of the store does (an `flock` for
SQLite, an advisory lock for PostgreSQL; see the stores). A worker that dies or does not answer within `timeout_s` is killed, logged once
and replaced; the request it held gets `WorkerLost` (the route answers 503 + Retry-After). A
request waits at most `wait_s` for a free worker (StoreUnavailable: 503), and the threads that wait
on workers are the pool's own (an anyio limiter), so ingest never queues behind the reads that
share the server's thread pool.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass
from multiprocessing import reduction
from pathlib import Path

import anyio.to_thread
from anyio import CapacityLimiter
from starlette.concurrency import run_in_threadpool

from ._heap import keep_freed_heap
from .otlp import PROTOBUF, DecodeError, decode_request, extract
from .store import STORE_ERRORS, StoreUnavailable, auth_failed, describe, open_writer, read_only, unavailable

log = logging.getLogger("otel_grpo.sidecar")
MiB = 1024 * 1024
SHARED_BYTES = 8 * MiB  # each worker's shared body buffer; a larger body gets one of its size for that request


class WorkerLost(Exception):
    """The worker holding the request died or hung; the request may be retried."""


class IngestFailed(Exception):
    """A bug in a worker (decoding or storing raised what it should not): the route's 500, with the error."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What a committed request contributed (the route's answer and counters)."""

    spans: int
    rejected: int
    errors: tuple[str, ...]
    inserted: int


def _serve(conn, db: str, synchronous: str, timeout_s: float) -> None:
    """A worker's loop: a body in the shared buffer in, a reply tuple out, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group; the server closes us
    keep_freed_heap()  # each request parses a multi-MiB body: keep its pages (see _heap)
    store = open_writer(db, synchronous, timeout_s)
    shared = None
    try:
        while True:
            try:
                message = conn.recv()
                if message[0] == "buffer":  # a new shared buffer: ("buffer", size) then its fd
                    fd = reduction.recv_handle(conn)
                    if shared is not None:
                        shared.close()
                    shared = mmap.mmap(fd, message[1])
                    os.close(fd)
                    continue
            except (EOFError, OSError):
                return  # the server closed the pipe or died
            reply = _ingest(store, shared, message[1], message[2])
            try:
                conn.send(reply)
            except OSError:
                return
    finally:
        store.close()


def _ingest(store, shared: mmap.mmap, media: str, size: int) -> tuple:
    view = memoryview(shared)[:size]
    try:
        # protobuf parses straight from the shared pages; json.loads wants bytes
        batch = extract(decode_request(view if media == PROTOBUF else bytes(view), media))
    except DecodeError as exc:
        return ("malformed", str(exc))
    except Exception:  # a bug: the server answers 500, as it would in process
        return ("error", traceback.format_exc())
    finally:
        view.release()
    try:
        inserted = store.write_batch(batch)
    except STORE_ERRORS as exc:
        if unavailable(exc):
            return ("store", describe(exc), read_only(exc), auth_failed(exc))
        return ("error", traceback.format_exc())
    except Exception:
        return ("error", traceback.format_exc())
    return ("ok", batch.spans, batch.rejected, tuple(batch.errors), inserted)


class _Worker:
    def __init__(self, ctx, db: Path | str, synchronous: str, db_timeout_s: float) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child, str(db), synchronous, db_timeout_s),
                                   name="otel-grpo-ingest", daemon=True)
        self.process.start()
        child.close()  # only the worker holds its end: its death reads as EOF here
        self.shared: mmap.mmap | None = None

    def _share(self, size: int) -> None:
        """Give the worker a new shared buffer of `size` bytes (a memfd, passed over the pipe)."""
        fd = os.memfd_create("otel-grpo-ingest", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            shared = mmap.mmap(fd, size)
            self.conn.send(("buffer", size))
            reduction.send_handle(self.conn, fd, self.process.pid)
        finally:
            os.close(fd)
        if self.shared is not None:
            self.shared.close()
        self.shared = shared

    def exchange(self, media: str, body: bytes, timeout_s: float):
        """Send one request and wait for the reply; WorkerLost if the worker dies or hangs."""
        try:
            # The body goes through shared memory (one copy, where a socket was slower), sized
            # for the usual request and grown for a larger one, then shrunk back after it.
            size = SHARED_BYTES if len(body) <= SHARED_BYTES else -(-len(body) // MiB) * MiB
            if self.shared is None or len(self.shared) != size:
                self._share(size)
            self.shared[:len(body)] = body
            # Only small messages go over the pipe and one is outstanding at a time, so the send
            # cannot block on a stopped worker; the wait is bounded by poll (no timer thread).
            self.conn.send(("body", media, len(body)))
            if not self.conn.poll(timeout_s):
                self.process.kill()
                raise WorkerLost("hung")
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerLost("died") from exc

    def stop(self, timeout_s: float) -> None:
        self.conn.close()  # the worker reads EOF and exits after its current request
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        if self.shared is not None:
            self.shared.close()
            self.shared = None


class IngestPool:
    """`size` worker processes for ingest; see the module docstring."""

    def __init__(self, size: int, db: Path | str, synchronous: str, timeout_s: float, wait_s: float = 5.0) -> None:
        if size < 1:
            raise ValueError("an ingest pool needs at least one worker (0 workers means: ingest in process)")
        self.size = size
        self.db = db
        self.synchronous = synchronous
        self.timeout_s = timeout_s
        self.wait_s = wait_s  # for a free worker; also the workers' store timeout (db_timeout_s)
        self._threads = CapacityLimiter(size)  # one thread per worker exchange, apart from the shared pool
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload([__name__])  # workers fork from a server with these imported
        self._idle: asyncio.Queue[_Worker] | None = None
        self._live = 0
        self._closed = False

    def start(self) -> None:
        """Start every worker (blocking: call it off the event loop); the store must exist."""
        self._workers = [_Worker(self._ctx, self.db, self.synchronous, self.wait_s) for _ in range(self.size)]

    async def open(self) -> None:
        """Start the workers from the event loop that will use them."""
        self._idle = asyncio.Queue()
        self._starting = asyncio.Lock()
        await run_in_threadpool(self.start)
        for worker in self._workers:
            self._idle.put_nowait(worker)
        self._live = len(self._workers)

    async def ingest(self, media: str, body: bytes) -> IngestResult:
        """Decode, extract and commit `body` in a worker. Raises DecodeError (malformed),
        StoreUnavailable (store busy, full or unreachable, or no worker free within `wait_s`),
        WorkerLost (retry later), IngestFailed (a bug)."""
        assert self._idle is not None, "IngestPool.open() first"
        if self._live < self.size:
            await self._replace(None, None)
        if self._live == 0:
            raise WorkerLost("no ingest worker could be started")
        worker = await self._free_worker()
        while not worker.process.is_alive():  # died while idle: replace it, the request goes on
            await self._replace(worker, "died")
            if self._live == 0:
                raise WorkerLost("no ingest worker could be started")
            worker = await self._free_worker()
        try:
            reply = await anyio.to_thread.run_sync(worker.exchange, media, body, self.timeout_s,
                                                   limiter=self._threads)
        except WorkerLost as exc:
            await self._replace(worker, str(exc))
            raise
        self._idle.put_nowait(worker)
        kind = reply[0]
        if kind == "ok":
            return IngestResult(reply[1], reply[2], reply[3], reply[4])
        if kind == "malformed":
            raise DecodeError(reply[1])
        if kind == "store":
            raise StoreUnavailable(reply[1], read_only=reply[2], auth=reply[3])
        log.error("ingest worker failed:\n%s", reply[1])
        raise IngestFailed(reply[1].rstrip().rsplit("\n", 1)[-1])  # the exception's line names it

    async def _free_worker(self) -> _Worker:
        try:
            return await asyncio.wait_for(self._idle.get(), self.wait_s)
        except TimeoutError:  # every worker is waiting on the store (a hung database, a long write)
            raise StoreUnavailable(f"no ingest worker free within {self.wait_s:g} s") from None

    async def _replace(self, lost: _Worker | None, how: str | None) -> None:
        if lost is not None:
            self._live -= 1
            await run_in_threadpool(lost.process.join, 5)
            self._workers.remove(lost)
            log.warning("ingest worker pid %s %s (exit code %s); starting a new one", lost.process.pid,
                        f"did not answer within {self.timeout_s:g} s and was killed" if how == "hung" else "died",
                        lost.process.exitcode)
            lost.stop(0)  # closes its pipe and buffer; the process is already gone
        async with self._starting:  # one starter at a time, or two requests would both top the pool up
            while self._live < self.size and not self._closed:
                try:
                    worker = await run_in_threadpool(_Worker, self._ctx, self.db, self.synchronous, self.wait_s)
                except Exception:
                    log.exception("could not start an ingest worker; will try again on the next request")
                    return
                self._live += 1
                self._workers.append(worker)
                self._idle.put_nowait(worker)

    def close(self, timeout_s: float = 5.0) -> None:
        """Close every worker's pipe and wait for them to exit (killing any that do not)."""
        self._closed = True
        for worker in self._workers:
            worker.stop(timeout_s)
        self._workers.clear()
