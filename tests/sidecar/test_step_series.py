"""Runs' step histories held in memory for reads (`_step_series`): always what the database holds,
whoever wrote it, in bounded memory; and the downsampling over them (`m4_rows`)."""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest

from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
from otel_grpo.sidecar.store import _step_reads, open_store, open_writer
from otel_grpo.sidecar.store._downsample import bucket_count, m4_rows
from otel_grpo.sidecar.store._step_series import Series, StepCache


def _batch(run_id: str, steps, kl=lambda step: 0.01 * step, extra=None, start: float = 1000.0) -> Batch:
    batch = Batch()
    batch.runs[run_id] = {}
    for step in steps:
        metrics = {"kl": kl(step), **(extra(step) if extra else {})}
        batch.steps.append(StepRecord(run_id, step, step.to_bytes(8, "big"), start + step, start + step + 1, metrics))
    return batch


def _kl(store, run_id: str, **kw) -> dict[int, float]:
    return {r["step"]: r["kl"] for r in store.steps(run_id, ["kl"], **kw)}


@pytest.fixture
def stores(db):
    """The serving store and, beside it, a writer on the same database (an ingest worker's
    handle: another process on SQLite, or another replica's on PostgreSQL)."""
    reader = open_store(db)
    writer = open_writer(db)
    yield reader, writer
    writer.close()
    reader.close()


def test_a_held_history_shows_every_later_write_of_another_writer(stores):
    reader, writer = stores
    writer.write_batch(_batch("r", range(5)))
    assert _kl(reader, "r") == {s: 0.01 * s for s in range(5)}
    writer.write_batch(_batch("r", range(5, 8)))  # new steps
    writer.write_batch(_batch("r", [2], kl=lambda s: 9.0))  # an old step written again (a resumed run)
    writer.write_batch(_batch("r", [3], kl=lambda s: 0.03, extra=lambda s: {"entropy": 0.5}))  # merged into it
    expected = {s: 0.01 * s for s in range(8)} | {2: 9.0, 3: 0.03}
    assert _kl(reader, "r") == expected
    rows = {r["step"]: r for r in reader.steps("r")}
    assert rows[3]["entropy"] == 0.5 and "entropy" not in rows[4]
    assert [r["step"] for r in reader.steps("r", ["entropy"]) if "entropy" in r] == [3]  # logged at step 3 only
    assert _kl(reader, "r", step_min=2, step_max=3) == {2: 9.0, 3: 0.03}


def test_a_held_history_keeps_which_steps_were_not_finite_across_writes(stores):
    """A non-finite value (stored null: the OTLP decoder's None for NaN and inf) stays null in the held history as later steps arrive, and
    goes once its step is written again with a value; a step that did not log the column has no entry."""
    reader, writer = stores
    writer.write_batch(_batch("r", range(4), kl=lambda s: None if s == 1 else 0.1 * s))
    assert [r.get("kl", "absent") for r in reader.steps("r", ["kl"])] == [0.0, None, 0.2, pytest.approx(0.3)]
    writer.write_batch(_batch("r", [4, 5], kl=lambda s: 0.5, extra=lambda s: {"entropy": None} if s == 5 else {}))
    rows = reader.steps("r", ["kl", "entropy"])
    assert [r["kl"] for r in rows][1] is None and [r.get("entropy", "absent") for r in rows] == ["absent"] * 5 + [None]
    writer.write_batch(_batch("r", [1], kl=lambda s: 0.1))
    assert [r["kl"] for r in reader.steps("r", ["kl"])][1] == 0.1


def test_steps_deleted_by_retention_are_gone_from_a_held_history(stores):
    reader, writer = stores
    writer.write_batch(_batch("r", range(10)))
    writer.write_batch(_batch("old", range(2)), now=1.0)
    assert len(_kl(reader, "r")) == 10 and len(_kl(reader, "old")) == 2
    writer.apply_retention(max_steps=4)
    assert sorted(_kl(reader, "r")) == [6, 7, 8, 9]
    writer.apply_retention(max_runs=1)  # "old" is the least recently updated
    assert reader.steps("old") == []
    writer.write_batch(_batch("old", [7], kl=lambda s: 0.5))  # the same id, a new run
    assert _kl(reader, "old") == {7: 0.5}


def test_steps_aged_out_are_gone_from_a_held_history(stores):
    reader, writer = stores
    now = time.time()
    writer.write_batch(_batch("r", range(3)))  # steps that ended in 1970
    writer.write_batch(_batch("r", range(3, 5), start=now))
    assert len(_kl(reader, "r")) == 5
    writer.apply_retention(max_age_s=3600, now=now)
    assert sorted(_kl(reader, "r")) == [3, 4]


