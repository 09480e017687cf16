"""The app factory: `create_app(settings)` builds a FastAPI app whose lifespan owns the store.

    app = create_app(SidecarSettings(db="run.db"))
    uvicorn.run(app)

Nothing is configured at import time; tests build as many apps as they like.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

from anyio import CapacityLimiter
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool

from ._columns import column
from ._every import EveryInterval
from ._fds import RefusalLog
from ._heap import release_free_heap
from ._hosts import HostCheckMiddleware
from ._idle import close_idle
from ._latest import Latest
from ._metrics import LatencyMiddleware, SidecarMetrics
from ._readiness import Readiness
from ._settings import MiB, SidecarSettings
from ._workers import IngestPool
from .api._stream_cut import QUIET
from .api.deps import IngestGate
from .api.listing import PAGE_HEADERS
from .api.routes import alerts, ingest, ops, runs, samples, steps, web
from .store import STORE_ERRORS, StepCache, auth_failed, describe, open_store, unavailable

log = logging.getLogger("otel_grpo.sidecar")


def _retain(app: FastAPI) -> None:
    s: SidecarSettings = app.state.settings
    if app.state.store.health.read_only:
        return
    if s.retention_max_runs or s.retention_max_steps or s.retention_max_age_s:
        deleted = app.state.store.apply_retention(s.retention_max_runs, s.retention_max_steps, s.retention_max_age_s)
        if any(deleted.values()):
            log.info("retention deleted %s", deleted)


STATISTICS_CHECK_S = 5.0
"""How often the store may refresh its planner statistics (it does once its samples have doubled): a
store filled fast from empty (a replay, a benchmark) otherwise planned whole-run reads with an empty
table's statistics until the next retention pass (benchmarks/README.md, sidecar)."""


async def _ingest_pool(app: FastAPI) -> IngestPool | None:
    """The ingest worker processes, if configured and the store takes writes (read-only: ingest fails fast in
    process)."""
    settings: SidecarSettings = app.state.settings
    if not settings.ingest_workers or app.state.store.health.read_only:
        return None
    pool = IngestPool(settings.ingest_workers, settings.db, settings.synchronous, settings.ingest_worker_timeout_s,
                      settings.db_timeout_s)
    await pool.open()
    return pool


async def _maintenance_loop(app: FastAPI) -> None:
    """A read-only store's try for writes, planner statistics every `STATISTICS_CHECK_S`, retention every
    `retention_interval_s`, the allocator's free memory back to the kernel every `heap_release_s`."""
    settings: SidecarSettings = app.state.settings
    interval, release = settings.retention_interval_s, settings.heap_release_s
    retain_at, release_at = time.monotonic() + interval, time.monotonic() + release
    while True:
        await asyncio.sleep(min(STATISTICS_CHECK_S, interval, release or STATISTICS_CHECK_S))
        try:
            if release and time.monotonic() >= release_at:  # first: it needs no database
                release_at = time.monotonic() + release
                await run_in_threadpool(release_free_heap)
            store = app.state.store
            if store.health.read_only and await run_in_threadpool(store.writable_again):
                app.state.pool = await _ingest_pool(app)
            if time.monotonic() >= retain_at:
                retain_at = time.monotonic() + interval
                await run_in_threadpool(_retain, app)
            await run_in_threadpool(app.state.store.optimize)
        except Exception:  # keep the loop alive: maintenance retries next time
            log.exception("store maintenance failed")


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    settings: SidecarSettings = app.state.settings
    RefusalLog().install(asyncio.get_running_loop())
    # Step rows come out with the catalog's names for their columns (`grpo.kl`), as the API gives them.
    steps = StepCache(settings.step_cache_mb * MiB, rename=column)
    store = await run_in_threadpool(open_store, settings.db, settings.synchronous, settings.read_connections, steps,
                                    settings.db_timeout_s, settings.startup_lock_timeout_s)
    app.state.store = store
    app.state.readiness = Readiness(store)
    # The gauge reads the last size: a scrape never waits on the database (measuring it on the scrape,
    # PostgreSQL's query, took the database timeout and more while it hung, and the scrape failed).
    app.state.store_size = Latest(store.size_bytes, fresh_s=STORE_SIZE_FRESH_S, name="store-size")
    with contextlib.suppress(Exception):  # the first scrape has it, unless the database is in trouble now
        await app.state.store_size.fresh(settings.db_timeout_s)
    await run_in_threadpool(_retain, app)
    app.state.pool = await _ingest_pool(app)
    tasks = [asyncio.create_task(_maintenance_loop(app))]
    connections = getattr(app.state, "connections", None)  # set when served by `otel-grpo sidecar`
    if connections is not None:
        tasks.append(asyncio.create_task(close_idle(connections, settings.keep_alive_s)))
    # What exists now (modules, the app, the store) lives as long as the server: out of the garbage
    # collector's full passes, which otherwise walk all of it (each a stalled request: benchmarks/README.md).
    gc.freeze()
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if app.state.pool is not None:
            await run_in_threadpool(app.state.pool.close)
        app.state.readiness.close()
        app.state.store_size.close()
        store.close()


