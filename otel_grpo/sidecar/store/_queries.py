"""Read queries. Rows come back flat (one dict per row) for the API and Grafana's Infinity."""

from __future__ import annotations

import itertools
import json
import math
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from otel_grpo.catalog import CLOCK_OFFSET_ANNOTATION
from otel_grpo.catalog.spans import ALL_RUNS

from ._dialect import Dialect
from ._runs import RunReads, iso, like_pattern
from ._step_reads import StepReads

SAMPLE_CORE_COLUMNS = ("run_id", "step", "sample_index", "reward", "advantage", "completion_length",
                       "prompt", "completion", "time", "attempt")
_SAMPLE_SELECT = "SELECT id, " + ", ".join(SAMPLE_CORE_COLUMNS) + ", data FROM samples"
# Dynamic sample columns are JSON keys, addressed as the quoted path `$."<key>"` (a bound parameter):
# any key works there but one holding `"` (SQLite's path syntax has no escape) or control characters.
COLUMN_RE = re.compile(r'^[^"\x00-\x1f]{1,128}$')
SAMPLE_TEXT_COLUMNS = ("run_id", "prompt", "completion", "time")
"""Core columns that hold text: no range filter applies to them."""


def selected_run_ids(run_id: str) -> list[str] | None:
    """The run ids a selection names: None for every run (`.*`), else one run or Grafana's multi-run
    `a|b` (the whole value also counts as one id: a run id may hold `|`)."""
    return None if run_id == ALL_RUNS else list(dict.fromkeys([run_id, *run_id.split("|")]))


class SamplePage(NamedTuple):
    total: int
    """Rows the query matches on all its pages."""
    chunks: Iterator[list[dict]]
    """This page's rows, a chunk at a time (`Reads.sample_chunks`)."""


@dataclass(kw_only=True)
class SampleQuery:
    """Filters and ordering for samples; `step=None` with no range means the latest step."""

    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    q: str | None = None
    """Case-insensitive substring of the prompt or completion."""
    filter_col: str | None = None
    """A numeric column (core or dynamic) whose value must be within [filter_min, filter_max] (either
    bound may be None); a row without a number there is left out."""
    filter_min: float | None = None
    filter_max: float | None = None
    order_by: str | None = None
    desc: bool = False
    limit: int = 100
    offset: int = 0


def _order_sql(column: str | None, desc: bool, byte_order: str) -> str:
    """`ORDER BY` terms for no column or a core one (a dynamic one: `Dialect.json_ordered_ids`)."""
    d = " DESC" if desc else ""
    if column is None:
        return f"step{d}, sample_index{d}, id{d}"
    # Text in code point order on both databases, as a dynamic column's (no index serves either text column).
    expr = f"{column} COLLATE {byte_order}" if column in ("prompt", "completion") else column
    # NULLS LAST both ways; id breaks ties stably. This form still walks (run_id, reward) in order.
    return f"{expr}{d or ' ASC'} NULLS LAST, id{d}"


# RFC 3339 as Alertmanager writes it (Go's RFC3339Nano: up to 9 fraction digits, `Z` or an offset).
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", re.IGNORECASE)


