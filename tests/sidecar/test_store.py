"""The stores: migrations on start, idempotent upserts, retention, queries; each test that is
not about SQLite's file runs on both backends (`db`: an SQLite path, then PostgreSQL)."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import pytest

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import SCHEMA_VERSION, SampleQuery, SchemaError, Store, open_store
from otel_grpo.sidecar.store._dialect import SQLITE
from otel_grpo.sidecar.store._store import PAGE_BYTES
from tests._support.waiting import wait_for

SAMPLES_STEP_INDEX = SQLITE.step_index_hint.split()[-1]


def _load(store, otlp, run_id, steps, samples=2):
    return store.write_batch(extract(otlp.request(otlp.spans(run_id, steps, samples=samples))))


def test_fresh_database_is_migrated_and_in_wal_mode(tmp_path):
    store = Store.open(tmp_path / "a" / "s.db")
    conn = sqlite3.connect(tmp_path / "a" / "s.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_BYTES  # rows of 1-4 KiB pack
    assert store.found_version == 0
    store.close()
    assert Store.open(tmp_path / "a" / "s.db").found_version == SCHEMA_VERSION  # reopening migrates nothing


def test_an_existing_database_keeps_its_page_size(tmp_path, otlp):
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("CREATE TABLE t (x)")  # the page size is fixed once the file has a table
    conn.close()
    store = Store.open(tmp_path / "old.db")
    assert _load(store, otlp, "r", steps=range(2)) == 4
    with store.read() as conn:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
    store.close()


def test_read_connections_plan_with_the_statistics_of_the_latest_optimize(tmp_path, otlp):
    """A sidecar started on an empty database: its read connections opened without statistics,
    and walked the step index and sorted the whole run for `step >= 0 ORDER BY reward`."""
    store = Store.open(tmp_path / "s.db")
    assert store.runs() == []  # a read connection opens now, before there are statistics
    _load(store, otlp, "r", steps=range(40), samples=64)
    store.optimize()
    with store.read() as conn:
        sql, params = store._sample_ids_sql(conn, "r", SampleQuery(step_min=0, order_by="reward", desc=True))
        plan = " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    assert "samples_run_reward" in plan and "TEMP B-TREE" not in plan, plan
    store.close()


def test_planner_statistics_follow_the_store_as_it_doubles(tmp_path, otlp):
    """The maintenance loop asks every few seconds; the store takes statistics again only once it has
    doubled (or halved) since the last, so a fresh store filled fast plans with current numbers."""
    store = Store.open(tmp_path / "s.db")

    def rows_counted() -> int:  # the planner's idea of the samples table's size
        with store.read() as conn:
            row = conn.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'samples_run_reward'").fetchone()
        return int(row[0].split()[0]) if row else 0

    _load(store, otlp, "r", steps=range(10), samples=64)
    store.optimize()
    first = rows_counted()
    assert first > 0  # an estimate (bounded sampling)
    _load(store, otlp, "r", steps=range(10, 12), samples=64)
    store.optimize()  # 20% more: not worth new statistics
    assert rows_counted() == first
    _load(store, otlp, "r", steps=range(12, 40), samples=64)
    store.optimize()
    assert rows_counted() > first
    store.close()


def test_a_sidecar_filled_fast_from_empty_plans_whole_run_reads_with_current_statistics(tmp_path, otlp,
                                                                                          monkeypatch):
    """The statistics are checked every few seconds, not at each retention pass (a minute by default): a
    store filled from empty within the minute planned `step >= 0 ORDER BY reward` as for an empty table."""
    import time

    from fastapi.testclient import TestClient

    from otel_grpo.sidecar import SidecarSettings, _app, create_app

    monkeypatch.setattr(_app, "STATISTICS_CHECK_S", 0.05)
    with TestClient(create_app(SidecarSettings(db=tmp_path / "s.db"))) as client:  # empty: empty statistics
        for first in range(0, 40, 10):
            body = otlp.request(otlp.spans("r", range(first, first + 10), samples=64)).SerializeToString()
            assert client.post("/v1/traces", content=body,
                               headers={"Content-Type": "application/x-protobuf"}).status_code == 200
        store = client.app.state.store

        def plan() -> str:
            with store.read() as conn:
                sql, params = store._sample_ids_sql(conn, "r", SampleQuery(step_min=0, order_by="reward", desc=True))
                return " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))

        deadline = time.monotonic() + 10
        while "samples_run_reward" not in plan() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "samples_run_reward" in plan() and "TEMP B-TREE" not in plan(), plan()


def test_a_newer_schema_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match="newer"):
        Store.open(tmp_path / "s.db")


def test_redelivery_counts_samples_once(db, otlp):
    store = open_store(db)
    batch = extract(otlp.request(otlp.spans("r", range(3), samples=5)))
    assert store.write_batch(batch) == 15
    assert store.write_batch(batch) == 0
    (run,) = store.runs()
    assert run["sample_count"] == 15 and (run["first_step"], run["last_step"]) == (0, 2)
    assert len(store.samples("r", SampleQuery(step_min=0, limit=100))) == 15
    store.close()


def test_retention_by_steps_runs_and_age(db, otlp):
    store = open_store(db)
    _load(store, otlp, "old", range(5))
    _load(store, otlp, "new", range(5))
    store.apply_retention(max_steps=2)
    assert [r["step"] for r in store.steps("new")] == [3, 4]
    run = {r["run_id"]: r for r in store.runs()}["new"]
    assert (run["first_step"], run["sample_count"]) == (3, 4)
    store.apply_retention(max_runs=1)
    assert [r["run_id"] for r in store.runs()] == ["new"]
    assert store.metric_keys("old") == []  # a deleted run's columns go with it: made again, it lists its own
    store.write_batch(extract(otlp.request(otlp.spans("old", range(1), samples=0, metrics=lambda s: {"eval_score": 1.0}))))
    assert {"eval_score", "kl"} <= set(store.metric_keys("old")) and "eval_score" not in store.metric_keys("new")
    store.apply_retention(max_runs=1)
    assert store.apply_retention(max_age_s=3600)["runs"] == 0  # nothing is an hour old
    assert store.apply_retention(max_age_s=1, now=10**10)["runs"] == 1  # everything is old by then
    assert store.runs() == []
    store.close()


def test_a_step_that_retention_deleted_and_is_sent_again_holds_only_what_is_sent_again(db, otlp):
    """Each way retention deletes a step (steps per run, the run, the step's age) takes every writer's scalars of
    it along: a step sent again afterwards (a replay, a run id used again) reads as the new record alone."""
    def again(run_id: str, step: int, now: float | None = None) -> dict:
        store.write_batch(extract(otlp.request(otlp.spans(run_id, [step], samples=0,
                                                          metrics=lambda s: {"eval_score": 2.0}))), now)
        return next(r for r in store.steps(run_id) if r["step"] == step)

    store = open_store(db)
    for run_id in ("steps", "runs", "age"):
        store.write_batch(extract(otlp.request(otlp.spans(run_id, range(3), samples=0,
                                                          metrics=lambda s: {"first_score": 1.0}))))
    store.apply_retention(max_steps=2)
    assert "first_score" not in again("steps", 0)
    store.apply_retention(max_runs=2)  # "steps" and "age" were written last
    assert "first_score" not in again("runs", 2)
    store.write_batch(extract(otlp.request(otlp.spans("age", [5], samples=0))), now=10**10)  # the run is recent
    assert store.apply_retention(max_age_s=3600, now=10**10)["steps"] >= 3  # its steps, ended long before, are not
    assert "first_score" not in again("age", 2, now=10**10)
    store.close()


def test_v1_database_is_migrated_and_backfilled(tmp_path):
    from tests._support import old_schema

    old_schema.make(tmp_path / "old.db", 1)
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    conn.execute("INSERT INTO runs (run_id, first_seen, last_update) VALUES ('r', 0, 0)")
    conn.execute("""INSERT INTO steps (run_id, step, end_time, updated_at, metrics) VALUES ('r', 3, 1, 1, '{"kl": 0.5}')""")
    conn.close()
    store = Store.open(tmp_path / "old.db")
    assert store.found_version == 1
    with store.read() as conn:
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "samples_run_step_index" not in indexes and SAMPLES_STEP_INDEX in indexes  # v3 dropped it
    assert store.steps("r", ["kl"]) == [{"kl": 0.5, "run_id": "r", "step": 3, "time": "1970-01-01T00:00:01.000Z"}]
    assert store.metric_keys("r") == ["kl"]  # v7 listed the stored steps' columns


def test_step_scalars_keep_full_double_precision_across_merges(db, otlp):
    store = open_store(db)
    spans = otlp.spans("p", [0], samples=0)
    step_span = [s for s in spans if s.name == "grpo.step"]
    phases = [s for s in spans if s.name.startswith("grpo.phase.")]
    request = otlp.request(step_span)
    attrs = request.resource_spans[0].scope_spans[0].spans[0].attributes
    attrs.add(key="grpo.metric.entropy").value.double_value = 0.033807298927905176  # needs 17 digits
    store.write_batch(extract(request))
    store.write_batch(extract(otlp.request(phases)))  # merged into the stored step afterwards
    (row,) = store.steps("p")
    assert row["entropy"] == 0.033807298927905176 and "phase_duration/rollout" in row
    assert store.steps("p", ["entropy"])[0]["entropy"] == 0.033807298927905176
    store.close()


def test_wal_is_checkpointed_in_the_background_and_close_stops_the_thread(tmp_path, otlp):
    import time

    store = Store.open(tmp_path / "s.db")
    assert store._writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # commits do not checkpoint
    db = tmp_path / "s.db"
    before = db.stat().st_size
    _load(store, otlp, "r", range(20), samples=20)
    # In WAL mode only a checkpoint writes the database file itself; nobody else runs one here.
    deadline = time.monotonic() + 10
    while db.stat().st_size <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert db.stat().st_size > before
    thread = store._checkpointer._thread
    store.close()
    assert not thread.is_alive()
    reopened = Store.open(db)
    assert reopened.runs()[0]["sample_count"] == 400
    reopened.close()


@pytest.mark.parametrize("query", [SampleQuery(step=1, order_by="reward", desc=True),
                                   SampleQuery(step_min=0, step_max=1, reward_min=0.5), SampleQuery(step=1)])
def test_step_filtered_sample_queries_search_the_step_index(tmp_path, otlp, query):
    store = Store.open(tmp_path / "s.db")
    _load(store, otlp, "r", range(3), samples=4)
    plans = []
    # Record the plan of the id query the store runs; a scan here is seconds at a million samples.
    read = store.read

    def explaining():
        with read() as conn:
            yield _Explaining(conn, plans)

    store.read = contextlib.contextmanager(explaining)
    assert store.samples("r", query)
    assert any(f"SEARCH samples USING INDEX {SAMPLES_STEP_INDEX} (run_id=? AND step" in p for p in plans), plans
    store.close()


class _Explaining:
    """A read connection that records EXPLAIN QUERY PLAN for each `SELECT id FROM samples` it runs."""

    def __init__(self, conn, plans: list) -> None:
        self.conn, self.plans = conn, plans

    def execute(self, sql, params=()):
        if sql.startswith("SELECT id FROM samples"):
            self.plans += [row[3] for row in self.conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        return self.conn.execute(sql, params)


def test_a_database_of_the_previous_release_upgrades_in_place(tmp_path, otlp):
    """data/sidecar-v3.db.gz: made by the release before PostgreSQL (schema 3; see make_v3.py)."""
    import gzip
    import shutil
    from pathlib import Path

    db = tmp_path / "old.db"
    with gzip.open(Path(__file__).parent / "data" / "sidecar-v3.db.gz") as src, db.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    store = Store.open(db)
    assert store.found_version == 3
    runs = {r["run_id"]: r for r in store.runs()}
    assert runs["old-run"]["sample_count"] == 12 and runs["old/run-b"]["sample_count"] == 4
    assert [r["step"] for r in store.steps("old-run", ["kl"])] == [0, 1, 2]
    assert store.alerts()[0]["alertname"] == "GRPOKLHigh"
    assert _load(store, otlp, "old-run", range(3), samples=4) == 0  # the old rows are the same samples
    assert _load(store, otlp, "old-run", range(3, 4), samples=4) == 4
    assert [r["step"] for r in store.steps("old-run", ["kl"])] == [0, 1, 2, 3]  # read once held, then since
    store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_postgres_is_migrated_once_and_a_newer_schema_is_refused(pg_url):
    import psycopg

    from otel_grpo.sidecar.store import PG_SCHEMA_VERSION, PgStore

    first = PgStore.open(pg_url)
    assert first.found_version == 0
    second = PgStore.open(pg_url)  # a second replica: nothing left to migrate
    assert second.found_version == PG_SCHEMA_VERSION
    second.close()
    first.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(PG_SCHEMA_VERSION,)]
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(f"v{PG_SCHEMA_VERSION}",)]
        conn.execute("UPDATE schema_version SET version = version + 1")  # what an older sidecar reads
    with pytest.raises(SchemaError, match="newer"):
        PgStore.open(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = version - 1")
        conn.execute("UPDATE alembic_version SET version_num = 'v99_from_the_future'")
    with pytest.raises(SchemaError, match="newer"):
        PgStore.open(pg_url)


def test_the_readiness_probe_write_locks_every_table_the_store_writes(pg_url):
    """The probe's write (`_probe_write`) takes the lock of each table in `WRITTEN_TABLES`: a migration that adds
    one must name it there, or a lock on it would pass the probe unseen."""
    import psycopg

    from otel_grpo.sidecar.store import PgStore
    from otel_grpo.sidecar.store._postgres import WRITTEN_TABLES

    PgStore.open(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        tables = {t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    assert tables - {"schema_version", "alembic_version"} == set(WRITTEN_TABLES)


def test_postgres_connections_keep_the_urls_own_keepalives(pg_url, otlp):
    """TCP settings in the URL (libpq's names) are what every connection uses, reads', writes' and readiness's;
    the store's defaults (`KEEPALIVE`) fill in only those it leaves out. They were overridden by the defaults,
    so an operator could not shorten or lengthen how soon a vanished host is given up on."""
    from otel_grpo.sidecar.store import PgStore
    from otel_grpo.sidecar.store._postgres import KEEPALIVE

    store = PgStore.open(pg_url + "?tcp_user_timeout=6000&keepalives_idle=2")
    try:
        _load(store, otlp, "keep", [0])
        assert store.ping()
        with store._pool.connection() as read:
            conns = {"read": read, "write": store._writer.raw, "readiness": store._probe.raw}
            used = {name: {o.keyword.decode(): o.val.decode() for o in conn.pgconn.info if o.val is not None}
                    for name, conn in conns.items()}
    finally:
        store.close()
    for name, options in used.items():
        assert options["tcp_user_timeout"] == "6000" and options["keepalives_idle"] == "2", (name, options)
        assert options["keepalives_interval"] == str(KEEPALIVE["keepalives_interval"]), (name, options)


def test_a_postgres_database_of_schema_3_upgrades_in_place(pg_url, otlp):
    """Schema 3 (the release before the held step histories), made by its own scripts."""
    import psycopg

    from otel_grpo.sidecar.store import PgStore
    from tests._support import old_schema

    old_schema.make(pg_url, 3)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runs (run_id, first_seen, last_update) VALUES ('r', 0, 0)")
        conn.execute("""INSERT INTO steps (run_id, step, end_time, updated_at, metrics) VALUES ('r', 3, 1, 1, '{"kl": 0.5}')""")
        conn.execute("INSERT INTO step_values (run_id, key, step, value) VALUES ('r', 'kl', 3, 0.5)")
    store = PgStore.open(pg_url)
    try:
        assert store.found_version == 3
        assert store.steps("r", ["kl"]) == [{"kl": 0.5, "run_id": "r", "step": 3, "time": "1970-01-01T00:00:01.000Z"}]
        assert store.metric_keys("r") == ["kl"]  # v7 listed the stored steps' columns
        _load(store, otlp, "r", [3, 4])  # an old step written again, and a new one
        assert [(r["step"], r["kl"]) for r in store.steps("r", ["kl"])] == [(3, 0.03), (4, 0.04)]
    finally:
        store.close()


def test_postgres_keeps_sample_rows_of_a_few_kib_inline_and_uncompressed(pg_url, otlp):
    """Moving 1-4 KiB completions to the TOAST table doubled the server's work per sample (schema v2)."""
    import psycopg

    from otel_grpo.sidecar.store import PgStore

    store = PgStore.open(pg_url)
    words = [f"w{(i * 7919) % 1000}" for i in range(2000)]  # ~8 KiB of words that lz4 barely shortens
    spans = otlp.spans("t", range(2), samples=3,
                       completion=lambda step, i: " ".join(words)[:4000] if step == 0 else "same " * 4000)
    assert store.write_batch(extract(otlp.request(spans))) == 6
    store.close()
    with psycopg.connect(pg_url) as conn:
        stored = dict(conn.execute("SELECT step, array_agg(DISTINCT coalesce(pg_column_compression(completion), 'none'))"
                                   " FROM samples GROUP BY step").fetchall())
        toast_bytes = conn.execute("SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'samples'"
                                   ).fetchone()[0]
    assert stored == {0: ["none"], 1: ["lz4"]}  # 4 KB stays as it is; a 20 KB row is still compressed
    assert toast_bytes == 0


def test_queries_answer_the_same_on_both_backends(db, otlp):
    store = open_store(db)
    spans = otlp.spans("q", range(4), samples=6, completion=lambda step, i: f"Answer {i}\x00 of step {step}",
                       extra=lambda step, i: {"score": float((i * 7) % 5), "tag": f"t{i % 2}"})
    assert store.write_batch(extract(otlp.request(spans))) == 24
    rows = store.samples("q", SampleQuery(step_min=0, order_by="score", desc=True, limit=5))
    assert [r["score"] for r in rows] == [4.0, 4.0, 4.0, 4.0, 3.0]
    assert [(r["step"], r["sample_index"]) for r in store.samples("q", SampleQuery())] == [(3, i) for i in range(6)]
    found = store.samples("q", SampleQuery(step=2, q="ANSWER 3"))
    assert [r["sample_index"] for r in found] == [3] and found[0]["completion"].startswith("Answer 3")
    assert store.samples("q", SampleQuery(step=1, reward_min=1.0, reward_max=2.0, order_by="reward")) == \
        [r for r in store.samples("q", SampleQuery(step=1, order_by="reward")) if 1.0 <= r["reward"] <= 2.0]
    assert len(list(store.iter_samples("q", SampleQuery(step_min=0, limit=1000), chunk=7))) == 24
    assert {"score", "tag", "selection"} <= set(store.sample_columns("q", SampleQuery(step_min=0)))
    assert store.sample_steps("q") == [3, 2, 1, 0]
    (kl,) = {r["kl"] for r in store.steps("q", ["kl"], step_min=1, step_max=1)}
    assert kl == 0.01 and store.steps("q", step_min=2, limit=1)[0]["time"].endswith("Z")
    assert "phase_duration/rollout" in store.metric_keys("q")
    assert store.ping() and store.run_exists("q") and not store.run_exists("nope")
    store.close()


@pytest.mark.parametrize("page_bytes", [PAGE_BYTES, 4096])  # a new store's pages; a store of an earlier release
def test_the_wal_stays_near_the_valve_while_writers_commit_back_to_back(tmp_path, otlp, monkeypatch, page_bytes):
    """Ingest workers commit back to back: the background thread's PASSIVE checkpoints then never start
    the WAL over (a 10M-sample fill grew it to 4-6 GiB); past the valve the committing writer truncates it.
    The valve is a size in bytes, whatever the database's page size."""
    import threading
    import time

    from otel_grpo.sidecar.store import _checkpoint

    monkeypatch.setattr(_checkpoint, "VALVE_BYTES", 1 << 20)
    db, wal = tmp_path / "s.db", tmp_path / "s.db-wal"
    with contextlib.closing(sqlite3.connect(db)) as conn:  # the page size is fixed once the file has a header
        conn.execute(f"PRAGMA page_size = {page_bytes}")
        conn.execute("PRAGMA journal_mode = WAL")
    store = Store.open(db)
    assert store._writer.execute("PRAGMA page_size").fetchone()[0] == page_bytes
    workers = [Store.open_writer(db) for _ in range(2)]  # as the ingest worker processes write
    requests = [otlp.request(otlp.spans("r", [step], samples=64)) for step in range(400)]
    stop, errors, largest = threading.Event(), [], 0

    def ingest(worker, first) -> None:
        try:
            for request in requests[first::2]:
                if stop.is_set():
                    return
                worker.write_batch(extract(request))
                store.wake_checkpointer()  # as the sidecar does after a worker's commit
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(w, i)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(t.is_alive() for t in threads):
        with contextlib.suppress(FileNotFoundError):
            largest = max(largest, wal.stat().st_size)
        time.sleep(0.001)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    committed = store.runs()[0]["sample_count"]
    for w in workers:
        w.close()
    store.close()
    assert committed >= 64 * 50  # enough writing to have grown the WAL many times over the valve
    # the valve plus what was committed meanwhile (one request is ~0.4 MiB); PASSIVE alone reached 9-22 MiB
    assert largest <= 3 << 20, f"the WAL reached {largest / 2**20:.1f} MiB with a 1 MiB valve"


# ---- attempts (`grpo.attempt`): a relaunched or resumed job's steps replace the crashed attempt's ----------

def _attempt(otlp, attempt, steps=range(2), samples=4, tag="first", kl=0.0, only=None):
    """The spans of `steps` as attempt `attempt` sent them: completions and scalars that say whose they are.
    `only`: "samples" or "step" keeps just those spans (they reach the sidecar in separate requests)."""
    spans = otlp.spans("r", steps, samples=samples, attempt=attempt,
                       completion=lambda step, i: f"{tag} {step}/{i}",
                       metrics=lambda step: {"kl": kl + step, f"only_{tag}": 1.0})
    if only == "samples":
        spans = [s for s in spans if s.name == "grpo.samples"]
    elif only == "step":
        spans = [s for s in spans if s.name != "grpo.samples"]
    return extract(otlp.request(spans))


def _view(store, step):
    rows = store.samples("r", SampleQuery(step_min=step, step_max=step, limit=100))
    [scalars] = [r for r in store.steps("r") if r["step"] == step]
    return sorted(r["completion"] for r in rows), scalars


def test_a_newer_attempt_replaces_a_steps_samples_scalars_and_phases_together(db, otlp):
    """The crashed attempt sent 6 samples a step, the relaunch 4 other ones: only the relaunch's show, beside
    the relaunch's scalars (none of the first's keys left), phases counted once, the run's count right."""
    store = open_store(db)
    store.write_batch(_attempt(otlp, 100, samples=6, tag="first", kl=10.0))
    assert store.write_batch(_attempt(otlp, 200, samples=4, tag="second", kl=20.0)) == 8
    for step in (0, 1):
        completions, scalars = _view(store, step)
        assert completions == [f"second {step}/{i}" for i in range(4)]
        assert scalars["kl"] == 20.0 + step and "only_first" not in scalars and scalars["only_second"] == 1.0
        assert scalars["phase_duration/rollout"] < 1.0  # one attempt's phase, not two summed
    (run,) = store.runs()
    assert run["sample_count"] == 8
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM phases").fetchone()[0] == 2 * 3
    store.close()


def test_an_older_attempt_arriving_late_is_dropped_and_a_resend_is_stored_once(db, otlp):
    store = open_store(db)
    newer = _attempt(otlp, 200, tag="second", kl=20.0)
    assert store.write_batch(newer) == 8
    assert store.write_batch(_attempt(otlp, 100, samples=6, tag="first", kl=10.0)) == 0  # a retried old export
    assert store.write_batch(newer) == 0  # the same attempt again (a replay): idempotent
    completions, scalars = _view(store, 1)
    assert completions == [f"second 1/{i}" for i in range(4)] and scalars["kl"] == 21.0 and "only_first" not in scalars
    assert store.runs()[0]["sample_count"] == 8
    store.close()


def test_a_relaunch_retires_the_crashed_attempts_steps_after_the_one_it_resumed_at(db, otlp):
    """The crashed attempt reached step 5; the relaunch resumed from step 2's checkpoint and is at step 4 (or
    crashed there too): the run reads as the relaunch, steps 0-2 the first's, 3-4 the relaunch's, and step 5,
    of a run that no longer is, is gone with its samples, a late record of it dropped, until the relaunch
    sends its own."""
    store = open_store(db)
    store.write_batch(_attempt(otlp, 100, steps=range(6), tag="first", kl=10.0))
    assert [r["step"] for r in store.steps("r")] == list(range(6))  # held by this reader's step cache
    store.write_batch(_attempt(otlp, 200, steps=range(3, 5), tag="second", kl=20.0))
    kl = {r["step"]: r["kl"] for r in store.steps("r")}
    assert kl == {0: 10.0, 1: 11.0, 2: 12.0, 3: 23.0, 4: 24.0}
    (run,) = store.runs()
    assert run["last_step"] == 4 and run["sample_count"] == 5 * 4
    assert store.samples("r", SampleQuery(step_min=5, step_max=5, limit=100)) == []
    store.write_batch(_attempt(otlp, 100, steps=range(5, 6), tag="first", kl=10.0))  # a retried old export
    assert 5 not in {r["step"] for r in store.steps("r")} and store.runs()[0]["last_step"] == 4
    store.write_batch(_attempt(otlp, 200, steps=range(5, 6), tag="second", kl=20.0))
    completions, scalars = _view(store, 5)
    assert completions == [f"second 5/{i}" for i in range(4)] and scalars["kl"] == 25.0
    assert "only_first" not in scalars and store.runs()[0]["sample_count"] == 6 * 4
    store.close()


def test_a_batch_holding_the_relaunch_and_a_late_step_of_the_crashed_attempt_never_mixes_it(db, otlp):
    """The collector batches the relaunch's step 3 with the crashed attempt's step 5, still in flight: step 5 is
    of a run that no longer is (dropped, the run at step 3), and later the relaunch's own step 5 alone."""
    store = open_store(db)
    store.write_batch(_attempt(otlp, 100, steps=range(5), tag="first", kl=10.0))
    mixed = _attempt(otlp, 200, steps=[3], tag="second", kl=20.0)
    late = _attempt(otlp, 100, steps=[5], tag="first", kl=10.0)
    mixed.steps += late.steps
    mixed.samples += late.samples
    mixed.phases += late.phases
    store.write_batch(mixed)
    assert sorted(r["step"] for r in store.steps("r")) == [0, 1, 2, 3] and store.runs()[0]["last_step"] == 3
    assert store.samples("r", SampleQuery(step_min=5, step_max=5, limit=100)) == []
    store.write_batch(_attempt(otlp, 200, steps=[4, 5], tag="second", kl=20.0))
    completions, scalars = _view(store, 5)
    assert completions == [f"second 5/{i}" for i in range(4)] and "only_first" not in scalars
    assert store.runs()[0]["sample_count"] == 6 * 4
    store.close()


def test_a_newer_attempts_samples_may_come_before_its_step_span(db, otlp):
    """Sample spans end (and are exported) before their step span: the relaunch's samples arrive first, in
    their own request; the step then shows them with the relaunch's scalars, never the first's."""
    store = open_store(db)
    store.write_batch(_attempt(otlp, 100, samples=6, tag="first", kl=10.0))
    store.write_batch(_attempt(otlp, 200, tag="second", kl=20.0, only="samples"))
    completions, scalars = _view(store, 0)
    assert completions == [f"second 0/{i}" for i in range(4)] and "kl" not in scalars  # not the first's scalars
    store.write_batch(_attempt(otlp, 200, tag="second", kl=20.0, only="step"))
    completions, scalars = _view(store, 0)
    assert completions == [f"second 0/{i}" for i in range(4)] and scalars["kl"] == 20.0
    assert store.runs()[0]["sample_count"] == 8
    store.close()


def test_a_store_of_schema_4_keeps_every_row_and_a_newer_attempt_replaces_them(db, otlp):
    """Rows stored before attempts existed (a v4 store, or a sender without `grpo.attempt`) are kept by the
    migration and merged as before; the first attempt that names itself replaces its steps' rows."""
    from tests._support import old_schema

    old_schema.make(db, 4)
    store = open_store(db)
    assert store.found_version == 4
    store.write_batch(_attempt(otlp, None, samples=6, tag="first", kl=10.0))  # as the previous release wrote them
    store.close()
    store = open_store(db)
    assert store.write_batch(_attempt(otlp, None, samples=6, tag="first", kl=10.0)) == 0  # merged as before
    completions, scalars = _view(store, 1)
    assert len(completions) == 6 and scalars["kl"] == 11.0
    store.write_batch(_attempt(otlp, 200, tag="second", kl=20.0))
    completions, scalars = _view(store, 1)
    assert completions == [f"second 1/{i}" for i in range(4)] and "only_first" not in scalars
    assert store.runs()[0]["sample_count"] == 8
    store.close()


def test_rows_a_sender_stored_without_an_attempt_are_replaced_by_the_first_attempt_that_names_itself(db, otlp):
    """As many rows, under the same sample ids: the new attempt's rows met the old ones on insert, yet they
    are the ones the step shows."""
    store = open_store(db)
    store.write_batch(_attempt(otlp, None, tag="first", kl=10.0))
    store.write_batch(_attempt(otlp, 5, tag="second", kl=20.0, only="samples"))
    completions, _ = _view(store, 0)
    assert completions == [f"second 0/{i}" for i in range(4)]
    assert store.runs()[0]["sample_count"] == 8
    store.close()


_TABLES = ("runs", "steps", "step_spans", "phases", "samples", "alerts", "step_attempts")


def _before_v10(table: str, columns: list[str], rows: list[tuple]) -> list[tuple]:
    """Rows as a release before schema 10 stored them: a sample's `uid` without its writer's `@<attempt>`."""
    if table != "samples":
        return rows
    at = columns.index("uid")
    return [(*row[:at], row[at].split("@")[0], *row[at + 1:]) for row in rows]


class _Db:
    """Plain connections to either backend's file or database, for the tests of stored rows."""

    def __init__(self, target) -> None:
        import psycopg

        self.pg = str(target).startswith("postgresql")
        self.conn = psycopg.connect(str(target), autocommit=True) if self.pg else \
            sqlite3.connect(target, isolation_level=None)

    def columns(self, table: str) -> list[str]:
        if self.pg:
            return [r[0] for r in self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                (table,))]
        return [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]

    def rows(self, table: str, columns: list[str]) -> list[tuple]:
        return sorted(self.conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall(), key=repr)

    def insert(self, table: str, columns: list[str], rows: list[tuple]) -> None:
        marks = ", ".join(["%s" if self.pg else "?"] * len(columns))
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        if self.pg:
            self.conn.cursor().executemany(sql, rows)
        else:
            self.conn.executemany(sql, rows)

    def revision(self) -> list[tuple]:
        return self.conn.execute("SELECT version_num FROM alembic_version").fetchall()


@pytest.mark.parametrize("version", [4, 5])
def test_a_store_of_schema_4_or_5_is_upgraded_in_place_with_every_row_kept(db, version, otlp, tmp_path, request):
    """Every row of every table, as the release of that schema stored them (written here at the head, then
    copied into a database of the old schema, column by column), comes back unchanged after the upgrade."""
    from tests._support import old_schema

    pg = str(db).startswith("postgresql")
    source = request.getfixturevalue("pg_server").new_database() if pg else tmp_path / "source.db"
    store = open_store(source)
    store.write_batch(_attempt(otlp, None, steps=range(3), samples=5, tag="old", kl=1.0))
    store.write_batch(_attempt(otlp, None if version == 4 else 7, steps=range(3, 5), tag="late", kl=2.0))
    store.upsert_alerts([{"fingerprint": "f1", "startsAt": "2023-11-14T22:13:20Z", "status": "firing",
                          "labels": {"alertname": "GRPOKLHigh", "run_id": "r"}, "annotations": {"summary": "kl"},
                          "endsAt": None, "generatorURL": None}])
    listed = store.metric_keys("r")
    assert "kl" in listed and "phase_duration/rollout" in listed
    store.close()
    old_schema.make(db, version)
    src, dst = _Db(source), _Db(db)
    expected = {}
    for table in _TABLES:
        if not dst.columns(table):
            continue  # not in that schema (step_attempts before v5)
        columns = dst.columns(table)
        expected[table] = (columns, src.rows(table, columns))
        assert expected[table][1], table  # the test stores rows in every table it checks
        dst.insert(table, columns, _before_v10(table, columns, expected[table][1]))
    src.conn.close()

    store = open_store(db)
    assert store.found_version == version
    assert len(store.samples("r", SampleQuery(step_min=0, limit=100))) == 23
    assert store.metric_keys("r") == listed  # v7 lists the columns of the steps stored before it
    store.close()
    after = _Db(db)
    for table, (columns, rows) in expected.items():
        assert after.rows(table, columns) == rows, table
    assert after.revision() == [(f"v{SCHEMA_VERSION}",)]
    after.conn.close()


def test_a_fresh_store_gets_the_head_revision(db):
    open_store(db).close()
    conn = _Db(db)
    assert conn.revision() == [(f"v{SCHEMA_VERSION}",)]
    if conn.pg:
        assert conn.conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        indexes = {r[0] for r in conn.conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'runs'")}
    else:
        assert conn.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {r[0] for r in conn.conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'runs'")}
    assert "runs_last_update" in indexes  # v6
    conn.conn.close()


def test_replicas_starting_together_on_an_old_store_migrate_it_once(db):
    """Four stores open one database of schema 4 at once: exactly one finds version 4 and migrates (PostgreSQL:
    the advisory lock; SQLite: BEGIN IMMEDIATE, then the version read again); the others find the head."""
    import threading

    from tests._support import old_schema

    old_schema.make(db, 4)
    found, errors, start = [], [], threading.Barrier(4)

    def replica() -> None:
        start.wait()
        try:
            store = open_store(db)
            found.append(store.found_version)
            store.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(found) == [4] + [SCHEMA_VERSION] * 3, (found, errors)
    conn = _Db(db)
    assert conn.revision() == [(f"v{SCHEMA_VERSION}",)]
    conn.conn.close()


def test_a_replica_starting_while_another_migrates_a_rollback_journal_file_opens_it_writable(tmp_path, caplog):
    """A store file in rollback-journal mode (copied, restored, made by another tool) that one replica is
    migrating under the write lock: a second replica starting meanwhile waits for the lock before it switches
    the file to WAL. Switching first, it held a shared lock the migration's commit needed, and SQLite answered
    it "database is locked" without waiting: that replica served the store read-only until the next try."""
    import fcntl
    import threading

    from otel_grpo.sidecar.store._store import lock_path

    path = tmp_path / "sidecar.db"
    open_store(path).close()
    other = sqlite3.connect(path, isolation_level=None, timeout=30.0)  # the replica migrating, lock in hand
    other.execute("PRAGMA journal_mode = DELETE")
    lock = open(lock_path(path), "a+b")  # noqa: SIM115 - closed below
    fcntl.flock(lock, fcntl.LOCK_EX)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE a_migration_step (x)")
    opened: list[Store] = []
    replica = threading.Thread(target=lambda: opened.append(open_store(path, startup_lock_timeout_s=30)))
    replica.start()
    try:  # before the change the replica was inside the switch by now, never at the lock
        wait_for(lambda: "to check the schema" in caplog.text, "the replica waiting for the write lock", timeout=15)
    finally:
        other.execute("COMMIT")
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        other.close()
        replica.join()
    (store,) = opened
    assert store.health.read_only is None and store.found_version == SCHEMA_VERSION
    store.close()
