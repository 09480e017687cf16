"""Runs, listed page by page: filters, a stable order, cursors; one run by its key.

    page = store.run_page(RunQuery(q="exp", status=("active",), limit=100))
    page.runs, page.total, page.next_cursor
    store.run_page(RunQuery(q="exp", status=("active",), limit=100, cursor=page.next_cursor))

A page costs what it asks for, not the number of runs: the default order (most recently updated
first, ties by run id, descending) walks the `(last_update, run_id)` index from its end, and a
cursor names the last row given, so the next page starts there (no rows skipped over, as an
offset skips). `run_id` order walks the primary key. Filters on the order's columns (`since`,
`active`, `idle`) narrow the walk; a name substring or `firing` is checked on the rows walked.
The total is one count over the same filters.

A run's status: `firing` where an alert of the run fires (`/api/alerts`), else `active` where it
sent data within `active_s` seconds, else `idle`. Its summary: the reward mean and KL at the latest
step that logged each, looked for in its last few steps (`_with_latest`), so a page of runs says
which are learning without opening each.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ._dialect import Dialect

RUN_STATUSES = ("firing", "active", "idle")
RUN_ORDERS = ("last_update", "run_id")
ACTIVE_S = 600.0
"""A run that sent data within this many seconds is `active` (the sidecar's `run_active_s`)."""

_FIRING = "EXISTS (SELECT 1 FROM alerts WHERE alerts.run_id = runs.run_id AND alerts.status = 'firing')"
_COLUMNS = ("run_id, service_name, model, host, first_step, last_step, first_seen, last_update, sample_count, "
            f"{_FIRING} AS firing")
_ORDER_SQL = {"last_update": "last_update DESC, run_id DESC", "run_id": "run_id"}
LATEST = {"latest_reward": ("reward",), "latest_kl": ("kl", "trl_kl")}
"""A run's summary: field -> the stat keys it reads, first logged first (TRL's logged `kl` is `trl_kl`)."""
LATEST_STEPS = 8
"""The summary looks this many latest steps back for each value: a step may log neither (an evaluation, a
second iteration on one generation batch, a statistic absent that step), and a run's page must not
walk a long run's history to say what it is doing now."""


# Each run's last LATEST_STEPS steps, for a page of runs in one statement (a statement per run costs a round
# trip each, so a page of many runs on a distant database took as many round trips). Per run, the lowest of
# those steps is a backward walk of the (run_id, step) key; the steps from it on are a range of that key.
_LATEST_SQL = """
SELECT s.run_id, s.metrics FROM steps AS s
JOIN (SELECT r.run_id, (SELECT step FROM steps WHERE run_id = r.run_id ORDER BY step DESC LIMIT 1 OFFSET ?) AS low
      FROM runs AS r WHERE r.run_id IN ({ids})) AS t
  ON s.run_id = t.run_id AND (t.low IS NULL OR s.step >= t.low)
ORDER BY s.run_id, s.step DESC
"""


def _with_latest(conn, runs: list[dict]) -> list[dict]:
    """`runs` with their summary (`LATEST`): each value at the latest of the run's last `LATEST_STEPS` steps
    that logged it, None where none did or it is not finite. One statement for the page: per run a backward
    walk of the (run_id, step) key and a parse of at most that many steps' values."""
    if not runs:
        return runs
    sql = _LATEST_SQL.format(ids=", ".join("?" * len(runs)))
    by_run: dict[str, list[dict]] = {}
    for run_id, metrics in conn.execute(sql, (LATEST_STEPS - 1, *(run["run_id"] for run in runs))).fetchall():
        by_run.setdefault(run_id, []).append(json.loads(metrics))
    for run in runs:
        steps = by_run.get(run["run_id"], [])
        for field, keys in LATEST.items():
            # a step that logged it non-finite (stored as null) is the latest that logged it: a diverged step
            # shows as null, not as the last finite value before it
            value = next((m[k] for m in steps for k in keys if k in m), None)
            run[field] = value if isinstance(value, (int, float)) and math.isfinite(value) else None
    return runs


def iso(ts: float | None) -> str | None:
    """Seconds since the epoch as ISO 8601 UTC text (`Z`); None for None."""
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def like_pattern(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching `text` anywhere, its wildcards taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class CursorError(ValueError):
    """A cursor this listing did not give (another order, altered, or not a cursor at all)."""


@dataclass(kw_only=True)
class RunQuery:
    """Which runs, in which order, which page of them."""

    ids: list[str] | None = None
    """Only these runs (a selection such as `a|b`); None: every run."""
    q: str | None = None
    """Case-insensitive (ASCII) substring of the run id."""
    status: tuple[str, ...] = ()
    """Any of RUN_STATUSES; empty: every status."""
    since: float | None = None
    """Runs with data at or after this time (their last update), seconds since the epoch."""
    until: float | None = None
    """Runs with data at or before this time (first seen), seconds since the epoch."""
    order: str = "last_update"
    """`last_update`: most recently updated first; `run_id`: by run id, A to Z."""
    limit: int | None = None
    """Runs per page; None: all."""
    offset: int = 0
    cursor: str | None = None
    """Where the previous page ended (its `next_cursor`): the page after it."""
    active_s: float = ACTIVE_S
    now: float | None = None
    """The time `active_s` counts back from; None: now."""
    latest: bool = False
    """With each run's summary (`LATEST`): the runs list's; the readers of runs' steps leave it out."""

    def __post_init__(self) -> None:
        if self.order not in RUN_ORDERS:
            raise ValueError(f"order must be one of {', '.join(RUN_ORDERS)}")
        unknown = set(self.status) - set(RUN_STATUSES)
        if unknown:
            raise ValueError(f"status must be among {', '.join(RUN_STATUSES)}, not {', '.join(sorted(unknown))}")


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[dict]
    total: int | None
    """Runs matching the filters, on every page; None where not counted."""
    next_cursor: str | None
    """The cursor of the next page; None on the last."""


def encode_cursor(order: str, last_update: float, run_id: str) -> str:
    key = [order, run_id] if order == "run_id" else [order, last_update, run_id]
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(text: str, order: str) -> tuple:
    """The sort key a cursor names, checked against `order`; CursorError when it is no cursor of it."""
    try:
        key = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        raise CursorError("not a cursor this listing gave") from None
    shape = [str] if order == "run_id" else [(int, float), str]
    if (not isinstance(key, list) or len(key) != len(shape) + 1 or key[0] != order
            or not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(key[1:], shape))):
        raise CursorError(f"not a cursor of this listing (order={order})")
    if not all(map(_bindable, key[1:])):
        raise CursorError("not a cursor this listing gave (a value no database column holds)")
    return tuple(key[1:])


def _bindable(value: int | float | str) -> bool:
    """Whether both databases take `value` as a parameter: the right types alone let through an integer
    past 64 bits (SQLite: OverflowError), an infinite float (JSON's 1e999) and a lone surrogate (no
    UTF-8 for it: UnicodeEncodeError on both), each a 500 before any SQL ran."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return math.isfinite(value)


def _filters(dialect: Dialect, query: RunQuery, now: float) -> tuple[list[str], list]:
    where: list[str] = []
    params: list = []
    if query.ids is not None:
        where.append(f"run_id IN ({', '.join('?' * len(query.ids))})" if query.ids else "1 = 0")
        params += query.ids
    if query.q:
        where.append(f"run_id {dialect.like} ? ESCAPE '\\'")
        params.append(like_pattern(query.q))
    if query.since is not None:
        where.append("last_update >= ?")
        params.append(query.since)
    if query.until is not None:
        where.append("first_seen <= ?")
        params.append(query.until)
    if query.status and set(query.status) != set(RUN_STATUSES):
        cutoff = now - query.active_s
        either = []
        for status in dict.fromkeys(query.status):
            if status == "firing":
                either.append(_FIRING)
            else:
                either.append(f"(last_update {'>=' if status == 'active' else '<'} ? AND NOT {_FIRING})")
                params.append(cutoff)
        where.append("(" + " OR ".join(either) + ")")
    return where, params


def _row(r, cutoff: float) -> dict:
    status = "firing" if r[9] else "active" if r[7] >= cutoff else "idle"
    return {"run_id": r[0], "service_name": r[1], "model": r[2], "host": r[3], "first_step": r[4],
            "last_step": r[5], "first_seen": iso(r[6]), "last_update": iso(r[7]), "sample_count": r[8],
            "status": status}


class RunReads:
    """Mixed into both stores (through `_queries.Reads`): the runs' reads."""

    dialect: Dialect

    def read(self):  # pragma: no cover - provided by each store
        raise NotImplementedError

    def run_page(self, query: RunQuery, count: bool = True) -> RunPage:
        """One page of the runs `query` selects, in its order; `count`: with the total.
        Raises CursorError for a cursor this listing did not give."""
        now = time.time() if query.now is None else query.now
        where, params = _filters(self.dialect, query, now)
        total = None
        page_where, page_params = list(where), list(params)
        if query.cursor is not None:
            key = decode_cursor(query.cursor, query.order)
            if query.order == "run_id":
                page_where.append("run_id > ?")
            else:  # the row value walks the (last_update, run_id) index from where the last page ended
                page_where.append("(last_update, run_id) < (?, ?)")
            page_params += key
        sql = (f"SELECT {_COLUMNS} FROM runs" + (" WHERE " + " AND ".join(page_where) if page_where else "")
               + f" ORDER BY {_ORDER_SQL[query.order]}")
        if query.limit is not None:
            sql += " LIMIT ? OFFSET ?"
            page_params += [query.limit + 1, query.offset]  # one more: is there a next page?
        elif query.offset:
            raise ValueError("an offset needs a limit")
        with self.read() as conn:
            rows = conn.execute(sql, page_params).fetchall()
            more = query.limit is not None and len(rows) > query.limit
            rows = rows[:query.limit] if more else rows
            runs = [_row(r, now - query.active_s) for r in rows]
            if query.latest:
                _with_latest(conn, runs)
            if count and not more and query.cursor is None and (rows or not query.offset):
                total = query.offset + len(rows)  # the last page from the first run: no count needed
            elif count:
                total = conn.execute("SELECT count(*) FROM runs" + (" WHERE " + " AND ".join(where) if where else ""),
                                     params).fetchone()[0]
        cursor = encode_cursor(query.order, rows[-1][7], rows[-1][0]) if more else None
        return RunPage(runs, total, cursor)

    def runs(self, query: RunQuery | None = None) -> list[dict]:
        """The runs `query` selects (default: every run, most recently updated first)."""
        return self.run_page(query or RunQuery(), count=False).runs

    def run(self, run_id: str, active_s: float = ACTIVE_S, now: float | None = None) -> dict | None:
        """One run by its id (a primary-key read), as `runs` gives it; None if unknown."""
        now = time.time() if now is None else now
        with self.read() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            return None if row is None else _with_latest(conn, [_row(row, now - active_s)])[0]

    def run_exists(self, run_id: str) -> bool:
        with self.read() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None
