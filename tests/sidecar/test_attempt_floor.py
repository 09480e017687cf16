"""A run's attempt floor: a record of an attempt older than the one the run resumed as is stale at every step
from where it resumed, whatever `step_attempts` holds; another rank's and an evaluation's records carry their
writer's attempt and claim nothing (`grpo.writer_attempt`). Store level, on both backends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from otel_grpo.sidecar.otlp import extract
from otel_grpo.sidecar.store import SampleQuery, open_store

CRASHED, RELAUNCH = 1_000_000, 2_000_000
"""Two jobs' rank 0 attempts (a process's start in ns: far apart, a relaunch comes after a crash)."""
SKEW = 1_000
"""Another rank of the same job starts its Telemetry this much before or after its rank 0."""


def _records(otlp, steps, tag: str, kl: float, attempt=None, writer=None, first_index=0, samples=4, only=None):
    """The spans of `steps` as one sender wrote them: `attempt` claims them, `writer` claims nothing (an
    evaluation, another rank: sample indices from `first_index`). Completions and scalars say whose they are."""
    spans = otlp.spans("r", steps, samples=samples, attempt=attempt, writer_attempt=writer, first_index=first_index,
                       completion=lambda step, i: f"{tag} {step}/{i}",
                       metrics=lambda step: {"kl": kl + step, f"only_{tag}": 1.0})
    if only == "samples":
        spans = [s for s in spans if s.name == "grpo.samples"]
    return extract(otlp.request(spans))


def _completions(store, step: int) -> list[str]:
    return sorted(r["completion"] for r in store.samples("r", SampleQuery(step_min=step, step_max=step, limit=100)))


def _steps(store) -> dict[int, dict]:
    return {r["step"]: r for r in store.steps("r")}


def _whose(store) -> dict[int, set[str]]:
    """Each step's senders, by the `only_<tag>` scalars it holds."""
    return {n: {k[len("only_"):] for k in row if k.startswith("only_")} for n, row in _steps(store).items()}


def test_a_crashed_attempts_step_that_first_arrives_after_the_relaunch_is_dropped(db, otlp):
    """The crashed attempt sent 0-3, its 4-5 still in flight (a retry queue, or its spill replayed later); the
    relaunch resumed at step 2. The store never had 4-5, so no step of theirs was claimed for the relaunch: the
    floor drops them all the same, and a relaunch that resumed past the crashed attempt's last stored step too."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(4), "first", 10.0, attempt=CRASHED))
    store.write_batch(_records(otlp, [2], "second", 20.0, attempt=RELAUNCH))
    assert store.write_batch(_records(otlp, [4, 5], "first", 10.0, attempt=CRASHED)) == 0
    (run,) = store.runs()
    assert run["last_step"] == 2 and run["sample_count"] == 3 * 4 and sorted(_steps(store)) == [0, 1, 2]
    assert _completions(store, 4) == []
    third = RELAUNCH + 1_000_000  # resumes at step 3: the store holds nothing of it to take over
    store.write_batch(_records(otlp, [3], "third", 30.0, attempt=third))
    store.write_batch(_records(otlp, [4], "second", 20.0, attempt=RELAUNCH))  # the relaunch's, in flight
    assert _whose(store) == {0: {"first"}, 1: {"first"}, 2: {"second"}, 3: {"third"}}
    assert store.runs()[0]["last_step"] == 3
    store.close()


def test_a_relaunch_from_below_the_retention_window_retires_the_crashed_steps(db, otlp):
    """`max_steps=5` kept the crashed attempt's 5-9 and deleted what `step_attempts` said of 0-4. The relaunch
    resumed from step 2's checkpoint: its 3-4 are new steps to the store, yet the run reads as the relaunch,
    and the next retention pass keeps the relaunch's steps, not the crashed ones."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(10), "first", 10.0, attempt=CRASHED))
    store.apply_retention(max_steps=5)
    store.write_batch(_records(otlp, range(3, 5), "second", 20.0, attempt=RELAUNCH))
    assert _whose(store) == {3: {"second"}, 4: {"second"}} and store.runs()[0]["last_step"] == 4
    store.apply_retention(max_steps=5)
    assert _whose(store) == {3: {"second"}, 4: {"second"}}
    assert store.runs()[0]["sample_count"] == 2 * 4
    store.close()


