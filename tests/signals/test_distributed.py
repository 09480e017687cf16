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

    assert shared(two_ranks[0]["accelerate"]) == shared(two_ranks[1]["accelerate"])
    assert shared(two_ranks[0]["torch_distributed"]) == shared(two_ranks[1]["torch_distributed"])
    assert two_ranks[0]["accelerate"] == two_ranks[0]["torch_distributed"]


def test_one_collective_per_reduction_for_every_family(two_ranks):
    # Every signal family of a step in one reduce_stats call: one gather, whatever the number of keys.
    for rank in two_ranks:
        for path in ("accelerate", "torch_distributed"):
            assert rank[path]["collectives"] in (["all_gather"], ["all_gather_into_tensor"]), path


def test_ranks_with_different_thresholds_are_refused_on_every_rank(two_ranks):
    """A finished table's parameters are part of the layout the ranks share: each rank's numbers would otherwise
    be finished with the thresholds of its own call for every rank's rows."""
    for rank in two_ranks:
        assert "thresholds" in rank["thresholds_differ"], rank["thresholds_differ"]
