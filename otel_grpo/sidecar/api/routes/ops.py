"""`/healthz`, `/readyz`, `/metrics`: the sidecar's own health."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..deps import StoreDep

router = APIRouter(tags=["ops"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the store answers a query and can take writes",
            responses={503: {"description": "Store not ready, read-only, or its disk is full (`detail` says which)."}})
def readyz(store: StoreDep) -> Response:
    try:
        ok = store.ping()
    except Exception as exc:  # any store failure means "not ready", never a 500
        return _json({"status": "unavailable", "detail": type(exc).__name__}, 503)
    if not ok:
        return _json({"status": "unavailable"}, 503)
    problem = store.health.problem()  # reads work, but every ingest would get 503
    if problem is not None:
        return _json({"status": "not_writable", "detail": problem, "reads": "ok"}, 503)
    return _json({"status": "ready"}, 200)


def _json(body: dict, status: int) -> Response:
    return Response(json.dumps(body), status, media_type="application/json")


@router.get("/metrics", response_class=Response, summary="Prometheus metrics of the sidecar itself",
            responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
