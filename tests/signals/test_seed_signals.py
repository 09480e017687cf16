"""Signals the seeds name that GRPO lacked, on tensors small enough to compute by hand."""

from __future__ import annotations

import math

import pytest
import torch

from otel_grpo.signals import Stats, diversity_stats, loss_stats, policy_stats, reduce_stats, reward_stats


def test_group_diversity_by_hand():
    ids = torch.tensor([[1, 2, 3, 0], [1, 2, 4, 0], [5, 5, 5, 5], [6, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    r = reduce_stats(diversity_stats(ids, mask, group_size=2))
    assert r["distinct_1_group"] == pytest.approx((4 / 6 + 3 / 6) / 2)  # {1,2,3,4} of 6; {5,6,7} of 6
    assert r["distinct_2_group"] == pytest.approx((3 / 4 + 2 / 4) / 2)
    assert r["jaccard_group"] == pytest.approx((2 / 4 + 0) / 2)  # {1,2,3} vs {1,2,4}; {5} vs {6,7}
    with pytest.raises(ValueError, match="group_size"):
        diversity_stats(ids, mask, group_size=3)


def test_identical_completions_have_jaccard_one_and_empty_pairs_are_skipped():
    ids = torch.tensor([[3, 4, 0], [4, 3, 3], [1, 0, 0], [9, 9, 9]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0]])  # group 1: two empty completions
    r = reduce_stats(diversity_stats(ids, mask, group_size=2))
    assert r["jaccard_group"] == 1.0  # the only group with a pair to compare
    assert r["distinct_1_group"] == pytest.approx(2 / 5)


def test_kl_by_length_bucket_and_ref_logp_mean():
    # row 0: 3 tokens (le_64), row 1: 70 tokens (le_128); k3 of r = ref - logp
    logp = torch.zeros(2, 70, dtype=torch.float64)
    ref = torch.full((2, 70), -0.5, dtype=torch.float64)
    ref[0, :3] = torch.tensor([-1.0, 0.5, 0.0])
    mask = torch.zeros(2, 70, dtype=torch.bool)
    mask[0, :3], mask[1] = True, True
    r = reduce_stats(policy_stats(logp, logp, torch.zeros(2), mask, 0.2, 0.2, ref_logprobs=ref))
    k3 = lambda x: math.exp(x) - x - 1  # noqa: E731
    assert r["kl_by_length/le_64"] == pytest.approx((k3(-1) + k3(0.5) + k3(0)) / 3)
    assert r["kl_by_length/le_128"] == pytest.approx(k3(-0.5))
    assert (r["kl_by_length_tokens/le_64"], r["kl_by_length_tokens/le_128"], r["kl_by_length_tokens/gt_4096"]) == (
        3, 70, 0)
    assert "kl_by_length/le_256" in r.invalid  # no completion of that length: not reported as 0
    assert r["ref_logp_mean"] == pytest.approx((-1.0 + 0.5 + 0.0 - 0.5 * 70) / 73)
    assert r["kl_k1_seq_mean"] == pytest.approx((0.5 + 35) / 2)  # k1 = logp - ref summed per completion


def test_reward_and_per_function_quantiles():
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    r = reduce_stats(reward_stats(rewards, 5, {"fmt": torch.tensor([1.0, float("nan"), 0.0, 0.0, 1.0])}))
    assert [r[f"reward_{q}"] for q in ("p00", "p25", "p50", "p75", "p100")] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert (r["reward_fn_p00/fmt"], r["reward_fn_p50/fmt"], r["reward_fn_p100/fmt"]) == (0.0, 0.5, 1.0)
    assert sorted(r.samples["sample_reward_fn/fmt"]) == [0.0, 0.0, 1.0, 1.0]  # NaN: no reward from it


def test_loss_parts_average_over_micro_batches():
    stats = loss_stats(torch.tensor(1.0), torch.tensor(0.75), 0.25, -0.5) | loss_stats(3.0, 2.0, 1.0)
    r = reduce_stats(stats)
    assert (r["loss"], r["loss_policy"], r["loss_kl"], r["loss_entropy"]) == (2.0, 1.375, 0.625, -0.5)
    with pytest.raises(ValueError, match="loss"):
        loss_stats(torch.ones(2))
    assert isinstance(loss_stats(1.0), Stats)


def test_verl_dual_clip_and_k1():
    # ratios e^1.5 = 4.48 (> c = 3) and e^0.5 = 1.65; advantages -1 and -1
    logp = torch.tensor([[1.5, 0.5]], dtype=torch.float64)
    r = reduce_stats(policy_stats(logp, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([-1.0]),
                                  torch.ones(1, 2), 0.2, 0.2, clip_ratio_c=3.0))
    assert r["dual_clip_fraction"] == 0.5
    assert r["ppo_kl"] == pytest.approx(-(1.5 + 0.5) / 2)  # old - new
    assert r["approx_kl"] == pytest.approx(0.5 * (1.5**2 + 0.5**2) / 2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_stats(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.2, clip_ratio_c=1.0)
