"""Attempts at a step (catalog `spans`): a newer attempt replaces an older one's rows, and the run reads as it.

A relaunched or resumed job sends its steps again with other completions and other scalars. Every record says
the attempt of the process that wrote it; rank 0's training records claim their step for it (`grpo.attempt`),
the others (an evaluation, another rank's) merge into the step (`grpo.writer_attempt`). Samples, phases and
each writer's scalars of a step (`_step_scalars`: a step's sole writer's, or, where several wrote it, each
one's apart; the step's object that reads serve is written again from them where some go) keep their writers'
attempt. A sample row is named by its writer's attempt too (`SampleRecord.uid`: its index, then `@<attempt>`), so
two attempts' rows at a step (a relaunch's evaluation at the checkpoint's step, numbered from 0 as the crashed
attempt's training there was) never take each other's place on insert: which of them stay is said here alone.

What the store holds, per run and per step:
- the run's floor (`runs.attempt`, `attempt_step`, `attempt_since`): its newest claiming attempt, the first step
  that attempt claimed (where it resumed), and the first writer attempt counted as its (`writers_from`). Every
  step from there on is that attempt's, whether or not the store has a row of it.
- `step_attempts`: the newest attempt that claimed each step it has a row for.

A claim of an attempt newer than the one holding its step takes the step over: what older attempts' writers
(and senders that named none) stored there goes, samples, phases and scalars together, while the rows and
scalars another rank or an evaluation of the claiming attempt sent first stay, whatever order they came in.
A claim newer than the run's floor moves the floor to it: the older attempts' later steps belong to a run that
no longer is (the relaunch runs them again, or crashed before it got there), and go with their samples and
phases (a step row stays where newer writers sent scalars or phases to it, of theirs alone); the run reads as
the relaunch, up to its latest step, never a mix of the relaunch's early steps and the crashed attempt's later
ones. From then on a record of an older attempt at a step from the floor on is stale and dropped, however late
it comes and whether or not the step exists (a retried export, a replayed spill, a record below what
`max_steps` retention kept); a claim of an older attempt than its step's holder is stale anywhere; the same
attempt (a re-sent export, a replay) merges, so re-delivery stays idempotent. The run's first claim removes only
rows of senders that named none: at its step, and at every later step (a job of a release before attempts,
relaunched by this one).
A claim of an attempt older than the floor's but newer than the one before it that the floor knew (a middle
launch whose exports came late) moves the floor's writers' boundary up to halfway between the two, as `otel-grpo
replay` counts it with every claim known, and retires what that launch's writers sent from the floor's step on.
Records without an attempt merge as before.

Runs inside `Writes.write_batch`'s transaction, after it has serialized with the other writers; the floor
comes with the run's row that transaction upserts anyway, so the only reads are the claimed steps' holders.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from otel_grpo.catalog.spans import writers_from

from ..otlp._extract import Batch
from . import _step_scalars

_UPSERT = """
INSERT INTO step_attempts (run_id, step, attempt) VALUES (?, ?, ?)
ON CONFLICT (run_id, step) DO UPDATE SET attempt = excluded.attempt
"""
_FLOOR = "UPDATE runs SET attempt = ?, attempt_step = ?, attempt_since = ? WHERE run_id = ?"

_OLDER = "(attempt IS NULL OR attempt < ?)"
"""Rows written by an attempt older than the parameter, or by a sender that named none: the parameter is a
writers' boundary (`writers_from`), 0 where none is known (then only the latter)."""


@dataclass(frozen=True, slots=True)
class Floor:
    """A run's newest claiming attempt and where it resumed (the columns `runs.attempt*`)."""

    attempt: int
    step: int
    """The first step `attempt` claimed: every step from here on is its."""
    since: int | None
    """The first writer attempt counted as `attempt`'s (`writers_from`); None: no older attempt claimed steps."""

    def covers(self, step: int) -> bool:
        return step >= self.step


def floor_of(row) -> Floor | None:
    """The floor from a run row's (attempt, attempt_step, attempt_since); None before its first claim."""
    return None if row[0] is None else Floor(row[0], row[1], row[2])


