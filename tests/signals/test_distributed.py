"""Two real ranks (torchrun, gloo on CPU) give what one process gives on the concatenated batch."""

import json
from pathlib import Path

import pytest

from otel_grpo.signals import reduce_stats
from tests._support.process_group import run_two_ranks
from signal_batches import everything

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ranks")
    run_two_ranks(HERE / "dist_worker.py", str(out))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_ranks_equal_one_process_on_the_concatenated_batch(two_ranks):
    from dist_worker import B, SEED, T

    single = reduce_stats(everything(B, T, SEED))
    for rank in two_ranks:
        for path in ("accelerate", "torch_distributed"):
            got = rank[path]
            assert set(got["values"]) == set(single), path
            assert got["invalid"] == sorted(single.invalid)
            for key, value in single.items():
                assert got["values"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), (path, key)
            assert set(got["samples"]) == set(single.samples)
            for key, values in single.samples.items():  # rank 0's rows, then rank 1's
                assert got["samples"][key] == pytest.approx(values), (path, key)
            assert set(got["columns"]) == set(single.columns) and "kl_ref_mean" in single.columns
            for key, values in single.columns.items():  # per-sample columns: every row, in rank order
                assert got["columns"][key] == pytest.approx(values), (path, key)


def test_each_rank_gets_its_own_rows_of_the_per_sample_columns(two_ranks):
    from dist_worker import B, SEED, T

    single = reduce_stats(everything(B, T, SEED)).column_rows()
    for r, rank in enumerate(two_ranks):
        half = single[r * B // 2 : (r + 1) * B // 2]
        assert [row.keys() for row in rank["accelerate"]["rows"]] == [row.keys() for row in half]
        for got, want in zip(rank["accelerate"]["rows"], half):
            assert got == pytest.approx(want)


def test_every_rank_gets_identical_numbers(two_ranks):
    def shared(result):  # all but "rows", each rank's own slice of the per-sample columns
        return {k: v for k, v in result.items() if k != "rows"}

    assert shared(two_ranks[0]["uneven"]["first"]) == shared(two_ranks[1]["uneven"]["first"])
    assert shared(two_ranks[0]["accelerate"]) == shared(two_ranks[1]["accelerate"])
    assert shared(two_ranks[0]["torch_distributed"]) == shared(two_ranks[1]["torch_distributed"])
    assert two_ranks[0]["accelerate"] == two_ranks[0]["torch_distributed"]


def test_one_collective_per_reduction_for_every_family(two_ranks):
    # Every signal family of a step in one reduce_stats call: one gather, whatever the number of keys, once the
    # ranks know each other's sizes (a layout's first reduction, and one where a rank has more rows, gather twice)
    for rank in two_ranks:
        assert rank["first_collectives"] in (["all_gather"] * 2, ["all_gather_into_tensor"] * 2)
        for path in ("accelerate", "torch_distributed"):
            assert rank[path]["collectives"] in (["all_gather"], ["all_gather_into_tensor"]), path
        assert rank["uneven"]["first"]["collectives"] == ["all_gather"] * 2  # rank 1's 6 rows: more than before
        assert rank["uneven"]["again"]["collectives"] == ["all_gather"]


def test_ranks_with_different_numbers_of_rows_equal_one_process(two_ranks):
    """A user's last batch, or packing by tokens, gives ranks different numbers of rows: every family reduces as
    one process over the concatenated rows, and each rank gets its own rows of the per-sample columns."""
    from dist_worker import B, SEED, T, UNEVEN, is_batch

    from otel_grpo.signals import rollout_correction

    single = reduce_stats(everything(B, T, SEED))
    _, _, alone = rollout_correction(*is_batch(), level="sequence", mode="truncate")
    single_is = reduce_stats(alone)
    rows = single.column_rows()
    for r, rank in enumerate(two_ranks):
        for got in (rank["uneven"]["first"], rank["uneven"]["again"]):
            assert got["values"] == pytest.approx(dict(single), rel=1e-6, abs=1e-9)
            assert got["invalid"] == sorted(single.invalid)
            _same_lists(got["samples"], single.samples)
            _same_lists(got["columns"], single.columns)
            assert len(got["rows"]) == len(rows[UNEVEN[r]])
            for mine, want in zip(got["rows"], rows[UNEVEN[r]]):
                assert mine == pytest.approx(want)
        assert rank["uneven"]["rollout_correction"]["values"] == pytest.approx(dict(single_is), rel=1e-6, abs=1e-9)
        # a step of 2 rows each after one of 6: the widths shrink back (padding within 2x), in one gather, and the
        # numbers are one process's on rows 0-3
        small = rank["uneven"]["small"]
        assert small["collectives"] == ["all_gather"] and rank["uneven"]["small_widths"] < rank["uneven"]["widths"]
        assert small["values"] == pytest.approx(dict(reduce_stats(everything(B, T, SEED, rows=slice(0, 4)))),
                                                rel=1e-6, abs=1e-9)
        _same_lists(rank["uneven"]["rollout_correction"]["samples"], single_is.samples)


def _same_lists(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, values in want.items():
        assert got[key] == pytest.approx(values), key


def test_ranks_with_different_thresholds_are_refused_on_every_rank(two_ranks):
    """A finished table's parameters are part of the layout the ranks share: each rank's numbers would otherwise
    be finished with the thresholds of its own call for every rank's rows."""
    for rank in two_ranks:
        assert "thresholds" in rank["thresholds_differ"], rank["thresholds_differ"]
