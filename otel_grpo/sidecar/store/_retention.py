"""Retention: by number of runs, steps per run, and age. Runs inside writers' transactions (the store's
`apply_retention`), on either store (the statements are written for both)."""

from __future__ import annotations

import math
import time

_ORPHAN_PHASE_S = 3600.0  # a phase whose step span never came is kept this long, then dropped


def _delete_run(conn, run_id: str, counts: dict[str, int]) -> None:
    for table in ("samples", "steps", "step_spans", "phases", "runs"):
        counts[table] += conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,)).rowcount
    for table in ("step_scalars", "step_attempts", "step_columns"):  # per writer, bookkeeping: not counted
        conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))


def _delete_before(conn, run_id: str, step: int, counts: dict[str, int]) -> None:
    for table in ("samples", "steps", "step_spans", "phases"):
        counts[table] += conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND step < ?", (run_id, step)).rowcount
    for table in ("step_scalars", "step_attempts"):
        conn.execute(f"DELETE FROM {table} WHERE run_id = ? AND step < ?", (run_id, step))


def refresh_run(conn, run_id: str, steps_deleted: bool) -> None:
    """Recount a run's step range and sample count after deletions. Where steps were deleted, a
    new step epoch tells the readers holding the run's steps in memory to read them again
    (_step_series)."""
    conn.execute("""
        UPDATE runs SET
            step_epoch = step_epoch + ?,
            first_step = (SELECT min(s) FROM (SELECT min(step) AS s FROM steps WHERE run_id = ?
                                              UNION ALL SELECT min(step) FROM samples WHERE run_id = ?) AS u),
            last_step = (SELECT max(s) FROM (SELECT max(step) AS s FROM steps WHERE run_id = ?
                                             UNION ALL SELECT max(step) FROM samples WHERE run_id = ?) AS u),
            sample_count = (SELECT count(*) FROM samples WHERE run_id = ?)
        WHERE run_id = ?""", (int(steps_deleted), *(run_id,) * 6))


def apply(conn, max_runs: int | None, max_age_s: float | None, now: float) -> dict[str, int]:
    """The set-based rules, by number of runs and by age, in one transaction; returns rows deleted per table.
    A few statements whatever the store's size, and per-run statements only for the runs they delete or
    recount. (`max_steps` is `step_candidates` and `trim_steps`, a few runs a transaction.)"""
    counts = new_counts()
    if max_runs is not None:
        ranked = conn.execute("SELECT run_id FROM runs ORDER BY last_update DESC, run_id").fetchall()
        for (run_id,) in ranked[max_runs:]:
            _delete_run(conn, run_id, counts)
    touched: dict[str, bool] = {}  # run -> whether steps of it were deleted
    if max_age_s is not None:
        cutoff = now - max_age_s
        for (run_id,) in conn.execute("SELECT run_id FROM runs WHERE last_update < ?", (cutoff,)).fetchall():
            _delete_run(conn, run_id, counts)
        # the runs whose samples age out: recounted below (not every run of the store: one statement each)
        aged = conn.execute("SELECT DISTINCT run_id FROM samples WHERE time < ?", (cutoff,)).fetchall()
        n = conn.execute("DELETE FROM samples WHERE time < ?", (cutoff,)).rowcount
        old_steps = "FROM steps WHERE coalesce(end_time, updated_at) < ?"
        touched.update((r, True) for (r,) in conn.execute(f"SELECT DISTINCT run_id {old_steps}", (cutoff,)).fetchall())
        conn.execute(f"DELETE FROM step_scalars WHERE (run_id, step) IN (SELECT run_id, step {old_steps})", (cutoff,))
        m = conn.execute(f"DELETE {old_steps}", (cutoff,)).rowcount
        counts["samples"] += n
        counts["steps"] += m
        counts["alerts"] += conn.execute("DELETE FROM alerts WHERE received_at < ?", (cutoff,)).rowcount
        touched.update((r, touched.get(r, False)) for (r,) in aged)
    counts["phases"] += conn.execute("DELETE FROM phases WHERE run_id IS NULL AND received_at < ?",
                                     (now - _ORPHAN_PHASE_S,)).rowcount
    for run_id, steps_deleted in touched.items():
        refresh_run(conn, run_id, steps_deleted)
    return counts


def new_counts() -> dict[str, int]:
    return dict.fromkeys(("samples", "steps", "step_spans", "phases", "runs", "alerts"), 0)


def step_candidates(conn, max_steps: int, since: float | None) -> list[str]:
    """The runs that may hold more than `max_steps` steps: those whose step range (`first_step`..`last_step`,
    which every write widens to its steps, samples and phases) is longer, and, where `since` is given, that were
    written (`last_update`) since then. One statement, on the runs table alone (`runs_last_update` indexes
    `since`): a run that cannot hold more is never read, so a pass costs what changed, not the store's size."""
    sql, params = "SELECT run_id FROM runs WHERE last_step - first_step >= ?", [max_steps]
    if since is not None:
        sql += " AND last_update >= ?"
        params.append(since)
    return [run_id for (run_id,) in conn.execute(sql + " ORDER BY run_id", params).fetchall()]


def trim_steps(conn, run_ids: list[str], max_steps: int, counts: dict[str, int], budget_s: float = math.inf,
               chunk_rows: int = 20_000) -> int:
    """Keep the latest `max_steps` steps (and their samples) of each of `run_ids`, in order, until `budget_s` has
    passed (one run at least); add the rows deleted to `counts`; returns how many runs it finished. One statement
    a run that keeps all its steps; eight and a few for one that loses some.

    A run's oldest steps go `chunk_rows` sample rows at most a call (its rows per step, from its sample count and
    step range): the first trim of a long run, millions of rows, held the write lock for as long as it took. A run
    left with more steps to delete is not finished: the call ends there, and the caller calls again for it, in a
    transaction of its own, once writes have had the lock."""
    deadline = time.monotonic() + budget_s
    for done, run_id in enumerate(run_ids):
        if done and time.monotonic() >= deadline:
            return done
        row = conn.execute(f"""
            SELECT step FROM ({_STEPS_OF_RUN}) AS u ORDER BY step DESC LIMIT 1 OFFSET ?""",
                           (run_id, run_id, max_steps - 1)).fetchone()
        if row is None:
            continue
        keep_from, finished = row[0], True
        first, last, samples = conn.execute("SELECT first_step, last_step, sample_count FROM runs WHERE run_id = ?",
                                            (run_id,)).fetchone()
        per_step = max(1.0, (samples or 0) / max(1, (last or 0) - (first or 0) + 1))
        if per_step * (keep_from - (first or 0)) > chunk_rows:  # more than a chunk, by its average: read where it ends
            chunk = conn.execute(f"""
                SELECT step FROM ({_STEPS_OF_RUN}) AS u WHERE step < ? ORDER BY step LIMIT 1 OFFSET ?""",
                                 (run_id, run_id, keep_from, max(1, int(chunk_rows / per_step)))).fetchone()
            if chunk is not None:  # its oldest steps now, the rest in the next call
                keep_from, finished = chunk[0], False
        before = dict(counts)
        _delete_before(conn, run_id, keep_from, counts)
        if counts != before:
            refresh_run(conn, run_id, counts["steps"] > before["steps"])
        if not finished:
            return done
    return len(run_ids)


_STEPS_OF_RUN = "SELECT step FROM steps WHERE run_id = ? UNION SELECT DISTINCT step FROM samples WHERE run_id = ?"
"""The steps a run holds rows of (bind its run id twice)."""
