"""Two attempts' sample rows at one step: a relaunch's evaluation at the step it resumed from, numbered from 0 as
the crashed attempt's training rows there were, is stored beside them, each row once under its own writer attempt,
and re-delivery changes nothing. Store level, on both backends."""

from __future__ import annotations

from otel_grpo.sidecar.store import SampleQuery, open_store
from tests.sidecar.test_attempt_floor import CRASHED, RELAUNCH, _records, _whose

ROWS = 4
"""Sample rows per record (`_records`: indices from `first_index`)."""


def _rows(store, step: int) -> list[tuple[str, int]]:
    """The step's rows as (completion, sample_index), every one the store returns (a duplicate shows twice)."""
    found = store.samples("r", SampleQuery(step_min=step, step_max=step, limit=1000))
    return sorted((r["completion"], r["sample_index"]) for r in found)


def _sent(tag: str, step: int, first: int = 0) -> list[tuple[str, int]]:
    return [(f"{tag} {step}/{i}", first + i) for i in range(ROWS)]


def test_a_relaunchs_evaluation_at_its_resumed_step_is_stored_beside_the_crashed_attempts_rows(db, otlp):
    """The crashed attempt trained steps 0-5; the relaunch resumed at step 3 and evaluates there before it trains
    step 3 (a user's loop logging eval samples at its checkpoint's step): its rows are numbered from 0 under the new
    attempt, as the crashed attempt's training rows of step 3 were. Until the relaunch claims step 3 the step reads
    both; its claim then takes the step over (`_attempts`: the crashed attempt's rows there and at 4-5 go), the
    evaluation's rows stay, numbered before its training rows as the telemetry numbers one attempt's records.
    Every record sent again, at either point, changes nothing."""
    store = open_store(db)
    crashed = _records(otlp, range(6), "first", 10.0, attempt=CRASHED)
    evaluation = _records(otlp, [3], "eval", 30.0, writer=RELAUNCH)
    assert store.write_batch(crashed) == 6 * ROWS
    assert store.write_batch(evaluation) == ROWS
    both = sorted(_sent("first", 3) + _sent("eval", 3))
    assert _rows(store, 3) == both
    assert _rows(store, 4) == _sent("first", 4)
    for batch in (crashed, evaluation):  # a retried export, a replayed spill
        assert store.write_batch(batch) == 0
    assert _rows(store, 3) == both and store.runs()[0]["sample_count"] == 7 * ROWS

    relaunch = _records(otlp, range(3, 5), "second", 20.0, attempt=RELAUNCH, first_index=ROWS)
    assert store.write_batch(relaunch) == 2 * ROWS
    kept = sorted(_sent("eval", 3) + _sent("second", 3, ROWS))
    assert _rows(store, 3) == kept
    assert _rows(store, 4) == _sent("second", 4, ROWS) and _rows(store, 5) == []
    assert _whose(store) == {0: {"first"}, 1: {"first"}, 2: {"first"}, 3: {"eval", "second"}, 4: {"second"}}
    for batch in (evaluation, relaunch, crashed):  # the crashed attempt's: stale from step 3 on, the same below
        assert store.write_batch(batch) == 0
    assert _rows(store, 3) == kept and _rows(store, 2) == _sent("first", 2)
    (run,) = store.runs()
    assert run["sample_count"] == 3 * ROWS + 3 * ROWS and run["last_step"] == 4
    store.close()


