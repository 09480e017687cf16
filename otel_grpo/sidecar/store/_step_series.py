"""Each run's step history, held in memory by the process that reads it and kept current by version.

    series = cache.current([(run_id, identity, version), ...], read_since)   # run -> Series
    rows = series[run_id].window(step_min, step_max, limit, offset)       # row indices, by step

Every write of a run's step stamps the row with the run's new `step_version`
(`_step_scalars`), and retention that deletes steps of a run bumps its `step_epoch`. A read
asks its runs' `(first_seen, step_epoch, step_version)` (one statement for all of them) and reads
only the steps stamped after the version it holds of each (one statement for the runs that are
behind, a chunk of them at a time: `_step_reads`), so a chart of a long run costs the steps written
since its last read, not the run's length, and a page of many runs a few statements, not two a
run. The versions live in the database: a replica sees every other replica's writes as its own. A
changed epoch or `first_seen` (a run deleted and made again) reads the run whole.

Held per step: its number, its time text, and each scalar as a float64 column under its stored key
(NaN where the step has no finite value). Every stored value is a float or null (ingest makes each
a float: `otlp._extract`), so the columns are the whole step: a row of every column is written
from them, and the steps' JSON text (three quarters of a held step's bytes at 233 scalars) is not
kept. A column logged non-finite at some step (stored as null: ingest keeps no NaN or inf) also
has a mask of those steps, so a read tells "not logged here" (no key) from "logged, not finite" (null).

The arrays have room to grow (`_Room`): steps newer than every held one, the common write, are
written in place after the held ones, and the series grows by a view; only a write of an older
step (a step written again) copies the run. Copying every column at every read with new steps
made a sidecar's heap grow for good under a team's load: each copy a little larger than the one
it freed (benchmarks/README.md, team). The cache is bounded in bytes; the least recently read
runs go first.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import orjson

STEP_CACHE_BYTES = 256 * 2**20  # the sidecar's default (`step_cache_mb`)
_TIME_BYTES = 90  # what a held step's time text costs besides its slot (a str object of ~24 characters)
_STRIPES = 64  # run locks: loads of different runs proceed side by side, two of one run do not
_MIN_ROOM = 8  # spare rows of a run's arrays made for its steps at once
_GROWTH = 1.5  # the arrays' size made when they are full, as a multiple of the steps they held


class _Room:
    """A run's arrays, with room for more steps than are held: the series that extend one another
    share them, each a view of its first rows. Only the newest (all `filled` rows) may write
    after them, so the rows an older series sees never change."""

    __slots__ = ("steps", "times", "columns", "nulls", "filled")

    def __init__(self, capacity: int) -> None:
        self.steps = np.zeros(capacity, dtype=np.int64)
        self.times = np.empty(capacity, dtype=object)
        self.columns: dict[str, np.ndarray] = {}  # stat key -> float64, NaN beyond what was written
        self.nulls: dict[str, np.ndarray] = {}  # stat key -> bool, for the keys that ever held a null
        self.filled = 0

    @property
    def capacity(self) -> int:
        return len(self.steps)

    def column(self, key: str) -> np.ndarray:
        column = self.columns.get(key)
        if column is None:
            column = self.columns[key] = np.full(self.capacity, np.nan)
        return column

    def null(self, key: str) -> np.ndarray:
        null = self.nulls.get(key)
        if null is None:
            null = self.nulls[key] = np.zeros(self.capacity, dtype=bool)
        return null

    def moved(self, n: int, capacity: int, at: np.ndarray | None = None) -> "_Room":
        """A new room of `capacity` holding this room's first `n` rows (a series' steps) at `at` (None:
        where they are)."""
        room = _Room(capacity)
        at = slice(0, n) if at is None else at
        room.steps[at], room.times[at] = self.steps[:n], self.times[:n]
        for key, column in self.columns.items():
            room.column(key)[at] = column[:n]
        for key, null in self.nulls.items():
            room.null(key)[at] = null[:n]
        return room

    def write(self, at: np.ndarray, objs: list[dict], keys) -> None:
        """The step objects `objs` (each a step's whole, merged state) into rows `at`: every one of
        `keys` (NaN where an object lacks it, a null marked in the key's mask)."""
        for key in keys:
            # An absent key reads as NaN, a stored null as None: both NaN as float64, told apart first
            # (count is a C loop; the mask is written only for a column that has a null).
            new = list(map(dict.get, objs, itertools.repeat(key), itertools.repeat(np.nan)))
            self.column(key)[at] = np.array(new, dtype=np.float64)
            if key in self.nulls or new.count(None) > 0:
                self.null(key)[at] = np.fromiter(map(operator.is_, new, itertools.repeat(None)), dtype=bool,
                                                 count=len(new))

    def nbytes(self) -> int:
        return (self.capacity * (self.steps.itemsize + self.times.itemsize + 8 * len(self.columns) + len(self.nulls))
                + _TIME_BYTES * self.filled)


class Series:
    """One run's steps, ordered by step; a view that never changes (a newer version is a new
    Series), so a reader keeps using the one it got while another thread moves the cache on."""

    __slots__ = ("identity", "version", "steps", "times", "columns", "nulls", "_room")

    def __init__(self, identity: tuple, version: int, room: _Room, n: int) -> None:
        self.identity, self.version, self._room = identity, version, room
        self.steps: np.ndarray = room.steps[:n]
        """int64, ascending"""
        self.times: np.ndarray = room.times[:n]
        """object: each step's time text (None: no end time)"""
        self.columns: dict[str, np.ndarray] = {key: column[:n] for key, column in sorted(room.columns.items())}
        """stat key -> float64 values, NaN where the step has no finite value; by key"""
        self.nulls: dict[str, np.ndarray] = {key: null[:n] for key, null in room.nulls.items() if null[:n].any()}
        """stat key -> bool per step, True where the step logged it non-finite (stored null); only for the
        keys that have such a step (rare: most runs have none)"""

    @classmethod
    def build(cls, identity: tuple, version: int, rows: Sequence[tuple]) -> "Series":
        """From (step, time, JSON object) rows, one per step, in any order."""
        return _EMPTY.merged(identity, version, rows)

    def merged(self, identity: tuple, version: int, rows: Sequence[tuple]) -> "Series":
        """This series with `rows` (step, time, JSON object; one per step, in any order) added or replacing
        the rows of their steps (a stored object is the step's whole, merged state). Steps after every
        held one are written after them, in place where the arrays have room; a step held already
        copies the run into new arrays. Every copy is a C loop over whole arrays."""
        if not rows:
            return Series(identity, version, self._room, len(self.steps))
        new_steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        objs = orjson.loads("[" + ",".join(r[2] for r in rows) + "]")  # one parse of the new objects
        room, n = self._room, len(self.steps)
        if room.filled == n and (n == 0 or new_steps.min() > self.steps[-1]):
            # After every held step: written in the room's spare rows, by step.
            if n + len(rows) > room.capacity:
                # Room in proportion to the steps held: each step is copied O(1) times as the run grows,
                # and a run read whole (a finished one never grows) is held with little to spare.
                room = room.moved(n, max(n + len(rows) + _MIN_ROOM, int(n * _GROWTH)))
            new_at, room.filled = n + np.argsort(np.argsort(new_steps)), n + len(rows)
        else:
            # A held step written again (or an older one): the union, copied into new arrays.
            steps = np.union1d(self.steps, new_steps)
            room = room.moved(n, len(steps) + _MIN_ROOM, np.searchsorted(steps, self.steps))
            new_at, room.filled = np.searchsorted(steps, new_steps), len(steps)
        room.steps[new_at], room.times[new_at] = new_steps, [r[1] for r in rows]
        # Every column at the new rows: a step's object replaces its whole row (NaN where it lacks a key).
        room.write(new_at, objs, sorted(set(room.columns).union(*objs)))
        return Series(identity, version, room, room.filled)

    @property
    def nbytes(self) -> int:
        """About what the series' arrays hold in memory, their spare room included."""
        return self._room.nbytes()

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

    def at(self, keys: Iterable[str], rows: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
        """Each of `keys` with its values (`values`) and nulls (`nulls_at`) at `rows`."""
        return [(key, self.values(key, rows), self.nulls_at(key, rows)) for key in keys]

    def logged(self, rows: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
        """`at` for the keys logged at one of `rows` at least (a value or a null), in key order: a row of
        every column. Each column is gathered once."""
        return [(key, values, null) for key, values, null in self.at(self.columns, rows)
                if not np.isnan(values).all() or (null is not None and null.any())]


_EMPTY = Series((), -1, _Room(0), 0)


class StepCache:
    """Runs' `Series`, at most `max_bytes` in all (a run larger than that is read whole at every read);
    thread-safe. `rename`: stored stat key -> the name reads give its column (the API's catalog
    names); None: the stored keys.

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

    def held(self, run_id: str, identity: tuple, version: int) -> Series | None:
        """The run's held series that a read of it at `version` builds on; None where it is read whole:
        none held, another `identity` (the run deleted and made again, or retention deleted steps), or
        a later version than the database's (a database put back from an older copy)."""
        with self._lock:
            entry = self._runs.get(run_id)
        held = None if entry is None else entry[0]
        return None if held is None or held.identity != identity or held.version > version else held

    def current(self, heads: Sequence[tuple[str, tuple, int]],
                read_since: Callable[[dict[str, int]], Iterable[Sequence]]) -> dict[str, Series]:
        """Each run's series at its version (or later), by run: `heads` are (run_id, identity, version),
        each read from the database before any of its rows. `read_since({run: v})`: the (run_id, step,
        time, JSON object) rows of those runs stamped after their v (v = -1: every row of the run), in
        any order; called once, for the runs whose held series is behind, and not at all where none is.
        A row it has not seen yet is read again next time (its version is newer than the head's).

        Holds the runs' locks while it reads (taken in one order: no two reads wait for each other in a
        cycle), so concurrent reads of a run read its new rows once: the later finds it current."""
        with contextlib.ExitStack() as stack:
            for stripe in sorted({hash(run_id) % _STRIPES for run_id, _, _ in heads}):
                stack.enter_context(self._run_locks[stripe])
            bases = {run_id: self.held(run_id, identity, version) for run_id, identity, version in heads}
            behind = {run_id: -1 if bases[run_id] is None else bases[run_id].version
                      for run_id, _, version in heads if bases[run_id] is None or bases[run_id].version < version}
            rows: dict[str, list] = {run_id: [] for run_id in behind}
            if behind:
                for row in read_since(behind):
                    rows[row[0]].append(row[1:])
            out = {}
            for run_id, identity, version in heads:
                series = bases[run_id]
                if run_id in behind:
                    series = (_EMPTY if series is None else series).merged(identity, version, rows[run_id])
                self._keep(run_id, series)
                out[run_id] = series
        return out

    def _keep(self, run_id: str, series: Series) -> None:
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
