"""`/api/steps`: the per-step history of several runs at once (Grafana's step-aligned run comparison)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from ..._columns import stat_keys
from ...store._queries import selected_run_ids
from ..deps import SettingsDep, StoreDep, bad_param, json_response, points_param, require_read, step_param
from ..listing import TOTAL_HEADER, TRUNCATED_HEADER, RunFilters, page_headers
from .runs import split_list

router = APIRouter(prefix="/api/steps", tags=["runs"], dependencies=[Depends(require_read)])

MAX_RUNS = 100
"""Runs per response by default (`max_runs`)."""
MAX_RUNS_LIMIT = 1000
MAX_ROWS = 1_000_000
"""Rows per response at most: runs x (`points`, else `limit`) stays within it."""

_RESPONSES = {200: {"content": {"application/json": {}}, "headers": {
    TOTAL_HEADER: {"description": "Runs the selection and filters match.", "schema": {"type": "integer"}},
    TRUNCATED_HEADER: {"description": "`true` where the response holds fewer runs than matched (`max_runs`, "
                                      "`MAX_ROWS`); `Link` then gives the rest.", "schema": {"type": "string"}},
    "Link": {"description": 'The next runs, where there are more: `<?...&cursor=...>; rel="next"`.',
             "schema": {"type": "string"}}}}}


def runs_cap(max_runs: int, limit: int, points: int | None) -> int:
    """The runs one response may hold: `max_runs`, fewer where their rows would pass MAX_ROWS."""
    per_run = limit if points is None else min(limit, points)
    return max(1, min(max_runs, MAX_ROWS // per_run))


@router.get("", response_class=Response, responses=_RESPONSES)
def list_steps_of_runs(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    filters: RunFilters,
    run_id: Annotated[str, Query(description="One run, several as `a|b` (Grafana's `${run_id:pipe}`), or `.*` "
                                             "for every run; unknown runs are left out.")],
    metrics: Annotated[list[str] | None, Query(description="Columns to return (comma-separated or repeated); default: all.")] = None,
    step_min: Annotated[int | None, step_param("First step (inclusive).")] = None,
    step_max: Annotated[int | None, step_param("Last step (inclusive).")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="Steps per run.")] = 10_000,
    points: Annotated[int | None, points_param()] = None,
    max_runs: Annotated[int, Query(ge=1, le=MAX_RUNS_LIMIT, description=(
        f"Runs per response (default {MAX_RUNS}); fewer where runs x (`points`, else `limit`) would pass "
        f"{MAX_ROWS:,} rows. The rest: `X-Truncated: true` and the `Link` of the next runs."))] = MAX_RUNS,
) -> Response:
    """The rows of `/api/runs/{run_id}/steps` (columns named by the catalog) of the selected runs, run after run,
    each ordered by step: one table whose `run_id` column tells the runs apart, so one panel can overlay them by step.
    `points`: each run's rows downsampled as there (at most N rows per run).

    The runs are those of `/api/runs` with the same filters (`q`, `status`, `since`, `until`; in its
    `order`, most recently updated first by default) within `run_id`, at most `max_runs` of them:
    a request costs the runs it returns, however many exist. `X-Total-Count` says how many matched;
    where that is more than were returned, `X-Truncated: true` and `Link: <...>; rel="next"` (a
    `cursor`) give the next runs.

    The runs' steps come from the step histories the sidecar holds, brought up to date in a bounded
    number of database statements whatever the number of runs (not one or two a run: each a round
    trip to the database): one reads every run's version, then one per chunk of the runs that are
    behind (runs whose steps written since their last read come to about 10,000; a run with more
    alone). Streamed where it is long: the server holds one chunk's new steps and one piece of rows
    at a time.
    """
    if step_min is not None and step_max is not None and step_min > step_max:
        raise bad_param("step_min", "must not exceed step_max")
    filters.ids = selected_run_ids(run_id)
    filters.limit, filters.active_s = runs_cap(max_runs, limit, points), settings.run_active_s
    page = store.run_page(filters)
    headers = page_headers(request, page.total, page.next_cursor)
    if page.next_cursor is not None:
        headers[TRUNCATED_HEADER] = "true"
    runs = [r["run_id"] for r in page.runs]
    pieces = store.runs_steps_pieces(runs, stat_keys(split_list(metrics)), step_min, step_max, limit, points=points)
    # The runs' versions and the first chunk of their steps are read now (a store error is still a 503);
    # past STREAM_FLUSH_BYTES, the other chunks as the response goes out.
    return json_response(pieces, headers)
