"""`/api/alerts`: Alertmanager webhook receiver (version 4) and the stored alerts."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ...otlp import BodyError, read_body
from ...schemas import AlertmanagerWebhook, AlertPublic, AlertsAccepted
from ...store._queries import selected_run_ids
from ..deps import FastJSON, MetricsDep, SettingsDep, StoreDep, require_ingest, require_json, require_read

router = APIRouter(prefix="/api/alerts", tags=["alerts"])
StatusParam = Annotated[Literal["firing", "resolved"] | None, Query()]
LimitParam = Annotated[int, Query(ge=1, le=10_000)]
"""The alert listings' parameters: here and a run's (`/api/runs/{run_id}/alerts`)."""
_BODY_DOC = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "description": "Alertmanager's webhook payload, version 4."}}}}}


async def _payload(request: Request, limit: int, metrics) -> AlertmanagerWebhook:
    """The body, read only after the token check (a dependency) and within `limit` bytes."""
    length = request.headers.get("content-length", "")
    try:
        if length.isdigit() and int(length) > limit:
            raise BodyError(413, "too_large", f"request body exceeds the limit of {limit} bytes")
        body, _ = await read_body(request.stream(), request.headers.get("content-encoding"), limit)
    except BodyError as exc:
        metrics.rejected.labels(exc.reason).inc()
        raise HTTPException(exc.status, exc.message) from None
    try:
        return AlertmanagerWebhook.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_context=False, include_input=False)) from None


# The body is taken by hand, not as a typed parameter: FastAPI reads a declared body before any
# dependency runs, so a 100 MiB body without a token was read whole before its 401.
@router.post("", response_model=AlertsAccepted, dependencies=[Depends(require_ingest), Depends(require_json)],
             openapi_extra=_BODY_DOC, responses={413: {"description": "Body larger than `max_alert_body_bytes`."},
                                                 415: {"description": "Content-Type other than application/json."}})
async def receive_alerts(request: Request, store: StoreDep, settings: SettingsDep,
                         metrics: MetricsDep) -> AlertsAccepted:
    """Alertmanager's webhook: one alert per (fingerprint, episode), resolved when Alertmanager resolves
    it or no longer lists it in its group; committed before 200."""
    payload = await _payload(request, settings.max_alert_body_bytes, metrics)
    alerts = [a.model_dump() for a in payload.alerts]
    # A truncated notification does not list every alert of its group: close nothing by absence.
    group = payload.groupLabels if not payload.truncatedAlerts else None
    stored = await run_in_threadpool(store.upsert_alerts, alerts, None, group)
    return AlertsAccepted(stored=stored)


@router.get("", response_model=list[AlertPublic], response_class=FastJSON, dependencies=[Depends(require_read)])
def list_alerts(
    store: StoreDep,
    run_id: Annotated[str | None, Query(description=(
        "Only alerts whose `run_id` label is this, or one of `a|b` (Grafana's `${run_id:pipe}`); `.*` is every run. "
        "One run's alerts, whatever its id holds: `/api/runs/{run_id}/alerts`."))] = None,
    status: StatusParam = None,
    limit: LimitParam = 1000,
) -> FastJSON:
    """Stored alerts, newest first; labels and annotations as objects."""
    return FastJSON(store.alerts(None if run_id is None else selected_run_ids(run_id), status, limit))
