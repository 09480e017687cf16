"""Attempts at a step (`grpo.attempt`, catalog `spans`): a newer attempt replaces an older one's rows.

A relaunched or resumed job sends its steps again with other completions and other scalars. The
store keeps one attempt per step, the newest it has seen (`step_attempts`): a write carrying a newer
attempt first removes the step's samples and phases of older attempts (and rows stored with none) and
empties its scalars, so the step never shows one attempt's completions beside another's metrics;
records of an older attempt are dropped; records of the same attempt (a re-sent export, a replay)
merge as always, so re-delivery stays idempotent. Records without an attempt merge as before (an
evaluation claims none: it merges into whichever attempt trained its step).

A newer attempt that re-sends a step the store holds from an older one resumed from before it: the
older attempts' later steps belong to a run that no longer is (the relaunch runs them again, or
crashed before it got there). They are removed with their samples and phases, and claimed for the
newer attempt so that a late record of theirs is dropped: the run reads as the relaunch, up to its
latest step, never a mix of the relaunch's early steps and the crashed attempt's later ones.

Runs inside `Writes.write_batch`'s transaction, after it has serialized with the other writers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..otlp._extract import Batch

_UPSERT = """
INSERT INTO step_attempts (run_id, step, attempt) VALUES (?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET attempt = excluded.attempt
"""


_OLDER = "(attempt IS NULL OR attempt < ?)"  # rows of an older attempt, or of a sender that named none


@dataclass(slots=True)
class Settled:
    newest: dict[tuple[str, int], int] = field(default_factory=dict)
    """Each step's attempt after this write."""
    replaced: dict[tuple[str, int], bool] = field(default_factory=dict)
    """Steps whose older attempt's rows were removed by this write (their scalars start over)."""
    removed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Sample rows of older attempts removed, per run."""
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """This batch's sample rows of a stale attempt, inserted with the others and taken out again, per run."""
    retired: set[str] = field(default_factory=set)
    """Runs whose older attempts' later steps this write removed (`_retire_after`): their step range and
    sample count are recounted, and readers holding their steps read them again."""

    def stale(self, run_id: str | None, step: int | None, attempt: int | None) -> bool:
        """A record of an attempt older than its step's newest: dropped."""
        return attempt is not None and attempt < self.newest.get((run_id, step), attempt)  # type: ignore[arg-type]


def settle(conn, batch: Batch) -> Settled:
    """Bring each step the batch names an attempt for to its newest attempt; returns what the rest of the
    write must skip and the samples removed."""
    out = Settled()
    sent: dict[tuple[str, int], tuple[int, int]] = {}  # step -> (newest, oldest) attempt in this batch
    for rec in (*batch.steps, *batch.samples, *batch.phases):
        if rec.attempt is not None and rec.run_id is not None and rec.step is not None:
            key = (rec.run_id, rec.step)
            newest, oldest = sent.get(key, (rec.attempt, rec.attempt))
            sent[key] = (max(newest, rec.attempt), min(oldest, rec.attempt))
    resumed = []  # (run, step, attempt): a newer attempt re-sent a step an older one had sent
    for (run_id, step), (newest, oldest) in sorted(sent.items()):
        row = conn.execute("SELECT attempt FROM step_attempts WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
        stored = None if row is None else row[0]
        final = newest if stored is None else max(stored, newest)
        out.newest[(run_id, step)] = final
        if stored is None or final > stored:
            conn.execute(_UPSERT, (run_id, step, final))
            out.replaced[(run_id, step)] = _replace(conn, run_id, step, final, out)
            if stored is not None:
                resumed.append((run_id, step, final))
        elif oldest < final:  # this batch's rows of an older attempt went in with the samples: take them out
            out.dropped[run_id] += _remove_samples(conn, run_id, step, final)
    # after every step of the batch is settled: a later step it re-sends is replaced (its rows go in
    # again), not taken for one of the run that no longer is
    for run_id, step, attempt in resumed:
        _retire_after(conn, run_id, step, attempt, out)
        for key, held in out.newest.items():  # this batch's own records of the retired steps: stale too
            if key[0] == run_id and key[1] > step and held < attempt:
                out.newest[key] = attempt
    return out


def _replace(conn, run_id: str, step: int, attempt: int, out: Settled) -> bool:
    """Remove what older attempts (or senders that named none) stored for the step; True if anything was."""
    removed = _remove_samples(conn, run_id, step, attempt)
    out.removed[run_id] += removed
    phases = conn.execute(f"DELETE FROM phases WHERE run_id = ? AND step = ? AND {_OLDER}",
                          (run_id, step, attempt)).rowcount
    scalars = conn.execute("SELECT 1 FROM steps WHERE run_id = ? AND step = ? AND metrics <> '{}'",
                           (run_id, step)).fetchone() is not None
    if scalars:
        (version,) = conn.execute("UPDATE runs SET step_version = step_version + 1 WHERE run_id = ? "
                                  "RETURNING step_version", (run_id,)).fetchone()
        conn.execute("UPDATE steps SET metrics = '{}', version = ? WHERE run_id = ? AND step = ?",
                     (version, run_id, step))
    return bool(removed or phases or scalars)


def _retire_after(conn, run_id: str, step: int, attempt: int, out: Settled) -> None:
    """Remove what attempts older than `attempt` (or senders that named none) stored after `step`, and claim
    those steps for `attempt`. Steps it has already sent itself (records arriving out of order) stay."""
    removed = conn.execute(f"DELETE FROM samples WHERE run_id = ? AND step > ? AND {_OLDER}",
                           (run_id, step, attempt)).rowcount
    out.removed[run_id] += removed
    gone = removed + conn.execute(f"DELETE FROM phases WHERE run_id = ? AND step > ? AND {_OLDER}",
                                  (run_id, step, attempt)).rowcount
    for table in ("steps", "step_spans"):
        gone += conn.execute(
            f"DELETE FROM {table} WHERE run_id = ? AND step > ? AND NOT EXISTS (SELECT 1 FROM step_attempts AS a "
            f"WHERE a.run_id = {table}.run_id AND a.step = {table}.step AND a.attempt >= ?)",
            (run_id, step, attempt)).rowcount
    conn.execute("UPDATE step_attempts SET attempt = ? WHERE run_id = ? AND step > ? AND attempt < ?",
                 (attempt, run_id, step, attempt))
    if gone:
        out.retired.add(run_id)


def _remove_samples(conn, run_id: str, step: int, attempt: int) -> int:
    return conn.execute(f"DELETE FROM samples WHERE run_id = ? AND step = ? AND {_OLDER}",
                        (run_id, step, attempt)).rowcount