def _epoch(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time; None if it is not one."""
    m = _RFC3339.fullmatch(text.strip())
    if m is None:
        return None
    zone = "+00:00" if m[3].upper() == "Z" else m[3]
    try:
        return datetime.fromisoformat(f"{m[1]}.{(m[2] or '0')[:6].ljust(6, '0')}{zone}").timestamp()
    except ValueError:
        return None


MAX_CLOCK_OFFSET_S = 100 * 365.25 * 86400
"""The largest clock offset (either way) an alert's annotation may give, 100 years: a trainer whose clock was reset
to the epoch is some 56 years off Prometheus's. A larger one is no clock's offset but a broken annotation (anyone
who can post alerts writes them), and `1e306` overflowed the arithmetic of the alert's step: every read of the
alerts failed for as long as that alert was stored."""


def _clock_offset(annotations: dict) -> float:
    """The alert's run clock offset (`catalog.CLOCK_OFFSET_ANNOTATION`, from the alert rules): Prometheus's clock
    minus the trainer's, in seconds; 0 (the two clocks taken to agree, as before the rules gave it) where the
    annotation is missing (older rules), empty (a run that exports no clock), not a number, or no plausible
    offset (beyond `MAX_CLOCK_OFFSET_S`, infinite, NaN)."""
    try:
        offset = float(annotations.get(CLOCK_OFFSET_ANNOTATION, ""))
    except ValueError:
        return 0.0
    return offset if abs(offset) <= MAX_CLOCK_OFFSET_S else 0.0  # False for NaN too


def _alert_step(conn, run_id: str, starts_at: str, offset: float) -> int | None:
    """The step an alert belongs to: the run's last step to end at or before the alert started (its data
    made the rule fire); the run's first step where none had ended yet; None without steps
    or for a start time that is not RFC 3339. `starts_at` is on Prometheus's clock, the steps' ends on the
    trainer's: `offset` (`_clock_offset`) moves the start onto the trainer's clock."""
    when = _epoch(starts_at)
    if when is None:
        return None
    when -= offset
    # To the millisecond, as the API writes both times: a step's (rounded) not after the alert's.
    bound = (math.floor(when * 1000) + 0.5) / 1000
    row = conn.execute("SELECT step FROM steps WHERE run_id = ? AND end_time < ? ORDER BY end_time DESC, step DESC "
                       "LIMIT 1", (run_id, bound)).fetchone()
    if row is None:
        row = conn.execute("SELECT min(step) FROM steps WHERE run_id = ?", (run_id,)).fetchone()
    return row[0]


def _sample_row(row) -> dict:
    out = dict(zip(SAMPLE_CORE_COLUMNS, row[1:-1]))
    out["time"] = iso(out["time"])
    extra = json.loads(row[-1])
    for key, value in extra.items():
        out.setdefault(key, value)
    return out


SAMPLE_CHUNK_ROWS = 500
"""Sample rows read and written at a time by a streamed read (an export, a JSON page): what it holds."""


class Reads(StepReads, RunReads):
    """Mixed into both stores: every query runs on a connection borrowed from the read pool.

    No read holds a transaction open for longer than one chunk of rows: a long one kept SQLite
    from recycling its WAL (it grew for as long as an export's client had stopped reading).
    """

    dialect: Dialect

    def read(self):  # pragma: no cover - provided by each store
        """Context manager: a read connection from the pool."""
        raise NotImplementedError

    def sample_steps(self, run_id: str, limit: int = 5000) -> list[int]:
        """Steps that have samples, newest first."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT step FROM samples WHERE run_id = ? ORDER BY step DESC LIMIT ?", (run_id, limit))
            return [r[0] for r in rows]

    def _sample_where(self, conn, run_id: str, query: SampleQuery) -> tuple[str, list] | None:
        """`FROM samples... WHERE ...` of a sample filter and its parameters; None when the run has no
        samples (no latest step to default to)."""
        where, params = ["run_id = ?"], [run_id]
        step = query.step
        if step is None and query.step_min is None and query.step_max is None:
            step = conn.execute("SELECT max(step) FROM samples WHERE run_id = ?", (run_id,)).fetchone()[0]
            if step is None:
                return None
        for clause, value in (("step = ?", step), ("step >= ?", query.step_min), ("step <= ?", query.step_max),
                              ("reward >= ?", query.reward_min), ("reward <= ?", query.reward_max)):
            if value is not None:
                where.append(clause)
                params.append(value)
        if query.filter_col is not None:
            where.append(self._range_sql(query.filter_col, query.filter_min, query.filter_max, params))
        if query.q:
            like = self.dialect.like
            where.append(f"(prompt {like} ? ESCAPE '\\' OR completion {like} ? ESCAPE '\\')")
            params += [like_pattern(query.q)] * 2
        # A step or a closed step range bounds the rows: filter through the (run, step) index and sort
        # those. Left alone, SQLite's planner may walk the whole run in reward order instead (seconds).
        bounded = step is not None or (query.step_min is not None and query.step_max is not None)
        hint = self.dialect.step_index_hint if bounded else ""
        return f"FROM samples{hint} WHERE {' AND '.join(where)}", params

    def _range_sql(self, column: str, low: float | None, high: float | None, params: list) -> str:
        """`column` within [low, high] (a bound of None: open), a number either way; appends its parameters."""
        keys: list = []
        if column in SAMPLE_CORE_COLUMNS:
            expr = column
        else:  # a dynamic column: its value where it is a number, else NULL (never passes a bound)
            expr = self.dialect.json_number(column, keys)
        tests = [(op, v) for op, v in ((">=", low), ("<=", high)) if v is not None]
        if not tests:
            params += keys
            return f"{expr} IS NOT NULL"
        for _, v in tests:
            params += [*keys, v]
        return " AND ".join(f"{expr} {op} ?" for op, _ in tests)

    def _sample_ids_sql(self, conn, run_id: str, query: SampleQuery,
                        where: tuple[str, list] | None = None) -> tuple[str, list] | None:
        """The id query of a sample filter (ordered and paged); None when the run has no samples. `where`: the
        filter's `_sample_where`, where the caller has it already."""
        found = self._sample_where(conn, run_id, query) if where is None else where
        if found is None:
            return None
        source, params = found
        page = [query.limit, query.offset]
        # Two phases: order and page over ids first, so the sorter never carries the long
        # prompt/completion text (they sit last in the row); then fetch the page.
        if query.order_by is not None and query.order_by not in SAMPLE_CORE_COLUMNS:
            # A dynamic column: values of any JSON kind, in one order on both databases (MIXED_ORDER).
            sql, params = self.dialect.json_ordered_ids(query.order_by, query.desc, source, params)
            return f"{sql} LIMIT ? OFFSET ?", [*params, *page]
        order = _order_sql(query.order_by, query.desc, self.dialect.byte_order)
        return f"SELECT id {source} ORDER BY {order} LIMIT ? OFFSET ?", [*params, *page]

    @staticmethod
    def _rows_by_id(conn, ids: list[int]) -> list[dict]:
        rows = []
        for i in range(0, len(ids), 10_000):  # stay under SQLite's bound-variable limit
            chunk = ids[i:i + 10_000]
            rows += conn.execute(f"{_SAMPLE_SELECT} WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
        by_id = {r[0]: r for r in rows}
        return [_sample_row(by_id[i]) for i in ids if i in by_id]

    def samples(self, run_id: str, query: SampleQuery) -> list[dict]:
        with self.read() as conn:
            found = self._sample_ids_sql(conn, run_id, query)
            if found is None:
                return []
            ids = [r[0] for r in conn.execute(*found)]
            return self._rows_by_id(conn, ids) if ids else []

    def iter_samples(self, run_id: str, query: SampleQuery, chunk: int = SAMPLE_CHUNK_ROWS) -> Iterator[dict]:
        """`samples` as an iterator holding `chunk` rows at a time (for exports of any size); its ids and first
        chunk read before it returns, as `sample_chunks`'s."""
        return itertools.chain.from_iterable(self.sample_chunks(run_id, query, chunk))

    def sample_chunks(self, run_id: str, query: SampleQuery, chunk: int = SAMPLE_CHUNK_ROWS) -> Iterator[list[dict]]:
        """The rows of `samples`, `chunk` at a time.

        The ids of the matching rows, ordered and paged, and the first chunk are read before this
        returns (a store error is raised here: a page of up to `chunk` rows fails as a whole, never
        halfway through its response); the ids in one statement, kept as 8-byte integers (8 MB at the
        one-million-row export limit); then each chunk of rows is read as it is taken, on a
        connection borrowed for that chunk alone and given back before the rows are handed on. A
        client that stops reading thus holds no connection, no transaction and no more than one
        chunk. Rows deleted meanwhile (retention) are left out.
        """
        return self._read_page(run_id, query, chunk, counted=False).chunks

    def sample_page(self, run_id: str, query: SampleQuery, chunk: int = SAMPLE_CHUNK_ROWS) -> SamplePage:
        """`sample_chunks`, and how many rows `query` matches on all its pages (`limit` and `offset` aside).

        Both from one read of the filter: with no step given, the run's latest step is looked up once, so
        the total and the rows are of one step though a newer one arrives meanwhile. The count is a
        statement of its own only where the page is full: a page with fewer rows than `limit` (or none past
        the first) says where the matches end.
        """
        return self._read_page(run_id, query, chunk, counted=True)

    def _read_page(self, run_id: str, query: SampleQuery, chunk: int, counted: bool) -> SamplePage:
        """The page's ids and first chunk, and where `counted` its total (else 0: exports need none)."""
        with self.read() as conn:
            where = self._sample_where(conn, run_id, query)
            if where is None:
                return SamplePage(0, iter(()))
            ids = array("q", (r[0] for r in conn.execute(*self._sample_ids_sql(conn, run_id, query, where))))
            total = 0
            if counted and len(ids) < query.limit and (ids or not query.offset):
                total = query.offset + len(ids)
            elif counted:
                total = conn.execute(f"SELECT count(*) {where[0]}", where[1]).fetchone()[0]
            first = self._rows_by_id(conn, ids[:chunk].tolist()) if ids else []
        return SamplePage(total, itertools.chain([first] if first else [], self._chunks_by_id(ids, chunk, chunk)))

    def _chunks_by_id(self, ids: array, chunk: int, start: int) -> Iterator[list[dict]]:
        for i in range(start, len(ids), chunk):
            with self.read() as conn:
                rows = self._rows_by_id(conn, ids[i:i + chunk].tolist())
            yield rows

    def sample_columns(self, run_id: str, query: SampleQuery) -> list[str]:
        """Every column the rows of `query` can have: the core ones, then the keys of their data."""
        with self.read() as conn:
            found = self._sample_ids_sql(conn, run_id, query)
            if found is None:
                return list(SAMPLE_CORE_COLUMNS)
            sql, params = found
            keys = conn.execute(self.dialect.data_keys.format(ids=sql), params)
            return list(dict.fromkeys([*SAMPLE_CORE_COLUMNS, *(k for (k,) in keys)]))

    def alerts(self, run_ids: list[str] | None = None, status: str | None = None, limit: int = 1000) -> list[dict]:
        """Stored alerts, newest first: those whose `run_id` label is one of `run_ids` (None: every alert)."""
        where, params = [], []
        if run_ids is not None:
            where.append(f"run_id IN ({', '.join('?' * len(run_ids))})")
            params += run_ids
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = ("SELECT fingerprint, status, alertname, run_id, labels, annotations, starts_at, ends_at, "
               "generator_url, received_at FROM alerts" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY starts_at DESC LIMIT ?")
        with self.read() as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
            annotations = [json.loads(r[5]) for r in rows]
            offsets = [_clock_offset(a) for a in annotations]
            places = {(r[3], r[6], o) for r, o in zip(rows, offsets) if r[3] is not None}
            steps = {p: _alert_step(conn, *p) for p in places}
        return [{"fingerprint": r[0], "status": r[1], "alertname": r[2], "run_id": r[3],
                 "labels": json.loads(r[4]), "annotations": a, "starts_at": r[6],
                 "ends_at": r[7], "generator_url": r[8], "received_at": iso(r[9]),
                 "step": steps.get((r[3], r[6], o))} for r, a, o in zip(rows, annotations, offsets)]
