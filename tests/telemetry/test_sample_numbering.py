"""A step's sample rows numbered across its records (`_numbering`): a second record with rows at a step (an
evaluation at that step, a second `logged_step`) numbers on after the first's, the same rows sent again keep
their numbers, and a new attempt numbers anew. Through both sinks and the spill."""

from __future__ import annotations

import json
import math

from otel_grpo.telemetry._numbering import StepNumbering, record_key
from otel_grpo.telemetry._samples import Selected


def _rows(tag: str, n: int) -> list[dict]:
    return [{"prompt": f"{tag}-p{i}", "completion": f"{tag}-{i}", "reward": float(i)} for i in range(n)]


def _numbers(captured) -> dict[tuple[int, str], int]:
    """(step, completion) -> sample_index of every sample event sent."""
    return {(sp.attributes["grpo.step"], e.attributes["completion"]): e.attributes["sample_index"]
            for sp in captured.spans("grpo.samples") for e in sp.events}


def test_every_record_of_a_step_numbers_its_rows_after_the_earlier_ones(make_captured):
    cap = make_captured(top_k=8, bottom_k=0, random_k=0)
    tel = cap.tel
    with tel.step(3) as s:
        s.record({"kl": 0.1})
        s.samples(_rows("train", 3))
    with tel.logged_step(3, evaluation=True) as s:  # an evaluation at the step
        s.record({"eval_reward": 0.9})
        s.samples(_rows("eval", 3))
    with tel.step(4) as s:
        s.samples(_rows("a", 2))
    with tel.logged_step(4) as s:  # another generation batch of step 4
        s.samples(_rows("b", 2))
    numbers = _numbers(cap)
    assert {k: v for k, v in numbers.items() if k[0] == 3} == {
        **{(3, f"train-{i}"): i for i in range(3)}, **{(3, f"eval-{i}"): 3 + i for i in range(3)}}
    assert {k: v for k, v in numbers.items() if k[0] == 4} == {
        **{(4, f"a-{i}"): i for i in range(2)}, **{(4, f"b-{i}"): 2 + i for i in range(2)}}
    tel.finish()
    spilled = [json.loads(line) for f in sorted((cap.output_dir / "samples").glob("step_*.jsonl"))
               for line in f.read_text().splitlines()]
    assert {(r["step"], r["completion"]): r["sample_index"] for r in spilled} == numbers


def test_the_same_rows_sent_again_keep_their_numbers(make_captured):
    """A follower sends what a failed export may have delivered again: the sidecar must store it once."""
    cap = make_captured(top_k=8, bottom_k=0, random_k=0)
    for _ in range(2):
        with cap.tel.logged_step(5) as s:
            s.samples(_rows("x", 3))
    with cap.tel.logged_step(5) as s:
        s.samples(_rows("y", 3))
    events = [(e.attributes["completion"], e.attributes["sample_index"])
              for sp in cap.spans("grpo.samples") for e in sp.events]
    assert sorted(events) == sorted([(f"x-{i}", i) for i in range(3)] * 2 + [(f"y-{i}", 3 + i) for i in range(3)])


def test_a_new_attempt_numbers_its_steps_anew(make_captured):
    first = make_captured(top_k=8, bottom_k=0, random_k=0)
    for tag in ("a", "b"):
        with first.tel.logged_step(2) as s:
            s.samples(_rows(tag, 2))
    again = make_captured(top_k=8, bottom_k=0, random_k=0)  # a relaunch: a newer attempt, whose claim replaces
    assert again.tel.attempt > first.tel.attempt
    with again.tel.step(2) as s:
        s.samples(_rows("c", 2))
    assert sorted(_numbers(again).values()) == [0, 1]


def test_numbering_keeps_recent_steps_and_tells_records_apart():
    numbering = StepNumbering(kept=2)
    assert numbering.start(0, 1, 4, "a") == 0
    assert numbering.start(0, 1, 3, "b") == 4
    assert numbering.start(0, 1, 4, "a") == 0  # the same record again
    assert numbering.start(1, 1, 2, "b") == 0  # another attempt's step
    assert numbering.start(0, 1, 1, "c") == 7  # used last: kept
    assert numbering.start(0, 2, 1, "a") == 0  # a third step: attempt 1's step 1 goes, the least recently used
    assert numbering.start(0, 1, 1, "d") == 8
    assert numbering.start(1, 1, 2, "e") == 0  # forgotten: numbered anew


def test_a_record_key_is_the_same_for_equal_rows_nan_included():
    def key(reward, completion="c"):
        picked = [Selected(0, "top", {})]
        return record_key(False, 1, picked, [{"completion": "".join(completion), "reward": reward}])
    assert key(float("nan")) == key(float("nan"))  # two NaN objects: hash(nan) is its object's
    assert key(1.0, ["c", "d"]) == key(1.0, ["c", "d"])  # equal text, other str objects
    assert key(1.0) != key(2.0) and key(1.0, "c") != key(1.0, "d")
    assert key(math.inf) != key(1.0)
    picked = [Selected(0, "top", {})]
    flat = [{"completion": "c"}]
    assert record_key(True, 1, picked, flat) != record_key(False, 1, picked, flat)  # an evaluation's rows
    assert record_key(False, 2, picked, flat) != record_key(False, 1, picked, flat)


def test_a_ranks_later_rows_at_a_step_go_after_what_another_rank_emitted_for_it(tmp_path):
    """Every rank exporting, rows selected across ranks at a step (rank 0 emits them, numbered by position among
    every rank's rows), then a failed try of the step (each rank emits its own): rank 1 numbered its rows from 0, as
    if it had no earlier record there, and `i * 2 + 1` met the numbers rank 0 had given, so the sidecar, which stores
    a step's number once, lost rows."""
    import json
    from pathlib import Path

    from tests._support.process_group import run_two_ranks

    run_two_ranks(Path(__file__).parent / "dist_numbering_worker.py", str(tmp_path))
    rows = [json.loads(line) for path in (tmp_path / "run" / "samples").glob("step_0_rank*.jsonl")
            for line in path.read_text().splitlines()]
    numbers = [r["sample_index"] for r in rows]
    assert {r["completion"].split("-")[0] for r in rows} == {"selected", "failed"}
    assert any(r["completion"].startswith("failed-rank1") for r in rows)
    assert len(numbers) == len(set(numbers)), sorted(numbers)
