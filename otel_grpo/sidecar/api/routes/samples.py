"""`/api/runs/{run_id}/samples` (JSON, CSV, JSONL): the sample table of a run."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import StreamingResponse

from ...schemas import Message, SampleRow
from ...store import SampleQuery
from ...store._queries import COLUMN_RE, SAMPLE_TEXT_COLUMNS
from .._stream_cut import cut_on_store_error
from ..deps import FastJSON, RunId, StoreDep, bad_param, json_response, not_found_run, require_read, step_param
from ..listing import TOTAL_HEADER

router = APIRouter(prefix="/api/runs/{run_id:path}", tags=["samples"], dependencies=[Depends(require_read)])
_404 = {404: {"model": Message, "description": "Unknown run."}}
_EXPORT_MAX = 1_000_000


async def sample_query(  # async: pure validation, no reason for a thread-pool hop (see deps)
    step: Annotated[int | None, step_param("One step; default: the latest step with samples (unless a range is given).")] = None,
    step_min: Annotated[int | None, step_param("First step (inclusive).")] = None,
    step_max: Annotated[int | None, step_param("Last step (inclusive).")] = None,
    reward_min: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    reward_max: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    q: Annotated[str | None, Query(max_length=1000, description="Substring of prompt or completion (case-insensitive for ASCII); "
                                   "a NUL character is a 422 (PostgreSQL text cannot hold one).")] = None,
    filter_col: Annotated[str | None, Query(max_length=128, description=(
        "Keep rows whose number in this column (a numeric core column such as `sample_index`, or a dynamic one "
        "such as `kl_ref_mean`) is within [`filter_min`, `filter_max`]; a row without a number there is left "
        "out. Both bounds open: rows that have a number there."))] = None,
    filter_min: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    filter_max: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    order_by: Annotated[str | None, Query(max_length=128, description=(
        "Any column: step, reward, advantage, completion_length, sample_index, prompt, completion, time, attempt, "
        "or a dynamic one such as `reward.format`. A row without a value there (null, or a dynamic column it lacks) comes last, "
        "`desc` or not; equal values keep the order the rows were stored in (reversed by `desc`), so pages neither "
        "repeat nor skip a row. Text sorts code point by code point (`Z` before `a` before `é`). A dynamic column "
        "may hold values of several kinds; ascending: booleans (false, true), then numbers by value (as 64-bit "
        "floats: 3 and 3.0 are equal), then strings by text (`\"10\"` before `\"9\"`), then arrays and objects "
        "by their JSON text; `desc` reverses that. SQLite and PostgreSQL give the same order."))] = None,
    desc: bool = False,
    limit: Annotated[int, Query(ge=1, le=_EXPORT_MAX)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> SampleQuery:
    if step_min is not None and step_max is not None and step_min > step_max:
        raise bad_param("step_min", "must not exceed step_max")
    if reward_min is not None and reward_max is not None and reward_min > reward_max:
        raise bad_param("reward_min", "must not exceed reward_max")
    if q is not None and "\x00" in q:  # SQLite's LIKE ended the pattern there and matched every row
        raise bad_param("q", "cannot contain NUL (U+0000)")
    if order_by is not None and not COLUMN_RE.match(order_by):
        raise bad_param("order_by", 'a column to sort by cannot contain " or control characters')
    if filter_col is None and (filter_min is not None or filter_max is not None):
        raise bad_param("filter_col", "name the column that filter_min and filter_max bound")
    if filter_col is not None and (filter_col in SAMPLE_TEXT_COLUMNS or not COLUMN_RE.match(filter_col)):
        raise bad_param("filter_col", "must be a column of numbers (not run_id, prompt, completion or time; "
                                      'no " or control characters)')
    if filter_min is not None and filter_max is not None and filter_min > filter_max:
        raise bad_param("filter_min", "must not exceed filter_max")
    return SampleQuery(step=step, step_min=step_min, step_max=step_max, reward_min=reward_min,
                       reward_max=reward_max, q=q, filter_col=filter_col, filter_min=filter_min, filter_max=filter_max,
                       order_by=order_by, desc=desc, limit=limit, offset=offset)


QueryDep = Annotated[SampleQuery, Depends(sample_query)]


PAGE_MAX = 10_000
"""Rows of one JSON page at most (`limit`); exports go to _EXPORT_MAX."""
CUT_COLUMN = "texts_cut"
"""The column of a page's row that names its cut texts and their full lengths (`text_chars`)."""


ENVELOPE_TEXTS = frozenset({"run_id", "time", "selection", "kept_because"})
"""A sample's text columns that say whose it is, when, and why it was kept (the store's `run_id` and `time`, the
telemetry's bookkeeping: `telemetry._samples`), not what the model read or wrote: `text_chars` never cuts them
(a cut `time` no longer read as a time)."""


def cut_texts(rows: list[dict], chars: int) -> list[dict]:
    """`rows` with every text of the sample (`prompt`, `completion`, any other text column but `ENVELOPE_TEXTS`)
    longer than `chars` characters cut to its first `chars`, and `texts_cut` naming those columns with their full
    lengths: a page's size is then bounded by its rows, whatever text a run stores (a long-context run raises the
    telemetry's `max_text_chars`)."""
    for row in rows:
        cut = {k: len(v) for k, v in row.items() if isinstance(v, str) and len(v) > chars and k not in ENVELOPE_TEXTS}
        for k in cut:
            row[k] = row[k][:chars]
        if cut:
            row[CUT_COLUMN] = cut
    return rows


_PAGED = {**_404, 200: {"headers": {TOTAL_HEADER: {
    "description": "Rows the filters match on all pages (`limit` and `offset` aside).", "schema": {"type": "integer"}}}}}


