"""`single_threaded`: a stats pass on the CPU in one intra-op thread, the same numbers, the count restored."""

import pytest
import torch

from signal_batches import everything
from otel_grpo import signals


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_cpu_block_runs_in_one_thread_and_the_count_comes_back(two_threads):
    with signals.single_threaded(torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with signals.single_threaded(None):  # no device known: the CPU
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_the_count_comes_back_when_the_block_raises(two_threads):
    with pytest.raises(RuntimeError, match="inside"):
        with signals.single_threaded("cpu"):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == 2


def test_other_devices_keep_the_thread_count(two_threads):
    with signals.single_threaded(torch.device("meta")):
        assert torch.get_num_threads() == 2


def test_nested_blocks_restore_in_order(two_threads):
    with signals.single_threaded("cpu"):
        with signals.single_threaded("cpu"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_one_thread_gives_the_same_numbers_bit_for_bit(two_threads):
    """exp, log and the reductions over every family: the thread count changes the time, not a bit of the result."""
    torch.manual_seed(0)
    train, rollout = torch.randn(64, 2048) - 2.0, torch.randn(64, 2048) - 2.0  # large enough to split
    mask = torch.rand(64, 2048) > 0.2

    def pass_() -> signals.ReducedStats:
        _, _, is_stats = signals.rollout_correction(train, rollout, mask, threshold=(0.5, 2.0), with_mismatch=True)
        return signals.reduce_stats(everything(8, 40, seed=5) | is_stats)

    several = pass_()
    with signals.single_threaded("cpu"):
        one = pass_()
    assert dict(one) == dict(several) and one.samples == several.samples and one.invalid == several.invalid
