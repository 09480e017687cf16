"""Each run's step history, held in memory by the process that reads it and kept current by version.

    series = cache.current(run_id, identity, version, read_since)
    rows = series.window(step_min, step_max, limit, offset)     # row indices, by step

Every write of a run's step stamps the row with the run's new `step_version`
(`_writes.merge_step`), and retention that deletes steps of a run bumps its `step_epoch`. A read
asks the run's `(first_seen, step_epoch, step_version)` (one primary-key row) and reads only the
steps stamped after the version it holds, so a chart of a long run costs the steps written since
its last read, not the run's length. The versions live in the database: a replica sees every
other replica's writes as its own. A changed epoch or `first_seen` (a run deleted and made again)
reads the run whole.

Held per step: its number, time text and JSON object (as stored, its keys renamed once to the
names reads give them: `rename`), and each scalar as a float64 column under its stored key (NaN
where the step has no finite value), for selecting and downsampling columns without parsing the
objects. A column logged non-finite at some step (stored as null: ingest keeps no NaN or inf) also
has a mask of those steps, so a read tells "not logged here" (no key) from "logged, not finite" (null).
The cache is bounded in bytes; the least recently read runs go first.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

STEP_CACHE_BYTES = 256 * 2**20  # the sidecar's default (`step_cache_mb`)
_ROW_OVERHEAD = 120  # bytes a held step costs besides its JSON text and columns (str and list slots)
_STRIPES = 64  # run locks: loads of different runs proceed side by side, two of one run do not


@dataclass(frozen=True, slots=True, eq=False)
class Series:
    """One run's steps, ordered by step; immutable (a newer version is a new Series), so a reader
    keeps using the one it got while another thread moves the cache on."""

    identity: tuple
    version: int
    steps: np.ndarray
    """int64, ascending"""
    times: np.ndarray
    """object: each step's time text (None: no end time)"""
    blobs: np.ndarray | None
    """object: each step's JSON object text; None in a lean series (`lean`), which holds the columns only"""
    columns: dict[str, np.ndarray]
    """stat key -> float64 values, NaN where the step has no finite value"""
    nulls: dict[str, np.ndarray]
    """stat key -> bool per step, True where the step logged it non-finite (stored null); only for the
    keys that have such a step (rare: most runs have none)"""
    text_bytes: int
    """the JSON objects' length in all"""

    @classmethod
    def build(cls, identity: tuple, version: int, rows: Sequence[tuple],
              rename: Callable[[str], str] | None = None, text: bool = True) -> "Series":
        """From (step, time, JSON object) rows, one per step, in any order; lean without `text`."""
        return (_EMPTY if text else _EMPTY.lean()).merged(identity, version, rows, rename)

    def merged(self, identity: tuple, version: int, rows: Sequence[tuple],
               rename: Callable[[str], str] | None = None) -> "Series":
        """This series with `rows` (step, time, JSON object; one per step, in any order) added or replacing
        the rows of their steps (a stored object is the step's whole, merged state); the new
        objects' keys renamed by `rename` (None: as stored). Every copy is a C loop over whole
        arrays: a step more costs a few copies of the run's arrays, not a Python loop over it."""
        new_steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        steps = np.union1d(self.steps, new_steps)
        old_at, new_at = np.searchsorted(steps, self.steps), np.searchsorted(steps, new_steps)
        # One parse of the new objects; each column through C loops (map), not per value.
        objs = orjson.loads("[" + ",".join(r[2] for r in rows) + "]")
        times = np.empty(len(steps), dtype=object)
        times[old_at], times[new_at] = self.times, [r[1] for r in rows]
        blobs, text_bytes = None, 0
        if self.blobs is not None:  # a lean series stays lean: its columns only
            new_blobs = [r[2] for r in rows] if rename is None else list(_renamed(objs, rename))
            replaced = self.blobs[np.isin(self.steps, new_steps)]
            text_bytes = self.text_bytes - sum(map(len, replaced)) + sum(map(len, new_blobs))
            blobs = np.empty(len(steps), dtype=object)
            blobs[old_at], blobs[new_at] = self.blobs, new_blobs
        columns, nulls = {}, {}
        for key in sorted(set(self.columns).union(*objs)):
            column = np.full(len(steps), np.nan)
            if key in self.columns:
                column[old_at] = self.columns[key]
            # An absent key reads as NaN, a stored null as None: both NaN as float64, told apart first
            # (count is a C loop; the mask is built only for the rare column that has a null).
            new = list(map(dict.get, objs, itertools.repeat(key), itertools.repeat(np.nan)))
            column[new_at] = np.array(new, dtype=np.float64)
            columns[key] = column
            old_null, has_null = self.nulls.get(key), new.count(None) > 0
            if old_null is not None or has_null:
                null = np.zeros(len(steps), dtype=bool)
                if old_null is not None:
                    null[old_at] = old_null
                null[new_at] = np.fromiter(map(operator.is_, new, itertools.repeat(None)), dtype=bool, count=len(new))
                if null.any():
                    nulls[key] = null
        return Series(identity, version, steps, times, blobs, columns, nulls, text_bytes)

    def lean(self) -> "Series":
        """This series without the steps' JSON text: what reads of named columns use."""
        return dataclasses.replace(self, blobs=None, text_bytes=0)

    @property
    def nbytes(self) -> int:
        """About what the series holds in memory."""
        return (self.steps.nbytes + sum(c.nbytes for c in self.columns.values())
                + sum(n.nbytes for n in self.nulls.values()) + self.text_bytes
                + _ROW_OVERHEAD * len(self.steps))

    def window(self, step_min: int | None, step_max: int | None, limit: int, offset: int) -> np.ndarray:
        """Row indices of the page of steps in `step_min..step_max` (inclusive; None: open),
        skipping `offset` rows and returning at most `limit`."""
        lo = 0 if step_min is None else int(np.searchsorted(self.steps, step_min, side="left"))
        hi = len(self.steps) if step_max is None else int(np.searchsorted(self.steps, step_max, side="right"))
        start = min(lo + offset, hi)
        return np.arange(start, min(hi, start + limit))

    def values(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Column `key` at `rows` (all NaN for a column the run does not have)."""
        column = self.columns.get(key)
        return np.full(len(rows), np.nan) if column is None else column[rows]

    def nulls_at(self, key: str, rows: np.ndarray) -> np.ndarray | None:
        """Where column `key` was logged non-finite at `rows` (bool); None where it never was."""
        null = self.nulls.get(key)
        return None if null is None else null[rows]

    def columns_with_values(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each column at `rows`, for the columns with a value at one of them at least."""
        found = (column[rows] for column in self.columns.values())
        return [c for c in found if not np.isnan(c).all()]


_EMPTY = Series((), -1, np.empty(0, dtype=np.int64), np.empty(0, dtype=object), np.empty(0, dtype=object), {}, {}, 0)


def _renamed(objs: list[dict], rename: Callable[[str], str]) -> Iterator[str]:
    """Each object as JSON text with its keys renamed; a run's steps mostly share one key order,
    renamed once."""
    names: dict[tuple, tuple] = {}
    for obj in objs:
        keys = tuple(obj)
        renamed = names.get(keys)
        if renamed is None:
            renamed = names[keys] = tuple(map(rename, keys))
        yield orjson.dumps(dict(zip(renamed, obj.values()))).decode()


class StepCache:
    """Runs' `Series`, at most `max_bytes` in all (a run larger than that is kept lean, its columns
    without the JSON text, where that fits, and read whole at every read for whole rows or where it
    does not); thread-safe. `rename`: stored stat key -> the name reads give its column
    (the API's catalog names); None: the stored keys.

    The bookkeeping of a read is O(1) in the runs held: each run is held with its size, and their
    total is kept as they come and go. (Summing every held run at each read made a read of all of
    10,000 runs quadratic: benchmarks/README.md, runs_scale.)"""

    def __init__(self, max_bytes: int = STEP_CACHE_BYTES, rename: Callable[[str], str] | None = None) -> None:
        self.max_bytes = max_bytes
        self.rename = rename
        self._runs: OrderedDict[str, tuple[Series, int]] = OrderedDict()  # run -> (series, its nbytes)
        self._bytes = 0  # the sum of the held runs' nbytes
        self._lock = threading.Lock()
        self._run_locks = [threading.Lock() for _ in range(_STRIPES)]

    def current(self, run_id: str, identity: tuple, version: int,
                read_since: Callable[[int], Sequence[tuple]], text: bool = True) -> Series:
        """The run's series at `version` (or later). `read_since(v)`: the (step, time, JSON object)
        rows stamped after version v, in any order (v = -1: every row); `version` must have been
        read before any of them, so a row it has not seen yet is read again next time. `text`:
        the steps' JSON text is needed (whole rows); without it a lean series may come back."""
        with self._run_locks[hash(run_id) % _STRIPES]:
            with self._lock:
                entry = self._runs.get(run_id)
            held = None if entry is None else entry[0]
            if held is None or held.identity != identity or held.version > version or (text and held.blobs is None):
                held = Series.build(identity, version, read_since(-1), self.rename, text)
            elif held.version < version:
                held = held.merged(identity, version, read_since(held.version), self.rename)
            self._keep(run_id, held)
        return held

    def _keep(self, run_id: str, series: Series) -> None:
        size = series.nbytes
        if size > self.max_bytes:
            # Over the whole budget: kept lean, without the steps' JSON text (most of a long run's
            # bytes), so a chart's reads of named columns stay in memory; whole rows read it again.
            series = series.lean()
            size = series.nbytes
        with self._lock:
            old = self._runs.pop(run_id, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self.max_bytes:
                return
            while self._runs and self._bytes + size > self.max_bytes:
                self._bytes -= self._runs.popitem(last=False)[1][1]  # the least recently read
            self._runs[run_id] = (series, size)  # last: the most recently read
            self._bytes += size

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        """Runs held."""
        with self._lock:
            return len(self._runs)