@router.get("/samples", response_model=list[SampleRow], response_class=FastJSON, responses=_PAGED)
def list_samples(run_id: RunId, store: StoreDep, query: QueryDep,
                 text_chars: Annotated[int | None, Query(ge=16, le=_EXPORT_MAX, description=(
                     "Cut every text of a sample (prompt, completion and other text columns; never `run_id`, "
                     "`time`, `selection` or `kept_because`) longer than this many characters to its first ones; "
                     "the row's `texts_cut` names those columns with their full lengths (`{\"completion\": 200000}`). "
                     "The page's tables ask for this and read one sample whole (`filter_col=sample_index`) where it "
                     "is shown all. Default: texts whole."))] = None) -> Response:
    """Samples as flat rows (every event attribute is a column), filtered and ordered; at most 10,000 a page.
    `X-Total-Count` says how many rows match on all pages (a step of 1,024 rows read 500 at a time).
    `text_chars` bounds each text of a sample (a long-context run's completions), so the page is bounded by its rows.

    Streamed as the exports are: the server holds a few hundred rows at a time whatever `limit` is,
    so many concurrent large pages do not add up to their whole size in memory."""
    if query.limit > PAGE_MAX:
        raise bad_param("limit", f"must be at most {PAGE_MAX} here")
    if not store.run_exists(run_id):
        raise not_found_run(run_id)
    page = store.sample_page(run_id, query)  # the ids are read now: a store error is still a 503
    chunks = page.chunks if text_chars is None else (cut_texts(rows, text_chars) for rows in page.chunks)
    return json_response((b",".join(map(orjson.dumps, rows)) for rows in chunks), {TOTAL_HEADER: str(page.total)})


# OWASP "CSV injection": a spreadsheet runs a cell that starts with one of these as a formula,
# also after leading blanks or line breaks, and in their full-width forms (＝＋－＠), which
# spreadsheets in East Asian locales normalise. Such a text cell (header cells included) is
# written with a leading ' so it shows as text; numbers stay numbers (a reward stays -1.5).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value) -> object:
    """One CSV cell: JSON for lists and objects, formula-looking text neutralised."""
    if isinstance(value, (list, dict)):
        value = json.dumps(value)
    if isinstance(value, str) and (value.startswith(_FORMULA_START) or value.lstrip().startswith(_FORMULA_START)):
        return "'" + value
    return value


def _checked(store, run_id: str, query: SampleQuery) -> None:
    if query.limit > _EXPORT_MAX:
        raise bad_param("limit", f"must be at most {_EXPORT_MAX} here")
    if not store.run_exists(run_id):
        raise not_found_run(run_id)


_BATCH_ROWS = 256  # rows per chunk: each chunk of a sync generator costs a thread-pool hop


def _batched(lines: Iterator[bytes]) -> Iterator[bytes]:
    batch: list[bytes] = []
    for line in lines:
        batch.append(line)
        if len(batch) == _BATCH_ROWS:
            yield b"".join(batch)
            batch = []
    if batch:
        yield b"".join(batch)


def _csv_lines(columns: list[str], rows: Iterator[dict]) -> Iterator[bytes]:
    buf = io.StringIO()
    writer = csv.writer(buf)

    def line(cells) -> bytes:
        buf.seek(0)
        buf.truncate()
        writer.writerow(cells)
        return buf.getvalue().encode()

    yield line([csv_cell(c) for c in columns])
    for row in rows:
        yield line([csv_cell(row.get(c)) for c in columns])


def _jsonl_lines(rows: Iterator[dict]) -> Iterator[bytes]:
    for row in rows:
        yield orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)


# Both exports stream: a few hundred rows in memory at a time, whatever the size (an export
# built in memory grew with the run: benchmarks/README.md, costs). Their first store reads run
# before the response starts: an error there (a timeout, a lost database) is the API's 503 or
# 500, where inside the stream it came after a 200 and cut the download short.
@router.get("/samples.csv", response_class=StreamingResponse, responses={**_404, 200: {"content": {"text/csv": {}}}})
def export_csv(run_id: RunId, store: StoreDep, query: QueryDep) -> StreamingResponse:
    """The same rows as CSV; the header is the union of all columns. Text cells that a spreadsheet
    would take for a formula (`=`, `+`, `-`, `@`, tab, CR first, after any blanks or line breaks,
    full-width forms included) get a leading `'`."""
    _checked(store, run_id, query)
    columns, rows = store.sample_columns(run_id, query), store.iter_samples(run_id, query)
    return StreamingResponse(cut_on_store_error(_batched(_csv_lines(columns, rows))),
                             media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": 'attachment; filename="samples.csv"'})


@router.get("/samples.jsonl", response_class=StreamingResponse,
            responses={**_404, 200: {"content": {"application/x-ndjson": {}}}})
def export_jsonl(run_id: RunId, store: StoreDep, query: QueryDep) -> StreamingResponse:
    """The same rows as JSON Lines, one sample per line."""
    _checked(store, run_id, query)
    return StreamingResponse(cut_on_store_error(_batched(_jsonl_lines(store.iter_samples(run_id, query)))),
                             media_type="application/x-ndjson")


@router.get("/sample-steps", response_model=list[int], response_class=FastJSON, responses=_404)
def list_sample_steps(run_id: RunId, store: StoreDep,
                      limit: Annotated[int, Query(ge=1, le=100_000)] = 5000) -> FastJSON:
    """Steps that have samples, newest first (the web page's step picker)."""
    if not store.run_exists(run_id):
        raise not_found_run(run_id)
    return FastJSON(store.sample_steps(run_id, limit))
