"""`POST /v1/traces`: OTLP/HTTP trace ingest (protobuf or JSON, optionally gzip)."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response

from ..._workers import IngestFailed, WorkerLost
from ...otlp import PROTOBUF, BodyError, DecodeError, decode_request, encode_response, encode_status, extract, read_body
from ...otlp._decode import media_type
from ...otlp._status import INTERNAL, INVALID_ARGUMENT, UNAVAILABLE
from ...store import STORE_ERRORS, describe, unavailable
from ..deps import GateDep, MetricsDep, SettingsDep, StoreDep, require_ingest

router = APIRouter(tags=["ingest"])

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "description": "An OTLP ExportTraceServiceRequest; `Content-Encoding: gzip` is accepted.",
        "content": {
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {"type": "object", "description": "OTLP/JSON (hex trace/span ids)"}},
        },
    }
}
_RESPONSES = {
    200: {"description": "Stored and committed; `partialSuccess` lists spans that were rejected.",
          "content": {"application/x-protobuf": {}, "application/json": {}}},
    400: {"description": "Malformed body: a google.rpc.Status in the request's encoding."},
    408: {"description": "The body did not arrive within `body_timeout_s`."},
    401: {"description": "Missing or wrong bearer token."},
    413: {"description": "Body larger than `max_body_bytes` after decompression."},
    415: {"description": "Content-Type other than application/x-protobuf or application/json, "
                         "or a Content-Encoding other than gzip."},
    500: {"description": "A bug: the google.rpc.Status names the error."},
    503: {"description": "Overloaded, or the store is busy, full, unreachable or did not answer within "
                         "`db_timeout_s`; retry after `Retry-After` seconds."},
}


def _error(media: str, status: int, code: int, message: str, retry_after: int | None = None) -> Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(encode_status(media, code, message), status_code=status, media_type=media, headers=headers)


def _decode_and_store(store, body: bytes, media: str) -> tuple[int, int, list[str], int]:
    # In process (ingest_workers = 0): off the event loop, a 64 MiB body takes a while to parse.
    batch = extract(decode_request(body, media))
    inserted = store.write_batch(batch)
    return batch.spans, batch.rejected, batch.errors, inserted


@router.post("/v1/traces", dependencies=[Depends(require_ingest)], openapi_extra=_BODY_DOC,
             responses=_RESPONSES, response_class=Response, summary="OTLP/HTTP trace export")
async def export_traces(request: Request, store: StoreDep, settings: SettingsDep, metrics: MetricsDep,
                        gate: GateDep) -> Response:
    media = media_type(request.headers.get("content-type"))
    if media is None:
        metrics.rejected.labels("unsupported_media_type").inc()
        return _error(PROTOBUF, 415, INVALID_ARGUMENT,
                      "Content-Type must be application/x-protobuf or application/json")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > settings.max_body_bytes:
        metrics.rejected.labels("too_large").inc()  # refused before reading a byte
        return _error(media, 413, INVALID_ARGUMENT, f"request body exceeds the limit of {settings.max_body_bytes} bytes")
    # The body is read, within a deadline, before a slot is taken: four clients trickling bytes
    # once held every slot, and every other exporter got 503 while /readyz said 200. Bodies being
    # read have their own, larger bound, which bounds the memory they hold.
    readers = request.app.state.body_gate
    if not readers.try_acquire():
        metrics.rejected.labels("overloaded").inc()
        return _error(media, 503, UNAVAILABLE, "too many request bodies in flight", settings.retry_after_s)
    try:
        body, wire = await read_body(request.stream(), request.headers.get("content-encoding"),
                                     settings.max_body_bytes, settings.body_timeout_s)
    except BodyError as exc:
        metrics.rejected.labels(exc.reason).inc()
        return _error(media, exc.status, INVALID_ARGUMENT, exc.message)
    finally:
        readers.release()
    if not gate.try_acquire():
        metrics.rejected.labels("overloaded").inc()
        return _error(media, 503, UNAVAILABLE, "ingest is at capacity", settings.retry_after_s)
    try:
        pool = request.app.state.pool
        if pool is None:
            # Threads of its own (as many as ingest slots): never queued behind reads on the shared pool.
            spans, rejected, errors, inserted = await anyio.to_thread.run_sync(
                _decode_and_store, store, body, media, limiter=request.app.state.ingest_threads)
        else:
            done = await pool.ingest(media, body)  # committed by a worker process
            spans, rejected, errors, inserted = done.spans, done.rejected, done.errors, done.inserted
            store.wake_checkpointer()
    except DecodeError as exc:
        metrics.rejected.labels("malformed").inc()
        return _error(media, 400, INVALID_ARGUMENT, str(exc))
    except STORE_ERRORS as exc:
        if not unavailable(exc):  # SQL that names a missing column: a bug, not the client's to retry
            return _error(media, 500, INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        # Locked, full, unreachable or silent database: transient from the client's side, so retryable (503).
        metrics.rejected.labels("store_unavailable").inc()
        store.health.failed(exc)
        return _error(media, 503, UNAVAILABLE, f"store unavailable: {describe(exc)}", settings.retry_after_s)
    except IngestFailed as exc:
        return _error(media, 500, INTERNAL, f"internal error: {exc}")
    except WorkerLost as exc:
        metrics.rejected.labels("worker_lost").inc()  # logged by the pool; the worker is replaced
        return _error(media, 503, UNAVAILABLE, f"ingest worker lost ({exc}); retry", settings.retry_after_s)
    finally:
        gate.release()
    store.health.ok()
    metrics.bytes.labels(media).inc(wire)
    metrics.spans.inc(spans)
    metrics.events.inc(inserted)
    metrics.spans_rejected.inc(rejected)
    return Response(encode_response(media, rejected, "; ".join(errors)), media_type=media)
