"""Step reads: runs' per-step rows as JSON, served from the runs' step histories held in memory.

    store.steps_pieces("run-a", ["kl"], points=1000)   # the pieces of a JSON array's inside
    store.steps("run-a")                                # parsed, one dict per step

The history of each run is held by the store's `StepCache` (`_step_series`) and brought up to date
at each read; the rows are written from its columns (`_step_rows`), a piece at a time.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import orjson

from ._dialect import Dialect
from ._downsample import m4_rows
from ._step_series import Series, StepCache

ROW_FIELDS = ("run_id", "step", "time")
"""A step row's own fields, written after its columns; a read may ask for fewer (`fields`)."""


def _row_tail(run_id: str, fields: tuple[str, ...]) -> tuple[bytes, list[str]]:
    """The end of every row (after its columns) as a bytes format, and the fields it takes per row
    (`step`, `time`, in that order): the run id is written into the format, `%` escaped."""
    parts, per_row = [], []
    for name in ROW_FIELDS:
        if name not in fields:
            continue
        if name == "run_id":
            parts.append(b'"run_id":' + orjson.dumps(run_id).replace(b"%", b"%%"))
        else:
            parts.append(b'"%b":%%b' % name.encode())
            per_row.append(name)
    return b",".join(parts) + b"}", per_row


def _step_rows(run_id: str, names: list[str], columns: list, nulls: list, steps: list[int], times: list,
               fields: tuple[str, ...] = ROW_FIELDS) -> bytes:
    """Rows of the columns `names` (each a float64 array aligned with `steps`, NaN: no finite value;
    `nulls`: per column a bool array of the steps that logged it non-finite, or None) then `run_id`,
    `step`, `time` (those of them in `fields`), as the comma-joined JSON objects of `steps_json`'s
    array: a column the step did not log is left out of its row, a non-finite value is null.

    orjson writes the page's numbers at once (NaN as null, floats as the shortest text that reads
    back the same), split into each row's texts; the rows that logged the same columns (nearly every
    row: most steps log every column) share one bytes format of their names (the run id written into
    it), so a row is one split and one format. No dict per row: a long run's chart made ~10,000 of
    them a request, and the garbage collector's full passes over the server's objects they set off
    stalled a request now and then."""
    if not steps:
        return b""
    tail, per_row = _row_tail(run_id, fields)
    own = list(zip(*[orjson.dumps(steps if f == "step" else times)[1:-1].split(b",") for f in per_row]))
    if not names:
        return b",".join([(b"{" + tail) % row for row in own] if own else [(b"{" + tail) % ()] * len(steps))
    matrix = np.column_stack(columns)
    logged = ~np.isnan(matrix)
    for j, null in enumerate(nulls):
        if null is not None:
            logged[:, j] |= null
    texts = orjson.dumps(matrix, option=orjson.OPT_SERIALIZE_NUMPY)[2:-2].split(b"],[")
    cells = [orjson.dumps(name).replace(b"%", b"%%") + b":%b," for name in names]
    own = own or [()] * len(steps)
    shapes: dict[bytes, list[int]] = {}  # the columns a row logged -> its rows
    for i, shape in enumerate(np.packbits(logged, axis=1)):
        shapes.setdefault(shape.tobytes(), []).append(i)
    out = texts
    for at in shapes.values():
        kept = np.flatnonzero(logged[at[0]]).tolist()
        row = b"{" + b"".join([cells[j] for j in kept]) + tail
        if len(kept) == len(names):
            for i in at:
                out[i] = row % (*texts[i].split(b","), *own[i])
        else:
            for i in at:
                values = texts[i].split(b",")
                out[i] = row % (*[values[j] for j in kept], *own[i])
    return b",".join(out)


STEP_PIECE_CELLS = 32768
"""Values (a row's columns and own fields) of the step rows written at a time (`steps_pieces`): what a
streamed step response holds besides the run, about 0.5-1 MB of text however wide the rows are
(counted in rows, a piece of 2,048 steps of 233 scalars was 18 MB)."""


