"""select_indices over scores_of (what pick_rows keeps when a step is not kept whole): top/bottom-k against a
full sort, ties, overlap, rows without a score."""

from __future__ import annotations

import math
import random

import pytest

from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from otel_grpo.telemetry._samples import EVENT_ATTRIBUTE_LIMIT, as_kept, flatten_row, scores_of, select_indices


def _pick(rows, **kw):
    args = {"top_k": 0, "bottom_k": 0, "random_k": 0, "rng": random.Random(0)} | kw
    return [(selection, i) for i, selection in select_indices(scores_of(rows, "reward"), **args)]


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_full_sort(seed):
    rng = random.Random(seed)
    rows = [{"reward": rng.choice([0.0, 0.5, 1.0, rng.random()])} for _ in range(200)]
    picked = _pick(rows, top_k=7, bottom_k=5)
    by_top = sorted(range(200), key=lambda i: (-rows[i]["reward"], i))
    by_bottom = sorted(range(200), key=lambda i: (rows[i]["reward"], -i))
    assert [i for s, i in picked if s == "top"] == by_top[:7]
    assert [i for s, i in picked if s == "bottom"] == by_bottom[:5]


def test_all_equal_scores_still_fill_top_and_bottom():
    rows = [{"reward": 1.0} for _ in range(10)]
    assert _pick(rows, top_k=3, bottom_k=3) == [("top", 0), ("top", 1), ("top", 2),
                                               ("bottom", 9), ("bottom", 8), ("bottom", 7)]


def test_fewer_rows_than_k_lists_each_row_once():
    rows = [{"reward": r} for r in (0.3, 0.1, 0.2)]
    picked = _pick(rows, top_k=2, bottom_k=2, random_k=5)
    assert picked == [("top", 0), ("top", 2), ("bottom", 1)]


def test_unscored_rows_are_only_drawn_at_random():
    rows = [{"reward": math.nan}, {"reward": "n/a"}, {}, {"reward": 0.5}]
    picked = _pick(rows, top_k=1, bottom_k=1, random_k=3)
    assert picked[0] == ("top", 3)
    assert sorted(i for s, i in picked if s == "random") == [0, 1, 2]
    assert _pick([], top_k=2, bottom_k=2, random_k=2) == []


def test_random_draw_is_uniform_over_the_rest_and_seeded():
    rows = [{"reward": float(i)} for i in range(50)]
    a = _pick(rows, top_k=2, random_k=5, rng=random.Random(3))
    b = _pick(rows, top_k=2, random_k=5, rng=random.Random(3))
    assert a == b
    drawn = [i for s, i in a if s == "random"]
    assert len(set(drawn)) == 5 and not {48, 49} & set(drawn)


def test_flatten_rewards_dict_and_reward_columns():
    flat = flatten_row({"rewards": {"format": 1, "acc": 0.0}, "reward.len": 0.5, "x": None, "meta": {"k": None}})
    assert flat == {"reward.format": 1, "reward.acc": 0.0, "reward.len": 0.5}


@pytest.mark.parametrize("width", [3, EVENT_ATTRIBUTE_LIMIT, EVENT_ATTRIBUTE_LIMIT + 1, 2 * EVENT_ATTRIBUTE_LIMIT + 5])
def test_as_kept_keeps_what_the_sdk_keeps_of_an_event(width):
    """`otel-grpo replay` drops what the SDK drops of a wide row's event: the SDK's own event, beside it."""
    attrs = {f"c{(i * 7919) % width}": i for i in range(width)}  # not in key order: the order added decides
    provider = TracerProvider(span_limits=SpanLimits(max_event_attributes=EVENT_ATTRIBUTE_LIMIT))
    span = provider.get_tracer("t").start_span("s")
    span.add_event("e", attrs)
    (event,) = span.events
    kept, dropped = as_kept(attrs)
    assert list(kept.items()) == list(event.attributes.items()) and dropped == event.attributes.dropped
