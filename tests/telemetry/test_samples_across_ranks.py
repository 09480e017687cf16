"""Two real ranks (torchrun, gloo on CPU): one sample selection per step over every rank's rows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from otel_grpo.telemetry._samples import select_indices
from tests._support.process_group import run_two_ranks

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    run_two_ranks(HERE / "dist_samples_worker.py", str(out))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return out, ranks


def _spilled(out: Path, step: int) -> list[dict]:
    return [json.loads(x) for x in (out / "run" / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def test_global_selection_equals_selection_over_the_concatenated_rows(two_ranks):
    from tests.telemetry.dist_samples_worker import SEED, SETTINGS, STEPS

    out, ranks = two_ranks
    draw = random.Random(SEED)  # rank 0 seeds every rank's random draw from its own generator
    for step in range(STEPS):
        rows = [row for rank in ranks for call in rank["handed"][step] for row in call]  # rank 0's, then rank 1's
        expected = select_indices([r["reward"] for r in rows], top_k=SETTINGS["top_k"], bottom_k=SETTINGS["bottom_k"],
                                  random_k=SETTINGS["random_k"], rng=random.Random(draw.getrandbits(63)))
        kept = _spilled(out, step)
        assert [(r["sample_index"], r["selection"]) for r in kept] == expected
        assert [r["completion"] for r in kept] == [rows[i]["completion"] for i, _ in expected]
        assert {r["source_rank"] for r in kept} == {0, 1}  # the best and worst rows of rank 1 are not lost


def test_an_anomalous_step_keeps_every_row_of_every_rank(two_ranks):
    from tests.telemetry.dist_samples_worker import STEPS

    out, ranks = two_ranks
    rows = ranks[0]["anomalous"] + ranks[1]["anomalous"]  # rank 0's verdict, rank 1's rows too
    kept = _spilled(out, STEPS)
    assert [r["completion"] for r in kept] == [r["completion"] for r in rows]
    assert [r["sample_index"] for r in kept] == list(range(len(rows)))
    assert {r["selection"] for r in kept} == {"all"} and {r["source_rank"] for r in kept} == {0, 1}
    assert {r["kept_because"] for r in kept} == {"kl 5 above 1"}


def test_a_second_record_of_a_step_numbers_its_rows_after_every_ranks_rows_of_the_first(two_ranks):
    from tests.telemetry.dist_samples_worker import STEPS

    out, ranks = two_ranks
    first, second = ([row for rank in ranks for row in rank["records"][r]] for r in (0, 1))  # every row is kept
    kept = {r["completion"]: r["sample_index"] for r in _spilled(out, STEPS + 1)}
    assert kept == {row["completion"]: i for i, row in enumerate(first + second)}


def test_per_rank_a_second_record_of_a_step_numbers_its_rows_after_the_ranks_own_first(two_ranks):
    out, ranks = two_ranks
    for rank, data in enumerate(ranks):
        first, second = data["records"]
        lines = (out / "per_rank" / "samples" / f"step_1_rank{rank}.jsonl").read_text().splitlines()
        kept = {r["completion"]: r["sample_index"] for r in map(json.loads, lines)}
        # row i of the rank's rows at the step, every record's: 2 * i + rank, its rank still sample_index % 2
        assert kept == {row["completion"]: 2 * i + rank for i, row in enumerate(first + second)}


def test_kept_rows_carry_rank_and_group_context(two_ranks):
    from tests.telemetry.dist_samples_worker import GROUP

    out, ranks = two_ranks
    for row in _spilled(out, 0):
        rank, call, index = row["source_rank"], None, None
        for c, part in enumerate(ranks[rank]["handed"][0]):
            names = [r["completion"] for r in part]
            if row["completion"] in names:
                call, index = c, names.index(row["completion"])
        group = ranks[rank]["handed"][0][call][index - index % GROUP:][:GROUP]
        assert row["completion_index"] == index % GROUP and row["group_size"] == GROUP
        assert row["reward_rank"] == 1 + sum(r["reward"] > row["reward"] for r in group)


def test_a_fixed_small_number_of_collectives_per_step(two_ranks):
    _, ranks = two_ranks
    for rank in ranks:
        for calls in rank["collectives"]:
            assert calls == ["all_gather_object", "gather_object"]


def test_per_rank_selection_keeps_each_ranks_own_rows_without_collectives(two_ranks):
    from tests.telemetry.dist_samples_worker import SETTINGS

    out, ranks = two_ranks
    numbers = []
    for rank, data in enumerate(ranks):
        assert data["per_rank_collectives"] == []
        rows = [row for call in data["handed"][0] for row in call]
        kept = [json.loads(x) for x in (out / "per_rank" / "samples" / f"step_0_rank{rank}.jsonl").read_text().splitlines()]
        tops = select_indices([r["reward"] for r in rows], top_k=SETTINGS["top_k"], bottom_k=SETTINGS["bottom_k"],
                              random_k=0, rng=random.Random(0))
        # row i of this rank's own: 2 * i + rank, so the two ranks' rows of the step never share a sample index
        assert [r["sample_index"] for r in kept if r["selection"] != "random"] == [2 * i + rank for i, _ in tops]
        assert [r["completion"] for r in kept] == [rows[r["sample_index"] // 2]["completion"] for r in kept]
        assert {r["source_rank"] for r in kept} == {rank}
        numbers += [r["sample_index"] for r in kept]
    assert len(set(numbers)) == len(numbers)


def test_with_every_rank_exporting_only_rank_0_emits_the_global_selection(two_ranks):
    out, _ = two_ranks
    spilled = sorted(p.name for p in (out / "all_export" / "samples").iterdir())
    assert spilled == ["step_0_rank0.jsonl"]
    kept = [json.loads(x) for x in (out / "all_export" / "samples" / spilled[0]).read_text().splitlines()]
    assert {r["source_rank"] for r in kept} == {0, 1}