@dataclass(slots=True)
class Settled:
    floors: dict[str, Floor] = field(default_factory=dict)
    """Each run's floor after this write."""
    newest: dict[tuple[str, int], int] = field(default_factory=dict)
    """The attempt holding each step this batch claims, after this write."""
    replaced: dict[tuple[str, int], bool] = field(default_factory=dict)
    """Steps this batch took over, and whether older rows went (their scalars start over)."""
    removed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Sample rows of older attempts removed, per run."""
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """This batch's sample rows of a stale attempt, inserted with the others and taken out again, per run."""
    retired: set[str] = field(default_factory=set)
    """Runs whose older attempts' later steps this write removed (`_retire`): their step range and
    sample count are recounted, and readers holding their steps read them again."""

    def stale(self, record) -> bool:
        """A record (step, phase or sample) of an attempt older than the one holding its step: dropped."""
        attempt, run_id = record.attempt, record.run_id
        if attempt is None or run_id is None:
            return False
        floor = self.floors.get(run_id)
        if floor is not None and floor.covers(record.step):  # the newest attempt's step: older writers' are stale
            older_than = floor.attempt if record.claims else floor.since
            if older_than is not None and attempt < older_than:
                return True
        held = self.newest.get((run_id, record.step))
        return record.claims and held is not None and attempt < held


def settle(conn, batch: Batch, floors: dict[str, Floor]) -> Settled:
    """Bring each run's floor and each step the batch claims to their newest attempt; `floors`: the runs'
    floors before this write. Returns what the rest of the write must skip and the samples removed."""
    out = Settled(floors=dict(floors))
    claims: dict[tuple[str, int], int] = {}  # step -> the newest attempt claiming it in this batch
    for rec in (*batch.steps, *batch.samples, *batch.phases):
        if rec.claims and rec.attempt is not None and rec.run_id is not None and rec.step is not None:
            key = (rec.run_id, rec.step)
            claims[key] = max(claims.get(key, rec.attempt), rec.attempt)
    retire = _move_floors(conn, claims, out)
    for (run_id, step), attempt in sorted(claims.items()):
        floor, before = out.floors[run_id], floors.get(run_id)
        if floor.covers(step) and attempt < floor.attempt:  # a step the newest attempt holds: stale claims
            out.newest[(run_id, step)] = floor.attempt
            continue
        row = conn.execute("SELECT attempt FROM step_attempts WHERE run_id = ? AND step = ?", (run_id, step)).fetchone()
        stored = None if row is None else row[0]
        held = _newer(stored, before.attempt if before is not None and before.covers(step) else None)
        if stored is None or attempt > stored:
            conn.execute(_UPSERT, (run_id, step, attempt))
        if held is None or attempt > held:  # taken over: what older attempts' writers stored goes
            since = floor.since if attempt == floor.attempt else writers_from(held, attempt)
            out.replaced[(run_id, step)] = _take_over(conn, run_id, step, since, out)
        out.newest[(run_id, step)] = _newer(held, attempt)  # type: ignore[assignment]
    _drop_stale_samples(conn, batch, out)  # before the retirements, which would count them as stored before
    # after every claimed step is settled: a later step the batch claims is taken over (its rows go in
    # again), not taken for one of the run that no longer is
    for run_id, (above, below) in retire.items():
        _retire(conn, run_id, above, below, out.floors[run_id], out)
    return out


def _move_floors(conn, claims: dict[tuple[str, int], int], out: Settled) -> dict[str, tuple[int, int | None]]:
    """Each run's floor after the batch's claims, stored where it moved; returns the steps to retire per run:
    (above, below), below None for every later step."""
    by_run: dict[str, dict[int, int]] = defaultdict(dict)  # run -> attempt -> the first step it claims here
    for (run_id, step), attempt in claims.items():
        firsts = by_run[run_id]
        firsts[attempt] = min(firsts.get(attempt, step), step)
    retire = {}
    for run_id, firsts in by_run.items():
        old = out.floors.get(run_id)
        newest = max(firsts)
        if old is None or newest > old.attempt:  # a newer attempt: a relaunch, from its first step on
            before = max([a for a in firsts if a < newest] + ([old.attempt] if old else []), default=None)
            floor = Floor(newest, firsts[newest], writers_from(before, newest))
            # the run's first claim: what senders that named no attempt (a release before attempts, whose job
            # this one was relaunched from) stored after it goes, as a relaunch's older attempts' later steps
            retire[run_id] = (floor.step, None)
        else:  # the floor's attempt resumed earlier than seen, or an older one's claims came late
            step = min(old.step, firsts.get(old.attempt, old.step))
            older = [a for a in firsts if a < old.attempt]
            # a launch between the floor's and the one before it that the floor knew (its exports late): its
            # writers are not the floor's, as `writers_from` counts them with every claim known (as replay does)
            since = old.since if not older else _newer(old.since, writers_from(max(older), old.attempt))
            if (step, since) == (old.step, old.since):
                continue
            floor = Floor(old.attempt, step, since)
            # the steps from old.step on were retired when it came, but for writers the floor counted as its
            retire[run_id] = (step, old.step) if since == old.since else (step - 1, None)
        out.floors[run_id] = floor
        conn.execute(_FLOOR, (floor.attempt, floor.step, floor.since, run_id))
    return retire


