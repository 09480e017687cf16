"""The run filters and paging shared by `/api/runs` and `/api/steps`, and the headers that page them.

    GET /api/runs?q=exp&status=active&since=2026-12-01T00:00:00Z&limit=100
    -> the rows; `X-Total-Count: 1234`; `Link: <?q=exp&status=active&...&cursor=...>; rel="next"`

The body stays a plain array of rows (Grafana's Infinity and the page read it as it is); what a
page does not hold is said in the headers: the total matched and, where there is more, the link to
the next page (RFC 8288, relative to the request's URL, so right behind a path prefix too).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import Depends, Query, Request

from ..store._runs import RUN_STATUSES, CursorError, RunQuery, decode_cursor
from .deps import bad_param

TOTAL_HEADER = "X-Total-Count"
TRUNCATED_HEADER = "X-Truncated"
PAGE_HEADERS = ("Link", TOTAL_HEADER, TRUNCATED_HEADER)
"""Headers a page of the API carries that a browser on another origin may read (CORS)."""
RUNS_LIMIT_MAX = 1000


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()  # no zone: UTC


def _statuses(values: list[str] | None) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(v.strip() for value in values or () for v in value.split(",") if v.strip()))
    wrong = [s for s in out if s not in RUN_STATUSES]
    if wrong:
        raise bad_param("status", f"{', '.join(wrong)} is not a run status ({', '.join(RUN_STATUSES)})")
    return out


async def run_filters(  # async: pure validation, no thread-pool hop (see deps)
    q: Annotated[str | None, Query(max_length=128, description=(
        "Runs whose id contains this (case-insensitive for ASCII)."))] = None,
    status: Annotated[list[str] | None, Query(description=(
        "Runs of these statuses (comma-separated or repeated): `firing` (an alert of the run is firing), "
        "`active` (data within the sidecar's `run_active_s`, 600 s by default), `idle`."))] = None,
    since: Annotated[datetime | None, Query(description=(
        "Runs with data at or after this time (their last update): ISO 8601 (no zone: UTC) or Unix time "
        "in seconds or milliseconds (Grafana's `${__from}`)."))] = None,
    until: Annotated[datetime | None, Query(description=(
        "Runs with data at or before this time (first seen); as `since`."))] = None,
    order: Annotated[Literal["last_update", "run_id"], Query(description=(
        "`last_update`: most recently updated first (ties by run id); `run_id`: by id, A to Z, an order "
        "that data arriving meanwhile does not change (for walking every run)."))] = "last_update",
    cursor: Annotated[str | None, Query(max_length=1024, description=(
        "Where the previous page ended: the `cursor` of its `Link: rel=\"next\"` header."))] = None,
) -> RunQuery:
    if q is not None and "\x00" in q:
        raise bad_param("q", "cannot contain NUL (U+0000)")
    if cursor is not None:
        try:
            decode_cursor(cursor, order)
        except CursorError as exc:
            raise bad_param("cursor", str(exc)) from None
    start, end = _epoch(since), _epoch(until)
    if start is not None and end is not None and start > end:
        raise bad_param("since", "must not be after until")
    return RunQuery(q=q or None, status=_statuses(status), since=start, until=end, order=order, cursor=cursor)


RunFilters = Annotated[RunQuery, Depends(run_filters)]


def page_headers(request: Request, total: int | None, next_cursor: str | None) -> dict[str, str]:
    """`X-Total-Count` and, where there is a next page, `Link: <?...&cursor=...>; rel="next"` (the
    request's own parameters with the cursor of the next page instead of its cursor or offset)."""
    headers = {} if total is None else {TOTAL_HEADER: str(total)}
    if next_cursor is not None:
        params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("cursor", "offset")]
        headers["Link"] = f'<?{urlencode([*params, ("cursor", next_cursor)])}>; rel="next"'
    return headers
