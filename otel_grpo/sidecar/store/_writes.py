"""Writes, shared by both stores: each runs in one transaction of the store's `_tx()`.

Statements are written once for SQLite and PostgreSQL: upserts name the target table's columns
qualified (`steps.start_time`), which both accept and PostgreSQL requires, and there are no
numbered parameters. Every write is idempotent under re-delivery: samples are unique on
(run, step, sample id), the id naming its writer's attempt (`SampleRecord.uid`); steps, values, spans and phases
are upserts; so a retried export or a replayed spill never duplicates a row. A newer attempt at a step (`grpo.attempt`) replaces the older
one's samples, scalars and phases together, and the run's older attempts' later steps (`_attempts`); a step's
scalars are attributed to their writer attempts for that (`_step_scalars`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Mapping

import orjson

from ..otlp._extract import Batch
from . import _attempts, _retention
from ._alerts import upsert_episodes
from ._dialect import Dialect
from ._queries import iso
from ._step_columns import KnownColumns
from ._step_scalars import merge_phase_sums, merge_step, phase_sums

MAINTENANCE_TIMEOUT_S = 600.0
"""Statement timeout of maintenance transactions (retention), which may delete a long run's rows."""
RETENTION_CHUNK_RUNS = 50
"""Runs a `max_steps` retention transaction reads at most: one statement each (eight for a run it trims)."""
RETENTION_CHUNK_S = 0.25
"""And the time after which it reads no further run (it reads one at least), whatever the database's distance:
then the write lock goes back to ingest. (50 runs trimmed, with the database a millisecond away, held it several
times this: benchmarks/README.md, retention.)"""
RETENTION_CHUNK_ROWS = 20_000
"""And the sample rows of one run's oldest steps it deletes at most (by the run's average per step): a long run's
first trim, millions of rows, is as many transactions, each of them a write's wait at most."""
RETENTION_SLACK_S = 600.0
"""How far before its previous pass a `max_steps` pass looks for runs written: a write's `last_update` is its
clock when it began, which may be before a pass that did not see it yet committed (a write waits for the lock,
then runs up to its statements' timeouts), and replicas' clocks may differ a little."""

_SAMPLE_INSERT = """
INSERT INTO samples (run_id, step, uid, sample_index, reward, advantage, completion_length,
                     prompt, completion, time, data, attempt)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step, uid) DO NOTHING
"""
_SPAN_UPSERT = """
INSERT INTO step_spans (span_id, run_id, step) VALUES (?, ?, ?)
ON CONFLICT (span_id) DO UPDATE SET run_id = excluded.run_id, step = excluded.step
"""
_PHASE_UPSERT = """
INSERT INTO phases (span_id, parent_span_id, name, duration, run_id, step, received_at, attempt)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (span_id) DO UPDATE SET parent_span_id = excluded.parent_span_id, name = excluded.name,
    duration = excluded.duration, run_id = excluded.run_id, step = excluded.step, received_at = excluded.received_at,
    attempt = excluded.attempt
"""
_RUN_UPSERT = """
INSERT INTO runs (run_id, service_name, model, host, first_seen, last_update) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    service_name = coalesce(excluded.service_name, runs.service_name),
    model = coalesce(excluded.model, runs.model),
    host = coalesce(excluded.host, runs.host),
    last_update = excluded.last_update
"""
# the run's identity (`_step_columns`) and its attempt floor (`_attempts`)
_RUN_UPSERT_IDENTITY = _RUN_UPSERT + "RETURNING first_seen, attempt, attempt_step, attempt_since"
_RUN_PROGRESS = """
UPDATE runs SET
    first_step = CASE WHEN first_step IS NULL OR first_step > ? THEN ? ELSE first_step END,
    last_step = CASE WHEN last_step IS NULL OR last_step < ? THEN ? ELSE last_step END,
    sample_count = sample_count + ?
WHERE run_id = ?
"""