def step_piece_rows(columns: int, fields: int = len(ROW_FIELDS)) -> int:
    """Step rows a piece holds where each row has `columns` columns and `fields` own fields."""
    return max(1, STEP_PIECE_CELLS // (columns + fields))


STEP_READ_ROWS = 10_000
"""Step rows one statement of a read of several runs returns at most: the runs whose held steps are
behind are read together in chunks of about this many rows (`StepReads._chunks`), and a run with more
alone, as a read of that run alone reads it. What a read holds besides its pieces."""
STEP_READ_RUNS = 500
"""Runs a chunk holds at most (its statement binds two values a run)."""

# The versions of a page of runs in one statement: a statement per run cost a round trip each, and a
# page of runs on a distant database as many (benchmarks/README.md, runs_scale).
_HEADS_SQL = ("SELECT run_id, first_seen, step_epoch, step_version, first_step, last_step FROM runs "
              "WHERE run_id IN ({ids})")
# A chunk's steps stamped after each run's held version (-1: all) in one statement: per run a range of the
# (run_id, version) index. No ORDER BY: ordered by step, SQLite walks the primary key and reads every step
# of a run to find the few written since. Both databases name a VALUES list's columns column1, column2.
_SINCE_SQL = ("SELECT s.run_id, s.step, {time}, s.metrics FROM steps AS s JOIN (VALUES {runs}) AS held "
              "ON s.run_id = held.column1 AND s.version > held.column2")


class _Head(NamedTuple):
    """What a read knows of a run before its rows: its version, and how many steps it can have."""

    run_id: str
    identity: tuple
    """(first_seen, step_epoch): another is another history (`StepCache.held`)."""
    version: int
    steps: int
    """Its range of step numbers (0 without steps): at most that many rows."""


class StepReads:
    """Mixed into both stores (through `_queries.Reads`): the runs' step reads."""

    dialect: Dialect
    step_cache: StepCache
    """Runs' steps held for reads (`_step_series`); each store makes its own."""

    def read(self):  # pragma: no cover - provided by each store
        raise NotImplementedError

    def steps_json(self, run_id: str, metrics: list[str] | None = None, step_min: int | None = None,
                   step_max: int | None = None, limit: int = 10000, offset: int = 0,
                   points: int | None = None, fields: tuple[str, ...] = ROW_FIELDS) -> bytes:
        """Per-step rows as a JSON array: every scalar of the step (or just `metrics`, stat keys),
        then `run_id`, `step`, `time` (ISO, step end, ms precision), or those of them in `fields`
        (at least one: a chart needs only `step`). Columns are named by the
        step cache's `rename` (the API's catalog names), else by their stat keys.

        `points`: where the page of steps (`limit`, `offset`) holds more steps than that, only the
        rows of the steps `m4_rows` keeps (at most `points`, see there), each as it is stored:
        downsampled over `metrics`, or every column with a value in the page.

        Served from the run's steps held in memory (`_step_series`), brought up to date first:
        its version read by its key, and the steps written since the last read of the run. All columns:
        each row has every column its step logged, by key, then the three fields (stat keys cannot
        collide with them, see RESERVED_STEP_KEYS).
        """
        return b"[" + b",".join(self.steps_pieces(run_id, metrics, step_min, step_max, limit, offset, points,
                                                  fields)) + b"]"

    def steps_pieces(self, run_id: str, metrics: list[str] | None = None, step_min: int | None = None,
                     step_max: int | None = None, limit: int = 10000, offset: int = 0,
                     points: int | None = None, fields: tuple[str, ...] = ROW_FIELDS) -> Iterator[bytes]:
        """The rows of `steps_json`, its array's inside in pieces: `runs_steps_pieces` of the one run."""
        return self.runs_steps_pieces([run_id], metrics, step_min, step_max, limit, offset, points, fields)

    def runs_steps_pieces(self, run_ids: Sequence[str], metrics: list[str] | None = None,
                          step_min: int | None = None, step_max: int | None = None, limit: int = 10000,
                          offset: int = 0, points: int | None = None,
                          fields: tuple[str, ...] = ROW_FIELDS) -> Iterator[bytes]:
        """The rows of `steps_json` of each of `run_ids` (unknown runs left out), run after run in their
        order, each run's page of steps (`step_min`..`step_max`, `limit`, `offset`, `points`) as
        `steps_json` gives it alone: the inside of one JSON array, in pieces of at most STEP_PIECE_CELLS
        values (`step_piece_rows`; each its rows' objects joined by commas; join the pieces with commas).

        A bounded number of statements for any number of runs: one reads every run's versions, one
        per chunk of runs (`_chunks`) the steps written since the read before. The versions and the
        first chunk are read before this returns (a store error is raised here); the rows are written
        as the pieces are taken and each further chunk read as they reach it, so a response that
        streams them holds one piece and one chunk's steps at a time, not the page.
        """
        if isinstance(run_ids, str):
            raise ValueError("run_ids: a list of run ids, not one id")
        if not set(fields) & set(ROW_FIELDS):
            raise ValueError(f"fields: at least one of {', '.join(ROW_FIELDS)}")
        runs = self._runs_series(run_ids)
        return (piece for run_id, series in runs
                for piece in self._run_pieces(run_id, series, metrics, step_min, step_max, limit, offset, points,
                                              fields))

    def _run_pieces(self, run_id: str, series: Series, metrics: list[str] | None, step_min: int | None,
                    step_max: int | None, limit: int, offset: int, points: int | None,
                    fields: tuple[str, ...]) -> Iterator[bytes]:
        rows = series.window(step_min, step_max, limit, offset)
        if points is not None and len(rows) > points:
            cells = series.logged(rows) if metrics is None else series.at(metrics, rows)
            # Every named column counts (an absent one too); of every column, those with a value.
            columns = [values for _, values, _ in cells if metrics is not None or not np.isnan(values).all()]
            # A step that logged a column non-finite is kept as an extreme is (each bucket's first such
            # step): a chart draws its gap, as it draws a spike.
            columns += [np.where(null, 1.0, np.nan) for _, _, null in cells if null is not None and null.any()]
            rows = rows[m4_rows(series.steps[rows], columns, points)]
        rename = self.step_cache.rename or str
        piece = step_piece_rows(len(series.columns if metrics is None else metrics), len(fields))
        for i in range(0, len(rows), piece):
            part = rows[i:i + piece]
            cells = series.logged(part) if metrics is None else series.at(metrics, part)  # every column: these steps'
            yield _step_rows(run_id, [rename(k) for k, _, _ in cells], [v for _, v, _ in cells],
                             [n for _, _, n in cells], series.steps[part].tolist(), series.times[part].tolist(), fields)

    def _runs_series(self, run_ids: Sequence[str]) -> Iterator[tuple[str, Series]]:
        """Each known run of `run_ids`, in their order, with its steps current as of this read: the
        runs' versions and the first chunk read now, each further chunk on a connection of its own
        as the iterator reaches it (none is held while the caller writes what it has)."""
        run_ids = list(dict.fromkeys(run_ids))
        if not run_ids:
            return iter(())
        with self.read() as conn:
            found = conn.execute(_HEADS_SQL.format(ids=", ".join("?" * len(run_ids))), run_ids).fetchall()
            heads = {r[0]: _Head(r[0], (r[1], r[2]), r[3], 0 if r[4] is None else r[5] - r[4] + 1) for r in found}
            chunks = self._chunks([heads[run_id] for run_id in run_ids if run_id in heads])
            if not chunks:
                return iter(())
            first = self._chunk_series(conn, chunks[0])
        return itertools.chain(first, itertools.chain.from_iterable(map(self._read_chunk, chunks[1:])))

    def _chunks(self, heads: list[_Head]) -> list[list[_Head]]:
        """`heads` cut, in order, into chunks whose steps to read come to at most STEP_READ_ROWS (a run
        with more alone) and whose runs to STEP_READ_RUNS: each chunk is one statement, and what it
        reads is held until its runs' rows are written."""
        chunks: list[list[_Head]] = []
        rows = 0
        for head in heads:
            more = self._unread_rows(head)
            if not chunks or len(chunks[-1]) >= STEP_READ_RUNS or (rows and rows + more > STEP_READ_ROWS):
                chunks.append([])
                rows = 0
            chunks[-1].append(head)
            rows += more
        return chunks

    def _unread_rows(self, head: _Head) -> int:
        """The most rows a read of the run returns: none where its held series is current, the versions
        written since the held one (each write of a step stamps its row with the next), else (read whole)
        its range of step numbers (a step is a row)."""
        held = self.step_cache.held(head.run_id, head.identity, head.version)
        return head.steps if held is None else head.version - held.version

    def _read_chunk(self, chunk: list[_Head]) -> list[tuple[str, Series]]:
        with self.read() as conn:
            return self._chunk_series(conn, chunk)

    def _chunk_series(self, conn, chunk: list[_Head]) -> list[tuple[str, Series]]:
        def read_since(behind: dict[str, int]) -> list[tuple]:
            sql = _SINCE_SQL.format(time=self.dialect.step_time, runs=", ".join(["(?, ?)"] * len(behind)))
            return conn.execute(sql, [value for pair in behind.items() for value in pair]).fetchall()

        series = self.step_cache.current([(h.run_id, h.identity, h.version) for h in chunk], read_since)
        return [(h.run_id, series[h.run_id]) for h in chunk]

    def steps(self, run_id: str, metrics: list[str] | None = None, step_min: int | None = None,
              step_max: int | None = None, limit: int = 10000, offset: int = 0, points: int | None = None) -> list[dict]:
        """`steps_json` parsed: one dict per step."""
        return json.loads(self.steps_json(run_id, metrics, step_min, step_max, limit, offset, points=points))

    def metric_keys(self, run_id: str) -> list[str]:
        """Every scalar key a step of the run has carried, sorted: a column logged at one step of a
        100,000-step run is among them. Kept as steps are written (`step_columns`), so this reads the
        run's keys alone, whatever its length. A key stays listed once its steps are gone (retention
        that keeps a run's latest steps, a newer attempt at the step), until the run is deleted."""
        with self.read() as conn:
            rows = conn.execute("SELECT key FROM step_columns WHERE run_id = ?", (run_id,)).fetchall()
        return sorted(key for (key,) in rows)
