"""`/healthz`, `/readyz`, `/metrics`: the sidecar's own health."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


router = APIRouter(tags=["ops"])


# Both are `async def` and touch no thread: a sync handler runs on the server's shared thread pool,
# and with the database hung, reads filled it and /healthz took 13-17 s (probes failed, pods restarted).
@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the store answers a query (within 1 s) and can take writes",
            responses={503: {"description": "The database did not answer in time, failed, is read-only, or its "
                                            "disk is full: `detail` says which."}})
async def readyz(request: Request) -> Response:
    status, body = await request.app.state.readiness.check()
    return Response(json.dumps(body), status, media_type="application/json")


@router.get("/metrics", response_class=Response, summary="Prometheus metrics of the sidecar itself",
            responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:  # in the event loop: nothing in it waits on the database
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