class Writes:
    """Mixed into both stores, which provide `_tx()`: a context giving the connection of one
    write transaction, serialized with every other writer of the database and committed on exit."""

    dialect: Dialect
    known_columns: KnownColumns
    """The step columns this writer knows are stored, per run (each store makes its own)."""
    _retained_at: float | None = None
    """When this store's last retention pass began (wall clock); `_retained_steps`: its `max_steps`."""
    _retained_steps: int | None = None

    def _tx(self, samples_first: bool = False, timeout_s: float | None = None):  # pragma: no cover - per store
        """`samples_first`: the transaction may insert samples before it serializes with the
        other writers (`_serialize`); only sample inserts may come before that call. `timeout_s`:
        its statements' timeout where the store has one (default: the store's `timeout_s`)."""
        raise NotImplementedError

    def _serialize(self, conn) -> None:
        """In a `_tx(samples_first=True)`: wait for the other writers (no-op where `_tx` already did)."""

    def write_batch(self, batch: Batch, now: float | None = None) -> int:
        """Store one request's records in one transaction; returns samples newly inserted (and kept)."""
        now = time.time() if now is None else now
        if not (batch.steps or batch.phases or batch.samples):
            return 0
        # Samples first: inserts unique on (run, step, uid) are safe side by side, so PostgreSQL
        # writers overlap there; the merges of steps, phases and run counters then take turns.
        with self._tx(samples_first=True) as conn:
            inserted = self._write_samples(conn, batch)
            self._serialize(conn)
            identity, floors = {}, {}  # run -> its first_seen; run -> its attempt floor
            for run_id, info in batch.runs.items():
                first_seen, *floor = conn.execute(_RUN_UPSERT_IDENTITY, (
                    run_id, info.get("service.name"), info.get("grpo.model"), info.get("host.name"), now, now)).fetchone()
                identity[run_id] = first_seen
                if (known := _attempts.floor_of(floor)) is not None:
                    floors[run_id] = known
            settled = _attempts.settle(conn, batch, floors)
            steps = [st for st in batch.steps if not settled.stale(st)]
            columns: dict[str, set[str]] = defaultdict(set)  # run -> the stat keys its steps were given here
            for st in steps:
                merge_step(conn, st.run_id, st.step, st.start, st.end, now, st.metrics, st.attempt)
                columns[st.run_id].update(st.metrics)
            conn.executemany(_SPAN_UPSERT, [(s.span_id, s.run_id, s.step) for s in steps])
            merged = self._write_phases(conn, batch, steps, now, settled, columns)
            added = self._write_columns(conn, columns, identity)
            kept = {run: inserted.get(run, 0) - settled.dropped.get(run, 0) for run in inserted}
            self._write_progress(conn, batch, settled, {run: kept.get(run, 0) - settled.removed.get(run, 0)
                                                        for run in {*kept, *settled.removed}}, merged)
            for run_id in settled.retired:  # steps gone from its end: recounted, and read again by readers
                _retention.refresh_run(conn, run_id, steps_deleted=True)
        for run_id, keys in added.items():  # committed: this writer leaves them out from now on
            self.known_columns.written(run_id, identity.get(run_id), keys)
        return sum(kept.values())

    def _write_phases(self, conn, batch: Batch, steps: list, now: float, settled: _attempts.Settled,
                      columns: dict[str, set[str]]) -> list[tuple[str, int]]:
        """Phase spans, and each touched step's phase durations (added to `columns`, per run); `steps`: the
        batch's step records that are not stale. Returns the steps given phase durations, which may be made
        here (a phase of a step that is gone, such as one age retention deleted), for the run's step range."""
        phases = [p for p in batch.phases if not settled.stale(p)]
        conn.executemany(_PHASE_UPSERT, [
            (p.span_id, p.parent_span_id, p.name, p.duration, p.run_id, p.step, now, p.attempt) for p in phases])
        if batch.phases or batch.steps:
            conn.execute("""UPDATE phases SET run_id = s.run_id, step = s.step FROM step_spans AS s
                            WHERE phases.run_id IS NULL AND phases.parent_span_id = s.span_id""")
        touched = {(s.run_id, s.step) for s in steps} | {k for k, removed in settled.replaced.items() if removed}
        for p in phases:
            row = conn.execute("SELECT run_id, step FROM phases WHERE span_id = ?", (p.span_id,)).fetchone()
            if row[0] is not None:
                touched.add((row[0], row[1]))
        merged = []
        for run_id, step in sorted(touched):
            sums = phase_sums(conn, run_id, step)
            if sums:
                conn.execute(_RUN_UPSERT, (run_id, None, None, None, now, now))
                merge_phase_sums(conn, run_id, step, now, sums)
                columns[run_id].update(sums)
                merged.append((run_id, step))
        return merged

    def _write_columns(self, conn, columns: dict[str, set[str]], identity: dict[str, object]) -> dict[str, set[str]]:
        """The stat keys just written, in each run's `step_columns` (what `metric_keys` lists), but those this
        writer knows are there (`_step_columns`): one statement a run with new keys. Returns them per run."""
        added = {}
        for run_id, keys in columns.items():
            new = self.known_columns.new(run_id, identity.get(run_id), keys)
            if new:
                conn.execute(self.dialect.add_step_columns, (run_id, orjson.dumps(sorted(new)).decode()))
                added[run_id] = new
        return added

    def _write_samples(self, conn, batch: Batch) -> dict[str, int]:
        """The batch's sample rows, but those already stored (the same writer's same rows: `SampleRecord.uid`);
        returns how many went in, per run."""
        # orjson: the per-row JSON of the dynamic columns at a fraction of json.dumps' cost
        # (benchmarks/README.md); output is the same compact JSON (UTF-8 rather than \u escapes;
        # ints are int64 by OTLP).
        dumps = orjson.dumps
        by_run: dict[str, list] = defaultdict(list)
        for s in batch.samples:
            by_run[s.run_id].append((s.run_id, s.step, s.uid, s.sample_index, s.reward, s.advantage,
                                     s.completion_length, s.prompt, s.completion, s.time,
                                     dumps(s.data).decode(), s.attempt))
        return {run_id: self._insert_samples(conn, rows) for run_id, rows in by_run.items()}

    def _insert_samples(self, conn, rows: list[tuple]) -> int:
        """Insert sample rows (in `_SAMPLE_INSERT`'s column order); returns how many were new."""
        # rowcount of an executemany sums the rows each insert changed: a duplicate changes none.
        return conn.executemany(_SAMPLE_INSERT, rows).rowcount

    def _write_progress(self, conn, batch: Batch, settled: _attempts.Settled, inserted: dict[str, int],
                        merged: list[tuple[str, int]] = ()) -> None:
        """The runs' step ranges and sample counts, from this batch's records but a stale attempt's, and the
        steps given phase durations (`merged`). The range bounds every step a run's steps and samples hold:
        `max_steps` retention reads only the runs whose range is longer than it keeps."""
        steps: dict[str, list[int]] = defaultdict(list)
        for record in (*batch.steps, *batch.samples, *batch.phases):
            if record.run_id is not None and not settled.stale(record):
                steps[record.run_id].append(record.step)
        for run_id, step in merged:
            steps[run_id].append(step)
        for run_id in {*steps, *inserted}:
            values = steps.get(run_id, [None])  # None: only its sample count changes
            first, last = min(values), max(values)
            conn.execute(_RUN_PROGRESS, (first, first, last, last, inserted.get(run_id, 0), run_id))

    def upsert_alerts(self, alerts: list[dict], now: float | None = None,
                      group: Mapping[str, str] | None = None) -> int:
        """Alertmanager's alerts, one row per (fingerprint, episode) (`_alerts.py`); `group`: the
        notification's groupLabels, whose open episodes it does not list are resolved. Returns how many."""
        now = time.time() if now is None else now
        with self._tx() as conn:
            upsert_episodes(conn, alerts, group, now, iso(now) or "")
        return len(alerts)

    def apply_retention(self, max_runs: int | None = None, max_steps: int | None = None,
                        max_age_s: float | None = None, now: float | None = None) -> dict[str, int]:
        """Delete what the retention settings exclude; returns rows deleted per table.

        The rules by runs and by age in one transaction; then `max_steps` over the runs that may hold more
        steps than that (`_retention.step_candidates`), written since this store's previous pass (less
        `RETENTION_SLACK_S`; the first pass, and one with another `max_steps`, reads them all),
        `RETENTION_CHUNK_RUNS` runs or `RETENTION_CHUNK_S` a transaction, and a long run's first trim in chunks
        of its oldest steps (`_retention.trim_steps`): the write lock is given back between them, so a write
        waits for one of these transactions, not for the pass."""
        now = time.time() if now is None else now
        started = time.time()  # the wall clock, as writers' `last_update` (`now` may be a test's)
        since = None if self._retained_at is None or max_steps != self._retained_steps \
            else self._retained_at - RETENTION_SLACK_S
        with self._tx(timeout_s=MAINTENANCE_TIMEOUT_S) as conn:  # deleting a long run's rows takes a while
            counts = _retention.apply(conn, max_runs, max_age_s, now)
            candidates = [] if max_steps is None else _retention.step_candidates(conn, max_steps, since)
        while candidates:
            with self._tx(timeout_s=MAINTENANCE_TIMEOUT_S) as conn:
                done = _retention.trim_steps(conn, candidates[:RETENTION_CHUNK_RUNS], max_steps, counts,
                                             RETENTION_CHUNK_S, RETENTION_CHUNK_ROWS)
            candidates = candidates[done:]
        self._retained_at, self._retained_steps = started, max_steps  # not on failure: the next pass reads as many
        return counts
