"""`/api/runs`: runs, their per-step scalar history and their alerts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from ..._columns import describe, stat_keys
from ...schemas import AlertPublic, Message, RunPublic, StepColumn, StepRow
from ...store._step_reads import ROW_FIELDS
from ..deps import (FastJSON, RunId, SettingsDep, StoreDep, bad_param, json_response, not_found_run, points_param,
                    require_read, step_param)
from ..listing import RUNS_LIMIT_MAX, TOTAL_HEADER, RunFilters, page_headers
from .alerts import LimitParam, StatusParam

router = APIRouter(prefix="/api/runs", tags=["runs"], dependencies=[Depends(require_read)])
_404 = {404: {"model": Message, "description": "Unknown run."}}


_PAGED = {200: {"headers": {
    TOTAL_HEADER: {"description": "Runs matching the filters (on every page).", "schema": {"type": "integer"}},
    "Link": {"description": 'The next page, where there is one: `<?...&cursor=...>; rel="next"` (relative to '
                            "this request's URL).", "schema": {"type": "string"}}}}}


@router.get("", response_model=list[RunPublic], response_class=FastJSON, responses=_PAGED)
def list_runs(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    query: RunFilters,
    limit: Annotated[int, Query(ge=1, le=RUNS_LIMIT_MAX, description="Runs per page.")] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9, description="Runs to skip (a page number's start); "
                                 "`cursor` reads further pages without walking the skipped runs.")] = 0,
) -> FastJSON:
    """A page of runs (id, first and last step, last update, sample count, status), most recently
    updated first, filtered by id substring, status and time range. `X-Total-Count` says how many
    runs match; `Link: <...>; rel="next"` gives the next page (with a `cursor`) where there is one.

    A page costs about its rows whatever the number of runs: the default order and the time range
    walk an index; `cursor` starts where the last page ended (`offset` walks past the skipped runs)."""
    if offset and query.cursor is not None:
        raise bad_param("offset", "give either offset or cursor, not both")
    query.limit, query.offset, query.active_s, query.latest = limit, offset, settings.run_active_s, True
    page = store.run_page(query)
    return FastJSON(page.runs, headers=page_headers(request, page.total, page.next_cursor))


def split_list(values: list[str] | None) -> list[str] | None:
    """`metrics=a,b&metrics=c` -> [a, b, c]; None when not given."""
    if not values:
        return None
    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    return out or None


def row_fields(values: list[str] | None) -> tuple[str, ...]:
    """`fields=step,time` -> ("step", "time") (in the rows' order); a 422 naming `fields` for another name."""
    names = split_list(values)
    if names is None:
        return ROW_FIELDS
    unknown = sorted(set(names) - set(ROW_FIELDS))
    if unknown:
        raise bad_param("fields", f"unknown {', '.join(unknown)}; give any of {', '.join(ROW_FIELDS)}")
    return tuple(f for f in ROW_FIELDS if f in names)


@router.get("/{run_id:path}/steps", response_model=list[StepRow], response_class=FastJSON, responses=_404)
def list_steps(
    run_id: RunId,
    store: StoreDep,
    metrics: Annotated[list[str] | None, Query(description=(
        "Columns to return (comma-separated or repeated), by catalog name (`grpo.kl`, "
        "`grpo.reward_fn.mean/format`); a Prometheus name or catalog key selects the same column. Default: all."))] = None,
    step_min: Annotated[int | None, step_param("First step (inclusive).")] = None,
    step_max: Annotated[int | None, step_param("Last step (inclusive).")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    points: Annotated[int | None, points_param()] = None,
    fields: Annotated[list[str] | None, Query(description=(
        "Which of the row's own fields to write (comma-separated or repeated): `run_id`, `step`, `time`; "
        "default all three. A chart needs only the step: `fields=step` leaves out what every row repeats."))] = None,
) -> FastJSON:
    """Per-step scalar history, one flat row per step, ordered by step.

    Columns: `run_id`, `step`, `time` (or those of them `fields` names), then every scalar of the
    step span under its catalog name (`grpo.kl`, `grpo.reward.mean`, `grpo.reward_fn.mean/<fn>`, ...) and
    `grpo.phase.duration/<phase>` in seconds; `/api/runs/{run_id}/metrics` gives each column's
    Prometheus name beside it (the response's `Link` header, rel="describedby", points there). A scalar the catalog does not know keeps its own name; one named
    `run_id`, `step` or `time` appears as `stat.<name>`.

    A column the step did not log (a metric logged every other step) is missing from its row; a
    value logged non-finite (NaN or infinite: JSON has no such number, and ingest keeps which it
    was nowhere) is `null`. The same with or without `metrics`: a client tells the two apart by
    the key (`"grpo.kl" in row`), and a table reader (pandas, Grafana's Infinity) sees both as empty.

    `points=N` downsamples for a chart: where the page of steps (`step_min`..`step_max`, `limit`,
    `offset`) holds more than N steps, the steps are cut into buckets of consecutive step numbers and
    only these rows come back: each bucket's first and last step and, for every returned column,
    the step where it is lowest and the step where it is highest (M4), and the first step where it
    was not finite (its gap). Every row is a real step
    with its stored values, as without `points`, ordered by step; a spike at a single step is
    always among them. At most N rows, for any number of columns: as many buckets as fit (columns
    often share their extremes); where a single bucket's 2 + 2 x columns steps are more than N, the
    first and last step and the N - 2 steps farthest from their column's median (in median absolute
    deviations). Without `points`, every step of the page.
    """
    if step_min is not None and step_max is not None and step_min > step_max:
        raise bad_param("step_min", "must not exceed step_max")
    if not store.run_exists(run_id):
        raise not_found_run(run_id)
    selected = split_list(metrics)
    pieces = store.steps_pieces(run_id, stat_keys(selected), step_min, step_max, limit, offset, points=points,
                                fields=row_fields(fields))
    # The rows stay flat (Grafana's Infinity reads them as they are); where each column's other
    # names are is said in the response too (RFC 8288 "describedby"; relative to this URL, so
    # right behind a path prefix and for a run id with `/`). Streamed where it is long: a page of
    # 100,000 steps is never held whole.
    return json_response(pieces, headers={"Link": '<metrics>; rel="describedby"'})


@router.get("/{run_id:path}/metrics", response_model=list[StepColumn], response_class=FastJSON, responses=_404)
def list_columns(run_id: RunId, store: StoreDep) -> FastJSON:
    """Every scalar column a step of the run has carried, however long ago (an evaluation logged
    once at step 50 of 100,000 too): each one's name (the column of `/steps`), its Prometheus
    series beside it, its catalog key, unit and description; ordered by name. Kept as steps are
    written, so this costs the run's columns, not its steps."""
    if not store.run_exists(run_id):
        raise not_found_run(run_id)
    return FastJSON(sorted((describe(k) for k in store.metric_keys(run_id)), key=lambda c: c["name"]))


@router.get("/{run_id:path}/alerts", response_model=list[AlertPublic], response_class=FastJSON, responses=_404)
def list_run_alerts(run_id: RunId, store: StoreDep, status: StatusParam = None, limit: LimitParam = 1000) -> FastJSON:
    """The run's stored alerts (those whose `run_id` label is exactly its id), newest first, as `/api/alerts` lists
    them (`status`, `limit` as there). What the run explorer shows: `/api/alerts?run_id=` reads a `|` as Grafana's
    multi-run selection (`a|b`), and gave a run whose id holds one other runs' alerts."""
    if not store.run_exists(run_id):
        raise not_found_run(run_id)
    return FastJSON(store.alerts([run_id], status, limit))


@router.get("/{run_id:path}", response_model=RunPublic, response_class=FastJSON, responses=_404)
def get_run(run_id: RunId, store: StoreDep, settings: SettingsDep) -> FastJSON:
    """One run (read by its key). Declared last: a run id may contain `/`, so this route takes what
    the others leave."""
    run = store.run(run_id, settings.run_active_s)
    if run is None:
        raise not_found_run(run_id)
    return FastJSON(run)
