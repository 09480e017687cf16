"""Samples are selected once per step over every `samples()` call, and carry their group context."""

from __future__ import annotations

import json
import random

from otel_grpo.telemetry._samples import StepRows, select_indices


def _spilled(cap, step: int) -> list[dict]:
    assert cap.tel.flush(10)
    return [json.loads(x) for x in (cap.output_dir / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def test_two_calls_with_k_1_1_keep_two_rows_not_four(make_captured):
    cap = make_captured(top_k=1, bottom_k=1, random_k=0)
    with cap.tel.step(0) as s:
        s.samples([{"completion": "a", "reward": 0.2}, {"completion": "b", "reward": 0.9}])
        s.samples([{"completion": "c", "reward": 0.1}, {"completion": "d", "reward": 0.5}])
    kept = _spilled(cap, 0)
    assert [(r["completion"], r["selection"], r["sample_index"]) for r in kept] == [("b", "top", 1), ("c", "bottom", 2)]
    assert len(cap.spans("grpo.samples")[0].events) == 2


def test_kept_rows_carry_their_group_context(make_captured):
    cap = make_captured(top_k=1, bottom_k=1, random_k=0)
    rewards = [0.3, 0.9, 0.3, 0.1, 0.5, 0.0]  # two groups of three
    with cap.tel.step(4) as s:
        s.samples([{"completion": f"c{i}", "reward": r} for i, r in enumerate(rewards)], group_size=3)
    best, worst = _spilled(cap, 4)
    assert (best["completion"], best["completion_index"], best["group_size"], best["reward_rank"]) == ("c1", 1, 3, 1)
    assert (worst["completion"], worst["completion_index"], worst["reward_rank"]) == ("c5", 2, 3)
    assert best["source_rank"] == worst["source_rank"] == 0
    (event,) = [e for e in cap.spans("grpo.samples")[0].events if e.attributes["selection"] == "top"]
    assert event.attributes["reward_rank"] == 1 and event.attributes["source_rank"] == 0


def test_tied_rewards_share_a_rank_and_unscored_rows_get_none():
    rows = StepRows([(0, [{"reward": 1.0}, {"reward": 1.0}, {"reward": 0.0}, {}], 4)], "reward")
    assert [rows.annotated(i, 2).get("reward_rank") for i in range(4)] == [1, 1, 3, None]
    assert rows.annotated(3, 2)["source_rank"] == 2


def test_selection_over_calls_equals_selection_over_their_concatenation():
    rng = random.Random(1)
    calls = [(0, [{"reward": rng.random()} for _ in range(n)], None) for n in (5, 0, 9, 3)]
    rows = StepRows(calls, "reward")
    concatenated = [r["reward"] for _, part, _ in calls for r in part]
    a = select_indices(rows.scores, top_k=3, bottom_k=2, random_k=4, rng=random.Random(7))
    b = select_indices(concatenated, top_k=3, bottom_k=2, random_k=4, rng=random.Random(7))
    assert a == b and len(a) == 9