STORE_SIZE_FRESH_S = 30.0  # the gauge's value is at most this old (more while the database does not answer)


def _store_size(app: FastAPI) -> float:
    """The store-size gauge: its last measurement; 0 before the lifespan has opened the store."""
    size = getattr(app.state, "store_size", None)
    value = None if size is None else size.value
    return 0.0 if value is None else float(value)


def _step_cache_bytes(app: FastAPI) -> float:
    """The step-cache gauge: the bytes of step histories held; 0 before the lifespan has opened the store."""
    store = getattr(app.state, "store", None)
    return 0.0 if store is None else float(store.step_cache.nbytes)


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    """A store error in a read: the database's trouble (unreachable, timed out, locked, full) is a
    retryable 503; anything else (SQL naming a missing column) is a bug, a 500 that names itself."""
    if not unavailable(exc):
        log.error("store error on %s", request.url.path, exc_info=exc)
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {exc}"}, 500)
    # A refused log-in is said once by the store (store/_login.py); any other fault fails every read alike
    # (a locked table: a warning per read), so it is said once a minute with how many reads it failed.
    count = None if auth_failed(exc) else request.app.state.read_faults.hit()
    if count is None:
        log.debug("store unavailable for %s: %s", request.url.path, exc)
    else:
        log.warning("store unavailable for reads (%s, on %s): they answer 503; %d read(s) failed since the last "
                    "report", exc, request.url.path, count)
    return JSONResponse({"detail": f"store unavailable: {describe(exc)}"}, 503,
                        headers={"Retry-After": str(request.app.state.settings.retry_after_s)})


def create_app(settings: SidecarSettings | None = None, registry: CollectorRegistry | None = None) -> FastAPI:
    """Build the sidecar app; `registry` receives its metrics (a fresh one by default)."""
    settings = settings or SidecarSettings()
    registry = registry if registry is not None else CollectorRegistry()
    app = FastAPI(
        title="otel-grpo sidecar",
        version="1",
        summary="OTLP/HTTP trace ingest, GRPO step history and sample tables.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.read_faults = EveryInterval()  # reads the store could not answer: said once a minute (_store_error)
    app.state.registry = registry
    app.state.metrics = SidecarMetrics(registry, lambda: _store_size(app), lambda: _step_cache_bytes(app))
    app.state.gate = IngestGate(settings.max_concurrent_ingest)
    app.state.body_gate = IngestGate(settings.max_concurrent_bodies)
    app.state.ingest_threads = CapacityLimiter(settings.max_concurrent_ingest)  # in-process ingest's own threads
    # samples before runs: run ids may contain `/` (`{run_id:path}`), so the catch-all
    # `/api/runs/{run_id}` must come after every `/api/runs/{run_id}/...` route.
    for module in (ingest, samples, runs, steps, alerts, ops, web):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=web.WEB_DIR), name="static")
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Content-Encoding"],
                           expose_headers=list(PAGE_HEADERS))
    for error in STORE_ERRORS:
        app.add_exception_handler(error, _store_error)
    logging.getLogger("uvicorn.error").addFilter(QUIET)  # a cut stream is said once a minute (api/_stream_cut)
    app.add_middleware(HostCheckMiddleware, allowed=settings.allowed_hosts)
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)
    return app