def test_a_relaunch_that_trains_on_after_its_checkpoints_step_keeps_both_attempts_rows_there(db, otlp):
    """verl's `val_before_train`: the relaunch evaluates at its checkpoint's step 3, which the crashed attempt
    trained, and trains on from step 4. Step 3 keeps the crashed attempt's training rows and the evaluation's,
    each once, though the relaunch's claim of step 4 arrives in the same batch as its evaluation."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(6), "first", 10.0, attempt=CRASHED))
    evaluation = _records(otlp, [3], "eval", 30.0, writer=RELAUNCH)
    relaunch = _records(otlp, [4], "second", 20.0, attempt=RELAUNCH)
    evaluation.samples += relaunch.samples
    evaluation.steps += relaunch.steps
    evaluation.phases += relaunch.phases
    assert store.write_batch(evaluation) == 2 * ROWS
    assert store.write_batch(evaluation) == 0
    assert _rows(store, 3) == sorted(_sent("first", 3) + _sent("eval", 3))
    assert _rows(store, 4) == _sent("second", 4) and _rows(store, 5) == []
    assert store.runs()[0]["sample_count"] == 4 * ROWS + 2 * ROWS
    store.close()


def test_a_store_of_schema_9_names_its_rows_by_their_writers_and_keeps_them(db, otlp, tmp_path, request):
    """A database at the previous head (schema 9, rows copied column by column as that release stored them: a
    sample named by its index alone) upgrades in place with every row kept, each now named by its writer's
    attempt, a sender's that named none as before: the same records sent again still merge, and the relaunch's
    evaluation at the step they hold goes in beside them."""
    from tests._support import old_schema
    from tests.sidecar.test_store import _TABLES, _before_v10, _Db

    pg = str(db).startswith("postgresql")
    source = request.getfixturevalue("pg_server").new_database() if pg else tmp_path / "source.db"
    crashed = _records(otlp, range(6), "first", 10.0, attempt=CRASHED)
    legacy = _records(otlp, [7], "legacy", 5.0)  # a sender before attempts
    store = open_store(source)
    store.write_batch(crashed)
    store.write_batch(legacy)  # after the run's first claim, which retires such rows of later steps
    store.close()
    old_schema.make(db, 9)
    src, dst = _Db(source), _Db(db)
    stored = {}
    for table in _TABLES:
        columns = [c for c in dst.columns(table) if c != "id"]
        stored[table] = (columns, src.rows(table, columns))
        dst.insert(table, columns, _before_v10(table, columns, stored[table][1]))
    src.conn.close()
    assert ("0", CRASHED) in {(u, a) for u, a in dst.conn.execute("SELECT uid, attempt FROM samples").fetchall()}
    dst.conn.close()

    store = open_store(db)
    assert store.found_version == 9
    store.close()
    after = _Db(db)
    for table, (columns, rows) in stored.items():  # every row kept; the samples' uids as the head names them
        assert after.rows(table, columns) == rows, table
    assert after.revision() == [("v10",)]
    after.conn.close()

    store = open_store(db)
    for batch in (crashed, legacy):
        assert store.write_batch(batch) == 0
    assert store.write_batch(_records(otlp, [3], "eval", 30.0, writer=RELAUNCH)) == ROWS
    assert _rows(store, 3) == sorted(_sent("first", 3) + _sent("eval", 3))
    assert _rows(store, 7) == _sent("legacy", 7)
    assert store.runs()[0]["sample_count"] == 6 * ROWS + ROWS + ROWS
    store.close()


def test_the_api_tells_two_attempts_rows_of_one_index_apart_by_their_writer(make_client, otlp):
    """`/samples` rows say their writer's `attempt`: the crashed attempt's training row 0 and the relaunch's
    evaluation row 0 of step 3 are two rows, read by (step, sample_index) as the page's "show all" reads one, and
    each is found again by its attempt; a sender that named none has a null one."""
    client = make_client()
    for steps, tag, said in ((range(6), "first", {"attempt": CRASHED}), ([3], "eval", {"writer_attempt": RELAUNCH}),
                             ([3], "legacy", {"first_index": 9})):
        spans = otlp.spans("r", steps, samples=ROWS, completion=lambda step, i, tag=tag: f"{tag} {step}/{i}", **said)
        assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(),
                           headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    one = client.get("/api/runs/r/samples", params={"step": 3, "filter_col": "sample_index", "filter_min": 0,
                                                    "filter_max": 0, "limit": 100}).json()
    assert sorted((r["completion"], r["attempt"]) for r in one) == [("eval 3/0", RELAUNCH), ("first 3/0", CRASHED)]
    step = client.get("/api/runs/r/samples", params={"step": 3, "limit": 100}).json()
    assert len({(r["attempt"], r["sample_index"]) for r in step}) == len(step) == 3 * ROWS
    assert {r["attempt"] for r in step if r["completion"].startswith("legacy")} == {None}


def test_a_rows_own_column_named_as_one_the_sidecar_fills_is_kept_apart(make_client, otlp):
    """A row's own `attempt` (a generation's retry count) was hidden by the writer's attempt the sidecar puts on
    every row: the API gave the writer's, and a filter on it matched the writer's. A row's column of a name the
    sidecar fills (`attempt`, `time`, `step`, `run_id`) is `data.<name>`."""
    client = make_client()
    spans = otlp.spans("r", [0], samples=3, attempt=CRASHED,
                       extra=lambda step, i: {"attempt": i + 1, "time": f"t{i}"})
    assert client.post("/v1/traces", content=otlp.request(spans).SerializeToString(),
                       headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    rows = client.get("/api/runs/r/samples", params={"order_by": "sample_index", "limit": 10}).json()
    assert [(r["attempt"], r["data.attempt"], r["data.time"]) for r in rows] == [
        (CRASHED, 1, "t0"), (CRASHED, 2, "t1"), (CRASHED, 3, "t2")]
    assert all(r["time"].endswith("Z") for r in rows)
    retried = client.get("/api/runs/r/samples", params={"filter_col": "data.attempt", "filter_min": 2}).json()
    assert sorted(r["data.attempt"] for r in retried) == [2, 3]
