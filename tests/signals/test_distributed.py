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


def test_every_rank_gets_identical_numbers(two_ranks):
    assert two_ranks[0]["accelerate"] == two_ranks[1]["accelerate"]
    assert two_ranks[0]["torch_distributed"] == two_ranks[1]["torch_distributed"]
    assert two_ranks[0]["accelerate"] == two_ranks[0]["torch_distributed"]


def test_one_collective_per_reduction_for_every_family(two_ranks):
    # Every signal family of a step in one reduce_stats call: one gather, whatever the number of keys.
    for rank in two_ranks:
        for path in ("accelerate", "torch_distributed"):
            assert rank[path]["collectives"] in (["all_gather"], ["all_gather_into_tensor"]), path