def test_a_late_evaluation_or_other_rank_of_the_crashed_attempt_stays_out_of_a_retired_step(db, otlp):
    """The crashed attempt reached step 5, the relaunch resumed at 3 and is at 4. The crashed job's evaluation
    and its rank 1 (started after its rank 0) send step 5 late, claiming nothing: dropped, the run at step 4.
    The relaunch's rank 1, started before its rank 0, is the relaunch's: stored."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(6), "first", 10.0, attempt=CRASHED))
    store.write_batch(_records(otlp, range(3, 5), "second", 20.0, attempt=RELAUNCH))
    for writer in (CRASHED, CRASHED + SKEW):
        assert store.write_batch(_records(otlp, [5], "late", 30.0, writer=writer, first_index=100)) == 0
    (run,) = store.runs()
    assert run["last_step"] == 4 and 5 not in _steps(store) and _completions(store, 5) == []
    assert store.write_batch(_records(otlp, [5], "rank1", 40.0, writer=RELAUNCH - SKEW, first_index=100)) == 4
    assert _whose(store)[5] == {"rank1"} and store.runs()[0]["last_step"] == 5
    store.close()


def test_another_ranks_records_sent_before_rank_zeros_first_claim_stay(db, otlp):
    """`export_all_ranks`: rank 1 (its Telemetry started before rank 0's) reaches the sidecar first. Rank 0's
    claim of the step keeps rank 1's rows and scalars beside its own; a relaunch's claim replaces both ranks' of
    the crashed job, but keeps its own rank 1's that came before its rank 0."""
    store = open_store(db)
    store.write_batch(_records(otlp, [0], "rank1", 1.0, writer=CRASHED - SKEW, first_index=100))
    store.write_batch(_records(otlp, [0], "rank0", 0.0, attempt=CRASHED))
    assert _whose(store)[0] == {"rank0", "rank1"}
    assert _completions(store, 0) == sorted([f"rank0 0/{i}" for i in range(4)] + [f"rank1 0/{i}" for i in range(4)])
    store.write_batch(_records(otlp, [0], "again1", 2.0, writer=RELAUNCH - SKEW, first_index=200, only="samples"))
    assert len(_completions(store, 0)) == 12  # merged: nothing tells the relaunch's rank 1 from a late one yet
    store.write_batch(_records(otlp, [0], "again0", 3.0, attempt=RELAUNCH))
    assert _completions(store, 0) == sorted([f"again0 0/{i}" for i in range(4)] + [f"again1 0/{i}" for i in range(4)])
    assert _whose(store)[0] == {"again0"} and store.runs()[0]["sample_count"] == 8
    store.close()


def test_a_relaunch_resuming_earlier_than_its_first_record_keeps_what_it_sent_since(db, otlp):
    """The relaunch's step 4 arrives before its step 3 (the resume step), and its evaluation's rows at step 4
    between them: step 3 moves the floor down without touching step 4, which the relaunch already holds."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(6), "first", 10.0, attempt=CRASHED))
    store.write_batch(_records(otlp, [4], "second", 20.0, attempt=RELAUNCH))
    store.write_batch(_records(otlp, [4], "eval", 30.0, writer=RELAUNCH, first_index=100))
    store.write_batch(_records(otlp, [4], "legacy", 40.0, first_index=200))  # a sender that names no attempt
    before = _completions(store, 4)
    store.write_batch(_records(otlp, [3], "second", 20.0, attempt=RELAUNCH))
    assert _completions(store, 4) == before and len(before) == 12
    assert _whose(store) == {0: {"first"}, 1: {"first"}, 2: {"first"}, 3: {"second"},
                             4: {"second", "eval", "legacy"}}
    store.close()


def test_a_relaunchs_evaluation_before_its_first_claim_keeps_its_rows(db, otlp):
    """The relaunch evaluates at step 4 and at step 7 (beyond the crashed attempt's last) before its training
    record of step 3, where it resumed, arrives. Its rows and scalars stay, at step 4 beside nothing of the crashed
    attempt's (whose training values there were merged into one object with them before v9, and went with them)."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(6), "first", 10.0, attempt=CRASHED))
    store.write_batch(_records(otlp, [4, 7], "eval", 30.0, writer=RELAUNCH, first_index=100))
    store.write_batch(_records(otlp, [3], "second", 20.0, attempt=RELAUNCH))
    assert _completions(store, 4) == [f"eval 4/{i}" for i in range(4)]
    assert _completions(store, 5) == []
    assert _whose(store) == {0: {"first"}, 1: {"first"}, 2: {"first"}, 3: {"second"}, 4: {"eval"}, 7: {"eval"}}
    assert _steps(store)[4]["kl"] == 30.0 + 4
    assert store.runs()[0]["sample_count"] == 3 * 4 + 4 + 2 * 4
    store.close()


def test_a_store_of_schema_7_gets_its_runs_floors_from_the_steps_attempts(db, otlp, tmp_path, request):
    """A relaunched run as schema 7 stored it (rows copied column by column into a database of that schema):
    the upgrade finds where the relaunch resumed, so the crashed attempt's late step and its evaluation there,
    which `step_attempts` has no row for, are dropped; a run with one attempt has no older writer to drop."""
    from tests._support import old_schema
    from tests.sidecar.test_store import _TABLES, _before_v10, _Db

    pg = str(db).startswith("postgresql")
    source = request.getfixturevalue("pg_server").new_database() if pg else tmp_path / "source.db"
    store = open_store(source)
    store.write_batch(_records(otlp, range(6), "first", 10.0, attempt=CRASHED))
    store.write_batch(_records(otlp, range(3, 5), "second", 20.0, attempt=RELAUNCH))
    store.close()
    old_schema.make(db, 7)
    src, dst = _Db(source), _Db(db)
    for table in _TABLES:
        columns = [c for c in dst.columns(table) if c != "id"]  # the database numbers rows it is given
        dst.insert(table, columns, _before_v10(table, columns, src.rows(table, columns)))
    src.conn.close()
    dst.conn.close()

    store = open_store(db)
    assert store.found_version == 7
    assert store.write_batch(_records(otlp, [6], "first", 10.0, attempt=CRASHED)) == 0
    assert store.write_batch(_records(otlp, [6], "eval", 30.0, writer=CRASHED, first_index=100)) == 0
    assert store.write_batch(_records(otlp, [6], "rank1", 40.0, writer=RELAUNCH - SKEW, first_index=100)) == 4
    assert _whose(store) == {0: {"first"}, 1: {"first"}, 2: {"first"}, 3: {"second"}, 4: {"second"}, 6: {"rank1"}}
    store.close()


_RANK = """
import sys, time
time.sleep(float(sys.argv[1]))  # the rank's own set-up before it builds its Telemetry
from otel_grpo.telemetry import Telemetry, TelemetrySettings
tel = Telemetry(TelemetrySettings(run_id="r", output_dir=sys.argv[2], metrics_exporters=["none"],
                                  traces_exporters=["none"], spill_samples=False))
print(tel.attempt)
tel.shutdown()
"""


def _launch(tmp_path, setups: list[float]) -> list[int]:
    """The attempts of one job's ranks, started together as a launcher starts them (its rank variables set),
    each building its Telemetry after its own set-up."""
    ranks = [{**os.environ, "RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": str(len(setups))}
             for i in range(len(setups))]
    procs = [subprocess.Popen([sys.executable, "-c", _RANK, str(setup), str(tmp_path / f"rank{i}")],
                              stdout=subprocess.PIPE, text=True, env=env) for i, (setup, env) in
             enumerate(zip(setups, ranks))]
    out = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    return [int(o.split()[-1]) for o in out]


def test_a_jobs_ranks_stay_apart_from_a_relaunch_soon_after_whatever_their_set_up_takes(db, otlp, tmp_path):
    """Rank 0 prepares alone for a while before it builds its Telemetry, rank 1 does not; the job crashes in its
    first steps and is relaunched at once. Attempts taken at construction put the crashed job's rank 1 nearer
    the relaunch than its own rank 0 (halfway between the two jobs' rank 0: the relaunch's side), and the
    relaunch's rank 1 on the crashed job's side, so the crashed rank 1's later steps stayed and the relaunch's
    rank 1 was dropped for good. A rank's attempt is its process's start: each job's ranks carry one attempt."""
    crashed = _launch(tmp_path / "a", [4.0, 0.0])
    relaunch = _launch(tmp_path / "b", [4.0, 0.0])
    assert max(crashed) < min(relaunch)
    store = open_store(db)
    store.write_batch(_records(otlp, range(4), "a0", 1.0, attempt=crashed[0]))
    store.write_batch(_records(otlp, range(4), "a1", 1.0, writer=crashed[1], first_index=100, samples=1))
    store.write_batch(_records(otlp, [2], "b0", 2.0, attempt=relaunch[0]))
    store.write_batch(_records(otlp, [2, 3], "b1", 2.0, writer=relaunch[1], first_index=100, samples=1))
    assert _whose(store)[2] == {"b0", "b1"}
    assert _completions(store, 2) == sorted([*(f"b0 2/{i}" for i in range(4)), "b1 2/0"])
    assert _whose(store)[3] == {"b1"} and _completions(store, 3) == ["b1 3/0"]


def test_a_relaunch_of_a_job_that_sent_no_attempts_retires_its_later_steps(db, otlp):
    """A job of a release before attempts sent steps 0-5 and crashed; the relaunch, upgraded, resumed from step
    2's checkpoint. Its first claim is the run's first: the old job's steps after it go all the same (its rows are
    older than any attempt's), so the run reads as the relaunch, not its step 3 followed by the old 4-5."""
    store = open_store(db)
    store.write_batch(_records(otlp, range(6), "old", 10.0))
    store.write_batch(_records(otlp, [3], "new", 20.0, attempt=RELAUNCH))
    assert _whose(store) == {0: {"old"}, 1: {"old"}, 2: {"old"}, 3: {"new"}}
    (run,) = store.runs()
    assert run["last_step"] == 3 and run["sample_count"] == 4 * 4
    assert _completions(store, 4) == [] and _completions(store, 3) == [f"new 3/{i}" for i in range(4)]
    store.close()


def test_a_new_runs_first_claim_keeps_its_own_other_ranks_later_steps(db, otlp):
    """Rank 1 of a new run is ahead of rank 0: its step 3 arrives before rank 0's first claim, at step 2. Rows
    that name their writer are the job's own: the first claim keeps them."""
    store = open_store(db)
    store.write_batch(_records(otlp, [3], "r1", 1.0, writer=RELAUNCH + SKEW, first_index=100, samples=1))
    store.write_batch(_records(otlp, [2], "r0", 1.0, attempt=RELAUNCH))
    assert _whose(store) == {2: {"r0"}, 3: {"r1"}} and store.runs()[0]["last_step"] == 3
    store.close()


@pytest.mark.parametrize("rank_one_first", [True, False])
def test_a_middle_launchs_late_records_stay_out_of_the_newest_launchs_steps(db, otlp, rank_one_first):
    """Launches A, B and C of one run: A ran 0-7, B resumed at 3 and ran 3-6, C resumed at 5. B's records reach the
    store after C's, its rank 1's (started nearer C than A) before or after its rank 0's: the run reads as A below
    B's resume step, B below C's, C from there on, B's rank 1 nowhere in C's steps."""
    a, b, c = 1_000_000, 3_000_000, 3_500_000  # B relaunched a while after A, C soon after B
    store = open_store(db)
    store.write_batch(_records(otlp, range(8), "a", 1.0, attempt=a))
    store.write_batch(_records(otlp, range(5, 9), "c", 3.0, attempt=c))
    late = [_records(otlp, range(3, 7), "b1", 2.0, writer=b - SKEW, first_index=100, samples=1),
            _records(otlp, range(3, 7), "b", 2.0, attempt=b)]
    for batch in late if rank_one_first else late[::-1]:
        store.write_batch(batch)
    assert _whose(store) == {0: {"a"}, 1: {"a"}, 2: {"a"}, 3: {"b", "b1"}, 4: {"b", "b1"}, 5: {"c"}, 6: {"c"},
                             7: {"c"}, 8: {"c"}}
    assert _completions(store, 6) == [f"c 6/{i}" for i in range(4)]
    assert store.runs()[0]["sample_count"] == 3 * 4 + 2 * (4 + 1) + 4 * 4
    store.close()
