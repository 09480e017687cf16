"""A step's scalars per writer attempt, and the one object per step that readers read.

    merge_step(conn, run_id, step, start, end, now, {"kl": 0.1}, writer)   # a step record's scalars
    merge_phase_sums(conn, run_id, step, now, {"phase_duration/rollout": 1.5})
    drop_older(conn, run_id, "step = ?", (step,), bound)                  # a takeover (`_attempts`)

`steps.metrics` is the step's object that every read serves (`_step_reads`, exports, replicas): each write merges
its scalars into it in arrival order, as a step row always merged them, so a step reads exactly as before. Who
wrote them (the writer attempt: `grpo.attempt` or `grpo.writer_attempt`; NO_WRITER for a sender that named none)
is kept beside it:
- a step one writer wrote (nearly every step) holds that writer's attempt in `steps.attempt`: its object is that
  writer's scalars (and the step's phase sums), stored once;
- where a second writer merges in, the step splits: each writer's scalars go to `step_scalars`, one object per
  (run, step, attempt), and `steps.attempt` is NULL from then on. A step of no writer's scalars (made by its
  phase spans, or whose writers a takeover removed) is NULL too, and the next writer's alone.
A takeover or a retirement removes the older writers' scalars alone (a sole writer's, or their `step_scalars`
rows) and writes the step's object again from the writers that stay (`rebuild`), in attempt order (a newer
writer's value of a key two sent wins), plus the step's phase sums: a relaunch's other rank or evaluation that
reached the step before its rank 0's claim keeps its scalars, the crashed attempt's go, whatever order the
records came in.

Phase sums (`phase_duration/<name>`) are not a writer's: they are recounted from the step's phase spans, which
carry their own attempts (`_writes._write_phases`), and merged into the step's object only.

Merged here rather than in SQL (SQLite's json_patch re-renders every number with 15 significant digits): Python's
json keeps each double exact (17 digits where needed).
"""

from __future__ import annotations

import json

from ..otlp._extract import PHASE_COLUMN

NO_WRITER = -1
"""The writer attempt of a sender that named none: older than any writer (attempts are positive)."""

_STEP_UPSERT = """
INSERT INTO steps (run_id, step, start_time, end_time, updated_at, metrics, version, attempt)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET
    start_time = coalesce(excluded.start_time, steps.start_time),
    end_time = coalesce(excluded.end_time, steps.end_time),
    updated_at = excluded.updated_at,
    metrics = excluded.metrics,
    version = excluded.version,
    attempt = excluded.attempt
"""
_WRITER_UPSERT = """
INSERT INTO step_scalars (run_id, step, attempt, metrics) VALUES (?, ?, ?, ?)
ON CONFLICT (run_id, step, attempt) DO UPDATE SET metrics = excluded.metrics
"""
_NEXT_VERSION = "UPDATE runs SET step_version = step_version + 1 WHERE run_id = ? RETURNING step_version"


def _dumps(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _next_version(conn, run_id: str) -> int:
    """The run's next step version: readers holding the run's steps read what is newer (_step_series)."""
    return conn.execute(_NEXT_VERSION, (run_id,)).fetchone()[0]


def _own(metrics: dict) -> dict:
    """A sole writer's scalars: its step's object but the phase sums."""
    return {k: v for k, v in metrics.items() if not k.startswith(PHASE_COLUMN)}


def merge_step(conn, run_id: str, step: int, start: float | None, end: float | None, now: float,
               metrics: dict, writer: int | None) -> None:
    """Upsert a step, merging `metrics` into what earlier exports stored for it, as `writer`'s (None: a sender
    that named none). The run's row must exist."""
    writer = NO_WRITER if writer is None else writer
    row = conn.execute("SELECT metrics, attempt FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
    held = json.loads(row[0]) if row else {}
    sole = writer if row is None or row[1] == writer else None
    if sole is None:  # another writer's step, or a split one (of no writer yet: made by its phases, or emptied)
        writers = dict(conn.execute("SELECT attempt, metrics FROM step_scalars WHERE run_id = ? AND step = ?",
                                    (run_id, step)).fetchall())
        if row[1] is None and not writers:
            sole = writer
        else:  # a second writer: each one's scalars apart
            if row[1] is not None:  # the sole writer's until now
                conn.execute(_WRITER_UPSERT, (run_id, step, row[1], _dumps(_own(held))))
            own = json.loads(writers[writer]) if writer in writers else {}
            conn.execute(_WRITER_UPSERT, (run_id, step, writer, _dumps({**own, **metrics})))
    conn.execute(_STEP_UPSERT, (run_id, step, start, end, now, _dumps({**held, **metrics}),
                                _next_version(conn, run_id), sole))


def merge_phase_sums(conn, run_id: str, step: int, now: float, sums: dict[str, float]) -> None:
    """Merge a step's phase sums (recounted from its phase spans) into the step's object alone: a step its
    phases make has no writer yet."""
    row = conn.execute("SELECT metrics, attempt FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
    merged = _dumps({**json.loads(row[0]), **sums} if row else sums)
    conn.execute(_STEP_UPSERT, (run_id, step, None, None, now, merged, _next_version(conn, run_id),
                                None if row is None else row[1]))


def drop_older(conn, run_id: str, where: str, params: tuple, bound: int) -> set[int]:
    """Remove the scalars that writers older than `bound` (NO_WRITER included: bound 0 removes only those) sent
    for the run's steps that `where` selects (its `?` bound to `params`); returns those steps, whose object is
    then stale (`rebuild`). A step such a writer wrote alone is left split, of no writer."""
    sole = conn.execute(f"UPDATE steps SET attempt = NULL WHERE run_id = ? AND {where} AND attempt < ? RETURNING step",
                        (run_id, *params, bound)).fetchall()
    split = conn.execute(f"DELETE FROM step_scalars WHERE run_id = ? AND {where} AND attempt < ? RETURNING step",
                         (run_id, *params, bound)).fetchall()
    return {step for (step,) in sole + split}


def rebuild(conn, run_id: str, step: int) -> None:
    """Write the step's object again: its sole writer's scalars, or the split step's writers' that stay (oldest
    first), then its phase sums."""
    row = conn.execute("SELECT metrics, attempt FROM steps WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
    if row is None:
        return
    view: dict = {} if row[1] is None else _own(json.loads(row[0]))
    for (metrics,) in conn.execute("SELECT metrics FROM step_scalars WHERE run_id = ? AND step = ? ORDER BY attempt",
                                   (run_id, step)).fetchall():
        view.update(json.loads(metrics))
    view.update(phase_sums(conn, run_id, step))
    conn.execute("UPDATE steps SET metrics = ?, version = ? WHERE run_id = ? AND step = ?",
                 (_dumps(view), _next_version(conn, run_id), run_id, step))


def phase_sums(conn, run_id: str, step: int) -> dict[str, float]:
    """The step's phase durations summed per name over its phase spans: idempotent under re-delivery."""
    rows = conn.execute("SELECT name, sum(duration) FROM phases WHERE run_id = ? AND step = ? GROUP BY name",
                        (run_id, step)).fetchall()
    return {PHASE_COLUMN + name: total for name, total in rows}