def test_the_held_histories_stay_within_their_bytes(db):
    store = open_store(db, step_cache=StepCache(200_000))
    try:
        for run_id in ("a", "b", "c"):
            store.write_batch(_batch(run_id, range(300)))
            assert len(_kl(store, run_id)) == 300
        assert 0 < store.step_cache.nbytes <= 200_000
        store.write_batch(_batch("big", range(3000)))
        assert len(_kl(store, "big")) == 3000  # too big to hold: read whole, served all the same
        assert store.step_cache.nbytes <= 200_000
        assert len(_kl(store, "a")) == 300
    finally:
        store.close()


def _current(cache: StepCache, run_id: str, identity: tuple, version: int, read_since) -> Series:
    """One run's series through the cache's reads of many runs: `read_since(v)` gives the run's rows after v."""
    return cache.current([(run_id, identity, version)],
                         lambda behind: [(run_id, *row) for row in read_since(behind[run_id])])[run_id]


def test_a_held_history_reads_only_what_was_written_since():
    reads = []
    rows = [(s, f"t{s}", '{"kl":%s}' % s) for s in range(100)]

    def read_since(version):
        reads.append(version)
        return rows if version < 0 else [r for r in rows if r[0] >= version]

    cache = StepCache(10**8)
    assert len(_current(cache, "r", (1.0, 0), 100, read_since).steps) == 100
    assert _current(cache, "r", (1.0, 0), 100, read_since).columns["kl"][5] == 5.0  # current: nothing read
    rows.append((100, "t100", '{"kl":100,"x":1}'))
    series = _current(cache, "r", (1.0, 0), 101, read_since)
    assert reads == [-1, 100] and series.steps[-1] == 100 and series.columns["x"][-1] == 1.0
    assert np.isnan(series.columns["x"][:100]).all()
    _current(cache, "r", (1.0, 1), 101, read_since)  # a new epoch (retention deleted steps): whole again
    assert reads == [-1, 100, -1]


def test_many_runs_are_brought_up_to_date_by_one_read_of_those_behind():
    """A read of several runs asks for the rows of those behind only, each from its own held version, in one call."""
    calls = []
    stored = {run: [(run, s, f"t{s}", '{"kl":%d}' % s) for s in range(n)] for run, n in (("a", 3), ("b", 5), ("c", 2))}

    def read_since(behind):
        calls.append(dict(behind))
        return [row for run, since in behind.items() for row in stored[run] if row[1] >= since]

    cache = StepCache(10**8)
    heads = [("a", (1.0, 0), 3), ("b", (1.0, 0), 5)]
    assert {run: len(s.steps) for run, s in cache.current(heads, read_since).items()} == {"a": 3, "b": 5}
    stored["b"].append(("b", 5, "t5", '{"kl":5}'))
    series = cache.current([("c", (1.0, 0), 2), ("b", (1.0, 0), 6), ("a", (1.0, 0), 3)], read_since)
    assert calls == [{"a": -1, "b": -1}, {"c": -1, "b": 5}]  # "a" is current: not asked for
    assert list(series) == ["c", "b", "a"] and series["b"].steps.tolist() == list(range(6))
    cache.current([("a", (1.0, 0), 3), ("b", (1.0, 0), 6), ("c", (1.0, 0), 2)], read_since)
    assert len(calls) == 2  # every run current: nothing read


