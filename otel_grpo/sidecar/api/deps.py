"""Dependency aliases: the store, settings, metrics, the two bearer-token checks, the JSON body check.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in its thread pool,
and these only read app state, so each would cost a thread hop per request for nothing
(five on an ingest request; measured as most of the server's per-request CPU).
"""

from __future__ import annotations

import json
import secrets
import threading
import itertools
from collections.abc import Iterable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from .._metrics import SidecarMetrics
from .._settings import SidecarSettings
from ..store import Store
from ._stream_cut import cut_on_store_error


class IngestGate:
    """Bounded ingest concurrency: a request that finds every slot taken is turned away (503)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.busy = 0
        self._lock = threading.Lock()  # a plain lock: callable from any thread or event loop

    def try_acquire(self) -> bool:
        with self._lock:
            if self.busy >= self.slots:
                return False
            self.busy += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.busy -= 1


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_settings(request: Request) -> SidecarSettings:
    return request.app.state.settings


async def get_metrics(request: Request) -> SidecarMetrics:
    return request.app.state.metrics


async def get_gate(request: Request) -> IngestGate:
    return request.app.state.gate


StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[SidecarSettings, Depends(get_settings)]
MetricsDep = Annotated[SidecarMetrics, Depends(get_metrics)]
GateDep = Annotated[IngestGate, Depends(get_gate)]
RunId = Annotated[str, Path(description="The run's `grpo.run_id` (may contain `/`, percent-encoded or not).",
                            examples=["run-a"])]
# SQLite integers are signed 64-bit: a larger step would raise OverflowError (a 500) at the query.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def step_param(description: str):
    """A step filter: any int64; beyond that range a 422 naming the parameter."""
    return Query(ge=INT64_MIN, le=INT64_MAX, description=description)


POINTS_MIN, POINTS_MAX = 2, 10_000


def points_param():
    """`points`: downsample the step history to about this many rows (see `/api/runs/{run_id}/steps`)."""
    return Query(ge=POINTS_MIN, le=POINTS_MAX, description=(
        f"Downsample for a chart to at most this many rows ({POINTS_MIN}..{POINTS_MAX}): per bucket of "
        "consecutive steps its first and last step and each column's lowest and highest step (M4), "
        "so spikes survive. Default: every step."))


def _check_bearer(request: Request, expected: str | None, metrics: SidecarMetrics) -> None:
    if expected is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # Header values arrive decoded as latin-1 (ASGI): re-encoding them so gives the bytes the client
    # sent, which for a non-ASCII token are its UTF-8, as the configured token's are.
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode("latin-1"), expected.encode()):
        metrics.rejected.labels("unauthorized").inc()
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})


async def require_read(request: Request, settings: SettingsDep, metrics: MetricsDep) -> None:
    """Read API guard: open unless `read_token` is set."""
    _check_bearer(request, settings.read_token, metrics)


async def require_ingest(request: Request, settings: SettingsDep, metrics: MetricsDep) -> None:
    """Ingest guard (traces and alerts): open unless `ingest_token` is set."""
    _check_bearer(request, settings.ingest_token, metrics)


async def require_json(request: Request, metrics: MetricsDep) -> None:
    """A JSON POST must say `Content-Type: application/json`: the types a page on any site may POST
    without a CORS preflight (text/plain, forms) are refused before the body is read, so with no
    ingest token a web page cannot plant an alert through a visitor's browser."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        metrics.rejected.labels("unsupported_media_type").inc()
        raise HTTPException(415, f"Content-Type must be application/json, got {media or 'none'}")


def bad_param(name: str, message: str, where: str = "query") -> HTTPException:
    """A 422 shaped like FastAPI's own validation errors, naming the parameter."""
    return HTTPException(422, [{"loc": [where, name], "msg": f"{name}: {message}", "type": "value_error"}])


ALL_RUNS = ".*"
"""Grafana's "All" of the dashboard's run variable (its allValue): a path segment where a panel was not repeated
per run."""


def not_found_run(run_id: str) -> HTTPException:
    if run_id == ALL_RUNS:  # the dashboard's default selection, not a run's id: say what to do there
        return HTTPException(404, f"run {run_id!r} not found: {ALL_RUNS!r} is the dashboard's \"All\"; pick one "
                                  "or several runs in its `run` variable (a table per run)")
    return HTTPException(404, f"run {run_id!r} not found")


class FastJSON(JSONResponse):
    """JSON without FastAPI's per-field encoding pass: rows are already plain dicts.

    A JSONResponse, so the OpenAPI schema shows the route's `response_model` (with a plain
    Response class FastAPI types the body as a string)."""

    def render(self, content) -> bytes:
        return json.dumps(content, separators=(",", ":"), allow_nan=False).encode()


STREAM_FLUSH_BYTES = 256 * 1024


def json_array(pieces: Iterable[bytes], flush_bytes: int = STREAM_FLUSH_BYTES) -> Iterator[bytes]:
    """A JSON array for a StreamingResponse from pieces of its inside (each one or more elements
    joined by commas; empty pieces are skipped), sent on in chunks of about `flush_bytes`: each
    chunk of a sync generator costs a thread-pool hop, and the response holds one chunk at a time."""
    out, size, sep = [b"["], 1, b""
    for piece in pieces:
        if not piece:
            continue
        out += (sep, piece)
        size += len(piece) + 1
        sep = b","
        if size >= flush_bytes:
            yield b"".join(out)
            out, size = [], 0
    out.append(b"]")
    yield b"".join(out)


def json_response(pieces: Iterable[bytes], headers: dict[str, str] | None = None) -> Response:
    """A JSON array response from pieces of its inside (as `json_array` takes them): a plain response
    where they come to less than STREAM_FLUSH_BYTES (most pages: no thread-pool hop per chunk), else a
    streamed one that sends what was taken so far and takes the rest as it goes. Taken here (in the
    route's thread): the first pieces, so a store error in them is still an error status."""
    pieces = iter(pieces)
    first: list[bytes] = []
    size = 0
    for piece in pieces:
        first.append(piece)
        size += len(piece)
        if size >= STREAM_FLUSH_BYTES:
            return StreamingResponse(cut_on_store_error(json_array(itertools.chain(first, pieces))),
                                     media_type="application/json", headers=headers)
    return Response(b"[" + b",".join(p for p in first if p) + b"]", media_type="application/json", headers=headers)
