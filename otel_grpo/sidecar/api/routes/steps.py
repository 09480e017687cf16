"""`/api/steps`: the per-step history of several runs at once (Grafana's step-aligned run comparison)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from ...store._queries import selected_run_ids
from ..deps import StoreDep, bad_param, points_param, require_read, step_param
from ..._columns import stat_keys
from .runs import split_list

router = APIRouter(prefix="/api/steps", tags=["runs"], dependencies=[Depends(require_read)])


@router.get("", response_class=Response, responses={200: {"content": {"application/json": {}}}})
def list_steps_of_runs(
    store: StoreDep,
    run_id: Annotated[str, Query(description="One run, several as `a|b` (Grafana's `${run_id:pipe}`), or `.*` "
                                             "for every run; unknown runs are left out.")],
    metrics: Annotated[list[str] | None, Query(description="Columns to return (comma-separated or repeated); default: all.")] = None,
    step_min: Annotated[int | None, step_param("First step (inclusive).")] = None,
    step_max: Annotated[int | None, step_param("Last step (inclusive).")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="Steps per run.")] = 10_000,
    points: Annotated[int | None, points_param()] = None,
) -> Response:
    """The rows of `/api/runs/{run_id}/steps` (columns named by the catalog) of every selected run, run after run, each ordered by step:
    one table whose `run_id` column tells the runs apart, so one panel can overlay them by step.
    `points`: each run's rows downsampled as there (at most N rows per run)."""
    if step_min is not None and step_max is not None and step_min > step_max:
        raise bad_param("step_min", "must not exceed step_max")
    ids = selected_run_ids(run_id)
    runs = sorted(r["run_id"] for r in store.runs()) if ids is None else [r for r in ids if store.run_exists(r)]
    selected = split_list(metrics)
    parts = [store.steps_json(r, stat_keys(selected), step_min, step_max, limit, 0, points=points)[1:-1]
             for r in runs]  # arrays' insides
    return Response(b"[" + b",".join(p for p in parts if p) + b"]", media_type="application/json")