def test_a_run_over_the_budget_is_read_whole_at_every_read():
    reads = []
    rows = [(s, f"t{s}", "{" + ",".join(f'"stat_{k}":{s}.5' for k in range(40)) + "}") for s in range(500)]

    def read_since(version):
        reads.append(version)
        return rows if version < 0 else [r for r in rows if r[0] >= version]

    cache = StepCache(Series.build((1.0, 0), 500, rows).nbytes // 2)
    assert _current(cache, "r", (1.0, 0), 500, read_since).columns["stat_3"][7] == 7.5
    assert _current(cache, "r", (1.0, 0), 500, read_since).columns["stat_3"][7] == 7.5
    assert reads == [-1, -1] and len(cache) == 0 and cache.nbytes == 0


def _rows(steps, value=lambda s: s) -> list[tuple]:
    return [(s, f"t{s}", '{"kl":%r}' % float(value(s))) for s in steps]


def test_new_steps_grow_the_held_arrays_in_place_and_an_older_series_never_changes():
    """Steps after the held ones are written into the arrays' spare room: a run's steps are copied a
    bounded number of times as it grows one step a read (the heap does not churn a copy of every
    column per read), and a series a reader holds reads the same steps and values throughout."""
    series, rooms = Series.build((1.0, 0), 0, _rows(range(10))), set()
    old = series
    for step in range(10, 2000):
        series = series.merged((1.0, 0), step, _rows([step]))
        rooms.add(id(series._room))
    assert len(rooms) <= 16 and series.columns["kl"].tolist() == list(map(float, range(2000)))
    assert old.steps.tolist() == list(range(10)) and old.columns["kl"].tolist() == list(map(float, range(10)))
    grown = old.merged((1.0, 0), 1, _rows([10], lambda s: -1.0))  # an older series extended again: a copy
    assert grown.columns["kl"][10] == -1.0 and series.columns["kl"][10] == 10.0
    tip = series
    again = tip.merged((1.0, 0), 2001, _rows([5], lambda s: 99.0))  # a held step written again: a copy
    assert again.columns["kl"][5] == 99.0 and tip.columns["kl"][5] == 5.0 and len(again.steps) == 2000
    assert not np.shares_memory(again.columns["kl"], tip.columns["kl"])


def test_a_row_of_every_column_is_the_step_as_written(stores):
    """Whole rows are written from the held columns: each is the step's stored object (every value
    exactly, nulls as null, a key the step did not log absent), however the steps arrived."""
    reader, writer = stores
    rng = random.Random(3)
    keys = ["kl", "reward", "entropy", "grpo.x/y", "clip_ratio/region_mean"]
    written = {}
    for start in range(0, 60, 7):
        batch = Batch()
        batch.runs["r"] = {}
        for step in rng.sample(range(start, start + 7), 7):  # in any order within a request
            metrics = {k: rng.choice([None, rng.uniform(-1e6, 1e6), rng.random() * 1e-300, 0.1 + 0.2])
                       for k in keys if rng.random() < 0.7}
            written[step] = metrics
            batch.steps.append(StepRecord("r", step, rng.randbytes(8), 1000.0 + step, 1001.0 + step, metrics))
        writer.write_batch(batch)
        rows = reader.steps("r")
        assert [{k: v for k, v in r.items() if k not in ("run_id", "step", "time")} for r in rows] == \
            [written[s] for s in sorted(written)]
    only_ids = json.loads(b"[" + b",".join(reader.steps_pieces("r", fields=("run_id",))) + b"]")
    assert only_ids == [{**written[s], "run_id": "r"} for s in sorted(written)]


RUNS = [f"run-{i:02d}" for i in range(30)]
QUERIES = [{}, {"metrics": ["kl"], "step_min": 1, "points": 3},
           {"metrics": ["entropy", "kl"], "limit": 2, "offset": 1, "fields": ("step",)}]


def _many_runs(reader, writer) -> list[bytes]:
    """Reads of RUNS (and an unknown run) together, their steps held in every state (none, current, behind,
    another epoch), with two runs written to between a read's chunks; each read checked against the runs
    read one by one, each whole (on `writer`, holding nothing). Returns the reads."""
    rng = random.Random(11)
    for i, run_id in enumerate(RUNS):  # run-07 has more steps than a chunk holds in the tests: read alone
        writer.write_batch(_batch(run_id, range(30) if i == 7 else range(rng.randint(1, 8)),
                                  kl=lambda s, i=i: i + s / 8, start=1000.2567,
                                  extra=lambda s: {"entropy": None} if s == 2 else {"entropy": s / 3}))
    for run_id in RUNS[::3]:
        reader.steps_json(run_id)  # held, current
    for run_id in RUNS[::4]:  # behind: a new step, and an old one written again (a resumed run)
        writer.write_batch(_batch(run_id, [20, 1], kl=lambda s: -1.0))
    writer.apply_retention(max_steps=6)  # the runs with more steps: another epoch, read whole again

    def alone(**query) -> dict[str, bytes]:
        writer.step_cache = StepCache()  # nothing held: each run read whole
        return {run_id: b",".join(writer.steps_pieces(run_id, **query)) for run_id in RUNS}

    def joined(answers) -> bytes:
        return b",".join(a for a in answers if a)

    before = alone()
    pieces = reader.runs_steps_pieces([*RUNS, "unknown"])
    first = next(pieces)  # every run's version and the first chunk's steps are read
    writer.write_batch(_batch(RUNS[0], [21], kl=lambda s: 5.0))  # held and behind, in the first chunk: read
    writer.write_batch(_batch(RUNS[-1], [22], kl=lambda s: 5.0))  # never held, in the last chunk: not yet
    reads = [b",".join([first, *pieces])]
    after = alone()
    assert before[RUNS[0]] != after[RUNS[0]] and before[RUNS[-1]] != after[RUNS[-1]]
    assert reads[0] == joined([*(before[r] for r in RUNS[:-1]), after[RUNS[-1]]])
    for query in QUERIES:  # the next reads see both writes, whatever version the held steps were kept at
        reads.append(b",".join(reader.runs_steps_pieces([*RUNS, "unknown"], **query)))
        assert reads[-1] == joined(alone(**query).values()), query
    return reads


def test_runs_read_together_answer_as_each_read_alone(stores, monkeypatch):
    """A read of many runs (Grafana's All) answers each run's rows as a read of that run alone does, whatever
    each run's held steps, however the runs are cut into chunks, and with runs written to as it reads."""
    monkeypatch.setattr(_step_reads, "STEP_READ_ROWS", 12)
    _many_runs(*stores)


def test_both_backends_answer_runs_read_together_alike(tmp_path, pg_url, monkeypatch):
    monkeypatch.setattr(_step_reads, "STEP_READ_ROWS", 12)
    reads = []
    for db in (tmp_path / "sidecar.db", pg_url):
        reader, writer = open_store(db), open_writer(db)
        try:
            reads.append(_many_runs(reader, writer))
        finally:
            writer.close()
            reader.close()
    assert reads[0] == reads[1] and len(reads[0][1]) > 10_000


def test_the_held_total_is_kept_as_runs_come_and_go():
    """The cache keeps its total as runs are held, replaced, dropped and refused (no sum over the
    runs at each read): after any sequence it is the sum of what it holds, within its bound."""
    rng = random.Random(7)
    cache = StepCache(60_000)
    versions: dict[str, int] = {}

    def rows(run_id: str, n: int) -> list[tuple]:
        return [(s, None, '{"kl":%d}' % s) for s in range(n)]

    for _ in range(300):
        run_id = f"r{rng.randrange(40)}"
        n = rng.choice([5, 50, 200, 2000])  # 2000 steps is more than the whole bound: never held
        versions[run_id] = versions.get(run_id, 0) + 1
        _current(cache, run_id, (1.0, versions[run_id]), 1, lambda v, run_id=run_id, n=n: rows(run_id, n))
        held = [series for series, _ in cache._runs.values()]
        assert cache.nbytes == sum(s.nbytes for s in held) <= 60_000
        assert len(cache) == len(held)
    assert 0 < len(cache) < 40


def _m4_reference(steps: list[int], columns: list[list[float]], buckets: int) -> list[int]:
    """M4 as written out by hand: per bucket of step numbers, its first and last row and each
    column's first lowest and first highest row (NaN never counts)."""
    first, span = steps[0], steps[-1] - steps[0] + 1
    keep = set()
    for b in range(buckets):
        lo, hi = first + -(-(b * span) // buckets), first + -(-((b + 1) * span) // buckets)
        rows = [i for i, s in enumerate(steps) if lo <= s < hi]
        if not rows:
            continue
        keep.update((rows[0], rows[-1]))
        for column in columns:
            valued = [i for i in rows if column[i] == column[i]]
            if valued:
                keep.add(min(valued, key=lambda i: (column[i], i)))
                keep.add(min(valued, key=lambda i: (-column[i], i)))
    return sorted(keep)


@pytest.mark.parametrize("seed", range(40))
def test_downsampling_keeps_each_buckets_ends_and_extremes(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 400)
    steps = sorted(rng.sample(range(rng.randint(n, 3 * n) + 5), n))
    pool = [0.0, -0.0, 1.0, 1.0, 2.5, float("nan")]  # ties, signed zeros and missing values
    columns = [[rng.choice(pool) if rng.random() < 0.5 else rng.uniform(-1, 1) for _ in steps]
               for _ in range(rng.randint(0, 4))]
    if columns and rng.random() < 0.2:
        columns[0] = [float("nan")] * n  # a column with no value at all keeps nothing
    points = rng.randint(2, 60)
    kept = m4_rows(np.array(steps, dtype=np.int64), [np.array(c) for c in columns], points).tolist()
    assert len(kept) <= points  # what `points` means, for any number of columns
    if n <= points:
        assert kept == list(range(n))
        return
    floor = bucket_count(points, len(columns))
    if len(_m4_reference(steps, columns, floor)) > points:  # not even one bucket fits: the ends and the spikes
        assert kept[0] == 0 and kept[-1] == n - 1
        return
    # M4 at some bucket count from the guaranteed one up, the most that were found to fit
    assert any(kept == _m4_reference(steps, columns, b) for b in range(floor, points + 1))


def test_downsampling_handles_the_extreme_step_numbers():
    steps = np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64)
    assert m4_rows(steps, [np.array([1.0, 5.0, 2.0])], 4).tolist() == [0, 1, 2]
