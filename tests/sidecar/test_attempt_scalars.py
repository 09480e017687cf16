"""A step's scalars are attributed per writer attempt: a relaunch's claim removes exactly the crashed attempt's and
keeps its own other ranks' and evaluation's, whatever order the records reach the store in. Store level, on both
backends."""

from __future__ import annotations

import itertools

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import SampleQuery, open_store

CRASHED, RELAUNCH = 1_000_000, 2_000_000
SKEW = 1_000
S = 3
"""The step in flight when the job crashed, where the relaunch resumed."""

SENDERS = {  # tag -> (attempt it claims, writer attempt, its steps, its first sample index)
    "a0": (CRASHED, None, [S, S + 1], 0),  # the crashed job's rank 0
    "a1": (None, CRASHED + SKEW, [S, S + 1], 100),  # its rank 1, started after its rank 0
    "b1": (None, RELAUNCH - SKEW, [S, S + 1], 200),  # the relaunch's rank 1, started before its rank 0
    "b0": (RELAUNCH, None, [S], 300),  # the relaunch's rank 0: claims S, where it resumed
    "ev": (None, RELAUNCH, [S, S + 1], 400),  # the relaunch's evaluation
}
KL = {tag: 10.0 * (n + 1) for n, tag in enumerate(SENDERS)}
"""Each sender's value of the key they all send."""


def _batch(otlp, run_id: str, tag: str):
    attempt, writer, steps, first = SENDERS[tag]
    spans = otlp.spans(run_id, steps, samples=2, attempt=attempt, writer_attempt=writer, first_index=first,
                       completion=lambda step, i: f"{tag} {step}/{i}", metrics=lambda step: {"kl": KL[tag],
                                                                                             f"only_{tag}": 1.0})
    return extract(otlp.request(spans))


def _whose(store, run_id: str) -> dict[int, set[str]]:
    return {r["step"]: {k[len("only_"):] for k in r if k.startswith("only_")} for r in store.steps(run_id)}


def test_every_order_of_a_crashed_and_a_relaunched_jobs_records_reads_as_the_relaunch(db, otlp):
    """Both jobs' rank 0 and rank 1 and the relaunch's evaluation send step S (the crashed job's in flight, where
    the relaunch resumed) and S+1, in each of the 120 orders: the run reads as the relaunch's ranks and its
    evaluation at both, nothing of the crashed job's, each step once, however its scalars met the crashed job's
    before rank 0's claim. Read after every write too, so the held step histories see each change."""
    store = open_store(db)
    wrong = {}
    for n, order in enumerate(itertools.permutations(SENDERS)):
        run_id = f"r{n}"
        store.write_batch(extract(otlp.request(otlp.spans(run_id, range(S), samples=1, attempt=CRASHED))))
        for tag in order:
            store.write_batch(_batch(otlp, run_id, tag))
            store.steps(run_id)
        rows = {r["step"]: r for r in store.steps(run_id)}
        got = (_whose(store, run_id).get(S), _whose(store, run_id).get(S + 1), rows[S]["kl"], rows[S + 1]["kl"])
        completions = sorted(r["completion"].split()[0] for r in store.samples(
            run_id, SampleQuery(step_min=S, step_max=S + 1, limit=100)))
        if got[:2] != ({"b0", "b1", "ev"}, {"b1", "ev"}) or not {got[2], got[3]} <= {KL["b0"], KL["b1"], KL["ev"]} \
                or completions != sorted(["b0"] * 2 + ["b1", "ev"] * 4) or len(rows) != S + 2:
            wrong[" ".join(order)] = (got, completions)
    assert wrong == {}, f"{len(wrong)} of 120 orders: {dict(itertools.islice(wrong.items(), 3))}"
    store.close()


def test_a_key_both_jobs_rank_one_sent_reads_as_the_relaunchs(db, otlp):
    """The crashed rank 1's retried export of step S reaches the store after the relaunch's rank 1's and before
    the relaunch's claim: its value of a key they share shows until the claim, then the relaunch's, not a key of
    the crashed job's beside the relaunch's."""
    store = open_store(db)
    store.write_batch(extract(otlp.request(otlp.spans("r", range(S), samples=1, attempt=CRASHED))))
    for tag in ("a0", "b1", "a1", "b0"):
        store.write_batch(_batch(otlp, "r", tag))
    row = next(r for r in store.steps("r") if r["step"] == S)
    assert row["kl"] == KL["b0"] and {k for k in row if k.startswith("only_")} == {"only_b0", "only_b1"}
    store.close()


def test_a_step_written_by_one_attempt_reads_as_its_merged_scalars(db, otlp):
    """One job, rank 1 first, then rank 0 sending a key again and a new one: the step's object is every key, the
    later value of the key sent twice, as a step row always merged them."""
    store = open_store(db)
    store.write_batch(extract(otlp.request(otlp.spans("r", [0], samples=1, writer_attempt=CRASHED + SKEW,
                                                      metrics=lambda step: {"kl": 1.0, "rank1": 2.0}))))
    store.write_batch(extract(otlp.request(otlp.spans("r", [0], samples=1, attempt=CRASHED,
                                                      metrics=lambda step: {"kl": 3.0, "rank0": 4.0}))))
    (row,) = store.steps("r")
    assert (row["kl"], row["rank1"], row["rank0"]) == (3.0, 2.0, 4.0)
    store.close()


def test_a_store_of_schema_8_keeps_its_steps_and_attributes_them_to_their_oldest_writer(db, otlp, tmp_path, request):
    """A run as schema 8 stored it (rows copied column by column, each step row tagged with its oldest writer):
    after the upgrade its steps read exactly as the same records written at the head do, and a relaunch's rank 1
    that reaches a step before its rank 0's claim keeps its scalars there."""
    from tests._support import old_schema
    from tests.sidecar.test_store import _TABLES, _before_v10, _Db

    pg = str(db).startswith("postgresql")
    source = request.getfixturevalue("pg_server").new_database() if pg else tmp_path / "source.db"
    store = open_store(source)
    for tag in ("a0", "a1"):
        store.write_batch(_batch(otlp, "r", tag))
    expected = store.steps_json("r")
    store.close()
    old_schema.make(db, 8)
    src, dst = _Db(source), _Db(db)
    for table in _TABLES:
        columns = [c for c in dst.columns(table) if c != "id" and c in src.columns(table)]
        dst.insert(table, columns, _before_v10(table, columns, src.rows(table, columns)))
    dst.conn.execute("UPDATE steps SET attempt = {}".format(CRASHED))
    src.conn.close()
    dst.conn.close()

    store = open_store(db)
    assert store.found_version == 8
    assert store.steps_json("r") == expected
    store.write_batch(_batch(otlp, "r", "b1"))
    store.write_batch(_batch(otlp, "r", "b0"))
    assert _whose(store, "r") == {S: {"b0", "b1"}, S + 1: {"b1"}}
    store.close()
