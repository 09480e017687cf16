"""`/healthz`, `/readyz`, `/metrics`: the sidecar's own health."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..deps import StoreDep

router = APIRouter(tags=["ops"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the store is open and answers a query",
            responses={503: {"description": "Store not ready."}})
def readyz(store: StoreDep) -> Response:
    try:
        ok = store.ping()
    except Exception as exc:  # any store failure means "not ready", never a 500
        return Response(f'{{"status":"unavailable","detail":"{type(exc).__name__}"}}', 503, media_type="application/json")
    return Response('{"status":"ready"}' if ok else '{"status":"unavailable"}', 200 if ok else 503,
                    media_type="application/json")


@router.get("/metrics", response_class=Response, summary="Prometheus metrics of the sidecar itself",
            responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
