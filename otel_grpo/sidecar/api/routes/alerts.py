"""`/api/alerts`: Alertmanager webhook receiver (version 4) and the stored alerts."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from ...schemas import AlertmanagerWebhook, AlertPublic, AlertsAccepted
from ..deps import FastJSON, StoreDep, require_ingest, require_read

router = APIRouter(prefix="/api/alerts", tags=["alerts"])


@router.post("", response_model=AlertsAccepted, dependencies=[Depends(require_ingest)])
async def receive_alerts(payload: AlertmanagerWebhook, store: StoreDep) -> AlertsAccepted:
    """Alertmanager's webhook: alerts are upserted by (fingerprint, startsAt), committed before 200."""
    alerts = [a.model_dump() for a in payload.alerts]
    stored = await run_in_threadpool(store.upsert_alerts, alerts)
    return AlertsAccepted(stored=stored)


@router.get("", response_model=list[AlertPublic], response_class=FastJSON, dependencies=[Depends(require_read)])
def list_alerts(
    store: StoreDep,
    run_id: Annotated[str | None, Query(description="Only alerts whose `run_id` label is this.")] = None,
    status: Annotated[Literal["firing", "resolved"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> FastJSON:
    """Stored alerts, newest first; labels and annotations as objects."""
    return FastJSON(store.alerts(run_id, status, limit))