def _newer(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _take_over(conn, run_id: str, step: int, since: int | None, out: Settled) -> bool:
    """Remove what writers older than `since` (or senders that named none) stored for the step; True if any."""
    bound = 0 if since is None else since
    removed = conn.execute(f"DELETE FROM samples WHERE run_id = ? AND step = ? AND {_OLDER}",
                           (run_id, step, bound)).rowcount
    out.removed[run_id] += removed
    phases = conn.execute(f"DELETE FROM phases WHERE run_id = ? AND step = ? AND {_OLDER}",
                          (run_id, step, bound)).rowcount
    scalars = _step_scalars.drop_older(conn, run_id, "step = ?", (step,), bound)
    if scalars or phases:  # the step's object again, of the newer writers' scalars that stay
        _step_scalars.rebuild(conn, run_id, step)
    return bool(removed or phases or scalars)


def _retire(conn, run_id: str, above: int, below: int | None, floor: Floor, out: Settled) -> None:
    """Remove what writers older than the floor's (or senders that named none) stored at the steps after
    `above` (and before `below`), and claim those steps for the floor's attempt. What newer writers stored there
    (records arriving out of order, another rank's or an evaluation's before the claim) stays: a step row goes
    where nothing of theirs is left, else its object is written again of theirs."""
    where = "step > ?" + ("" if below is None else " AND step < ?")
    span = (above,) if below is None else (above, below)
    bound = 0 if floor.since is None else floor.since  # none known: only senders that named none
    removed = conn.execute(f"DELETE FROM samples WHERE run_id = ? AND {where} AND {_OLDER}",
                           (run_id, *span, bound)).rowcount
    out.removed[run_id] += removed
    touched = {step for (step,) in conn.execute(
        f"DELETE FROM phases WHERE run_id = ? AND {where} AND {_OLDER} RETURNING step", (run_id, *span, bound))}
    touched |= _step_scalars.drop_older(conn, run_id, where, span, bound)
    # a step row of no writer's scalars (`_step_scalars`) and no phases goes, but one the floor's attempt claimed
    gone = {step for (step,) in conn.execute(
        f"DELETE FROM steps WHERE run_id = ? AND {where} AND attempt IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM step_scalars AS w WHERE w.run_id = steps.run_id AND w.step = steps.step) "
        "AND NOT EXISTS (SELECT 1 FROM phases AS p WHERE p.run_id = steps.run_id AND p.step = steps.step) "
        "AND NOT EXISTS (SELECT 1 FROM step_attempts AS a WHERE a.run_id = steps.run_id AND a.step = steps.step "
        "AND a.attempt >= ?) RETURNING step", (run_id, *span, floor.attempt))}
    for step in sorted(touched - gone):
        _step_scalars.rebuild(conn, run_id, step)
    conn.execute(f"DELETE FROM step_spans WHERE run_id = ? AND {where} AND NOT EXISTS (SELECT 1 FROM steps AS s "
                 "WHERE s.run_id = step_spans.run_id AND s.step = step_spans.step)", (run_id, *span))
    conn.execute(f"UPDATE step_attempts SET attempt = ? WHERE run_id = ? AND {where} AND attempt < ?",
                 (floor.attempt, run_id, *span, floor.attempt))
    if removed or touched:
        out.retired.add(run_id)


def _drop_stale_samples(conn, batch: Batch, out: Settled) -> None:
    """This batch's sample rows of a stale record went in with the others, before the settling: out again.
    Whatever else the store holds of that attempt at that step is as stale."""
    groups = {(s.run_id, s.step, s.attempt) for s in batch.samples if out.stale(s)}
    for run_id, step, attempt in sorted(groups):
        out.dropped[run_id] += conn.execute("DELETE FROM samples WHERE run_id = ? AND step = ? AND attempt = ?",
                                            (run_id, step, attempt)).rowcount
