"""What a retention pass reads and how long it holds the write lock, by statements and transactions (no
timings): its work follows what changed since the last pass, not how many runs the store holds, and the
`max_steps` rule gives the lock back between chunks of runs. On both backends (`db`)."""

from __future__ import annotations

import contextlib
import time

import psycopg
import pytest

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import _retention, _writes, describe, open_store
from otel_grpo.sidecar.store._errors import MAINTENANCE_APPLICATION_NAME

PER_RUN_READ = "UNION SELECT DISTINCT step FROM samples WHERE run_id"  # max_steps' read of one run
RECOUNT = "step_epoch = step_epoch +"  # a run's recount (`refresh_run`)


class _Conn:
    def __init__(self, conn, statements: list[str]) -> None:
        self._conn, self._statements = conn, statements

    def execute(self, sql, *args):
        self._statements.append(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        self._statements.append(sql)
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _counted(store) -> list[list[str]]:
    """From now on, the statements of each of the store's write transactions, one list a transaction."""
    transactions: list[list[str]] = []
    tx = store._tx

    @contextlib.contextmanager
    def counting(*args, **kwargs):
        with tx(*args, **kwargs) as conn:
            transactions.append([])
            yield _Conn(conn, transactions[-1])

    store._tx = counting
    return transactions


def _pass(store, **rules) -> tuple[dict[str, int], list[list[str]]]:
    """One retention pass; returns rows deleted and the statements of its transactions."""
    transactions = _counted(store)
    try:
        return store.apply_retention(**rules), transactions
    finally:
        del store._tx


def _reads(transactions, what: str = PER_RUN_READ) -> int:
    return sum(sql.count(what) for statements in transactions for sql in statements)


def _load(store, otlp, run_id, steps, samples=1):
    store.write_batch(extract(otlp.request(otlp.spans(run_id, steps, samples=samples))))


def test_a_max_steps_pass_reads_no_run_that_cannot_hold_more_steps(db, otlp):
    """The reviewer's store: many short runs, `max_steps` far above their length. A pass read each run (one
    statement each, in the writers' transaction: seconds at thousands of runs, ingest refused meanwhile); it
    reads none of them, however many there are."""
    store = open_store(db)
    for i in range(3):
        _load(store, otlp, f"short-{i}", range(3))
    deleted, few = _pass(store, max_steps=5)
    assert not any(deleted.values()) and _reads(few) == 0
    for i in range(3, 30):
        _load(store, otlp, f"short-{i}", range(3))
    deleted, many = _pass(store, max_steps=5)
    assert not any(deleted.values()) and _reads(many) == 0
    assert sum(map(len, many)) == sum(map(len, few))  # as many statements for 30 runs as for 3
    store.close()


def test_a_later_max_steps_pass_reads_only_the_runs_written_since(db, otlp, monkeypatch):
    """Runs whose steps are sparse (every 10th) stay longer than `max_steps` by their range, yet hold fewer:
    the first pass reads them; a later one, only those written since (less the slack, here none)."""
    monkeypatch.setattr(_writes, "RETENTION_SLACK_S", 0.0)
    store = open_store(db)
    for run_id in ("a", "b", "c"):
        _load(store, otlp, run_id, range(0, 50, 10))
    _, first = _pass(store, max_steps=10)
    assert _reads(first) == 3
    time.sleep(0.01)  # the write's clock after the pass began, on any clock resolution
    _load(store, otlp, "b", [60])
    deleted, later = _pass(store, max_steps=10)
    assert _reads(later) == 1 and not any(deleted.values())
    assert _reads(_pass(store, max_steps=10)[1]) == 0  # nothing written: nothing read
    assert _reads(_pass(store, max_steps=3)[1]) == 3  # another max_steps: all read again, and trimmed
    assert {r["run_id"]: r["first_step"] for r in store.runs()} == {"a": 20, "b": 30, "c": 20}
    store.close()


def test_a_max_steps_pass_gives_the_write_lock_back_between_chunks_of_runs(db, otlp, monkeypatch):
    monkeypatch.setattr(_writes, "RETENTION_CHUNK_RUNS", 2)
    monkeypatch.setattr(_writes, "RETENTION_CHUNK_S", 60.0)  # the runs bound alone
    store = open_store(db)
    for i in range(5):
        _load(store, otlp, f"long-{i}", range(4))
    deleted, transactions = _pass(store, max_steps=2)
    assert deleted["steps"] == 10 and deleted["samples"] == 10
    # the rules by runs and age, and the candidates: one transaction; then 3 of at most 2 runs each
    assert [_reads([t]) for t in transactions] == [0, 2, 2, 1]
    for i in range(5):
        assert [r["step"] for r in store.steps(f"long-{i}")] == [2, 3]
    assert {r["first_step"] for r in store.runs()} == {2}
    store.close()


def test_a_long_runs_first_trim_goes_in_chunks_of_its_oldest_steps(db, otlp, monkeypatch):
    """A run whose first trim deletes more sample rows than `RETENTION_CHUNK_ROWS` (max_steps set on a store of
    long runs: millions of rows, the write lock held until they were gone) loses its oldest steps a chunk a
    transaction, the lock given back between them, and ends with its latest `max_steps` as in one go; the next
    run of the pass is trimmed after it."""
    monkeypatch.setattr(_writes, "RETENTION_CHUNK_ROWS", 12)  # 3 steps of 4 samples
    store = open_store(db)
    _load(store, otlp, "long", range(12), samples=4)
    _load(store, otlp, "other", range(4), samples=4)
    deleted, transactions = _pass(store, max_steps=2)
    assert deleted["steps"] == 10 + 2 and deleted["samples"] == 40 + 8
    steps_deleted = [sum(sql.startswith("DELETE FROM steps") for sql in t) for t in transactions]
    assert steps_deleted == [0, 1, 1, 1, 2]  # long's 10 steps: 3, 3, 3, then 1 and other's in one transaction
    assert [r["step"] for r in store.steps("long")] == [10, 11]
    assert [r["step"] for r in store.steps("other")] == [2, 3]
    assert {r["run_id"]: (r["first_step"], r["sample_count"]) for r in store.runs()} == {"long": (10, 8), "other": (2, 8)}
    store.close()


def test_a_max_steps_chunk_ends_once_its_time_is_spent(db, otlp, monkeypatch):
    """However far the database (each statement a round trip), a chunk reads no further run once
    `RETENTION_CHUNK_S` has passed: here none is left, so each transaction reads one run."""
    monkeypatch.setattr(_writes, "RETENTION_CHUNK_S", 0.0)
    store = open_store(db)
    for i in range(3):
        _load(store, otlp, f"long-{i}", range(4))
    deleted, transactions = _pass(store, max_steps=2)
    assert [_reads([t]) for t in transactions] == [0, 1, 1, 1] and deleted["steps"] == 6
    store.close()


def test_an_age_pass_recounts_only_the_runs_whose_rows_aged(db, otlp):
    """Samples older than `max_age_s` deleted from one run recount that run alone, not every run of the store
    (one statement each, in the writers' transaction)."""
    store = open_store(db)
    _load(store, otlp, "mixed", [0])
    time.sleep(0.05)
    cutoff = time.time()
    time.sleep(0.05)
    _load(store, otlp, "mixed", [1])
    for i in range(10):
        _load(store, otlp, f"recent-{i}", [0])
    now = time.time()
    deleted, transactions = _pass(store, max_age_s=now - cutoff, now=now)
    assert deleted["samples"] == 1 and deleted["runs"] == 0
    assert _reads(transactions, RECOUNT) == 1
    run = {r["run_id"]: r for r in store.runs()}["mixed"]
    assert (run["first_step"], run["sample_count"]) == (1, 1)
    store.close()


def test_a_step_a_late_phase_makes_again_widens_its_runs_step_range(db, otlp):
    """Age retention deletes a step but not its span's link; a phase of that step arriving later makes the
    step again. The run's step range takes it in, or `max_steps`, which reads only runs whose range is longer
    than it keeps, would never trim that run."""
    store = open_store(db)
    early = otlp.spans("late", [0])
    store.write_batch(extract(otlp.request(early)))
    time.sleep(0.05)
    cutoff = time.time()
    time.sleep(0.05)
    _load(store, otlp, "late", range(1, 4))
    now = time.time()
    assert store.apply_retention(max_age_s=now - cutoff, now=now)["steps"] == 1
    assert store.runs()[0]["first_step"] == 1
    store.write_batch(extract(otlp.request([s for s in early if s.name.startswith("grpo.phase.")])))
    assert [r["step"] for r in store.steps("late")] == [0, 1, 2, 3]
    assert store.runs()[0]["first_step"] == 0
    store.apply_retention(max_steps=3)
    assert [r["step"] for r in store.steps("late")] == [1, 2, 3]
    store.close()


def test_a_max_steps_pass_that_fails_part_way_leaves_the_rest_to_the_next(db, otlp, monkeypatch):
    """A pass that fails after some chunks (the database gone a moment) does not move the store's mark: the
    next pass reads the runs it left, though none was written since."""
    monkeypatch.setattr(_writes, "RETENTION_CHUNK_RUNS", 1)
    monkeypatch.setattr(_writes, "RETENTION_SLACK_S", 0.0)
    store = open_store(db)
    for i in range(3):
        _load(store, otlp, f"long-{i}", range(4))
    tx, entered = store._tx, []

    def failing(*args, **kwargs):
        entered.append(1)
        if len(entered) == 3:  # the rules and candidates, long-0, then long-1's chunk
            raise RuntimeError("the database went away")
        return tx(*args, **kwargs)

    store._tx = failing
    with pytest.raises(RuntimeError):
        store.apply_retention(max_steps=2)
    del store._tx
    assert [len(store.steps(f"long-{i}")) for i in range(3)] == [2, 4, 4]
    _, transactions = _pass(store, max_steps=2)
    assert _reads(transactions) == 2  # long-0 trimmed is no longer than it keeps
    assert [len(store.steps(f"long-{i}")) for i in range(3)] == [2, 2, 2]
    store.close()


def test_a_write_that_waited_for_a_retention_pass_does_not_blame_another_session(pg_url, otlp, monkeypatch):
    """PostgreSQL: a write (another replica's, an ingest worker's) that waits past its timeout for the writers'
    lock while a retention pass holds it fails with a message that names retention as a possible holder, and
    pg_stat_activity shows the pass's session by its name (it read `another session holds a lock on a table`)."""
    sidecar, worker = open_store(pg_url), open_store(pg_url, timeout_s=0.5)
    _load(sidecar, otlp, "r", range(3))
    seen = {}

    def held(conn, *args):
        with psycopg.connect(pg_url) as dba:
            seen["names"] = {name for (name,) in dba.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                "WHERE l.locktype = 'advisory' AND l.granted")}
        with pytest.raises(psycopg.errors.LockNotAvailable) as refused:
            _load(worker, otlp, "r", [3])
        seen["said"] = describe(refused.value)
        return apply(conn, *args)

    apply = _retention.apply
    monkeypatch.setattr(_retention, "apply", held)
    sidecar.apply_retention(max_steps=2)
    assert seen["names"] == {MAINTENANCE_APPLICATION_NAME}
    assert MAINTENANCE_APPLICATION_NAME in seen["said"] and "retention" in seen["said"], seen["said"]
    assert "pg_locks" in seen["said"]
    _load(worker, otlp, "r", [3])  # the pass over, the name is the sidecar's own again
    with psycopg.connect(pg_url) as dba:
        assert MAINTENANCE_APPLICATION_NAME not in {n for (n,) in dba.execute(
            "SELECT application_name FROM pg_stat_activity")}
    sidecar.close()
    worker.close()
