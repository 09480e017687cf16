"""Hand-computed tiny tensors for rewards, lengths, policy and diversity."""

import math
import statistics

import pytest
import torch

from otel_grpo.signals import diversity_stats, length_stats, policy_stats, reduce_stats, reward_stats

NAN = float("nan")


def test_rewards_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, 0.5])  # groups of 2: [1, 0] [1, 1] [0.5, 0.5]
    fmt = torch.tensor([1.0, NAN, 0.0, 1.0, 1.0, 1.0])  # NaN: the function did not apply
    adv = torch.tensor([0.7, -0.7, 0.0, 0.0, 0.0, 0.0])
    r = reduce_stats(reward_stats(rewards, 2, {"format": fmt}, advantages=adv))
    vals = rewards.tolist()
    assert r["reward"] == pytest.approx(statistics.mean(vals))
    assert r["reward_std"] == pytest.approx(statistics.stdev(vals))
    assert (r["reward_min"], r["reward_max"]) == (0.0, 1.0)
    assert r["reward_p50"] == pytest.approx(torch.tensor(vals).quantile(0.5).item())
    assert r["reward_p05"] == pytest.approx(0.125)  # linear: sorted [0, .5, .5, 1, 1, 1], pos 0.25
    assert r["reward_group_std"] == pytest.approx(statistics.stdev([1, 0]) / 3)
    assert r["frac_reward_zero_std"] == pytest.approx(2 / 3)
    assert r["reward_fn_mean/format"] == pytest.approx(0.8)
    assert r["reward_fn_std/format"] == pytest.approx(statistics.stdev([1, 0, 1, 1, 1]))
    assert r["advantage_mean"] == pytest.approx(0.0, abs=1e-7)
    assert r["advantage_std"] == pytest.approx(statistics.stdev(adv.tolist()), rel=1e-6)
    assert (r["advantage_min"], r["advantage_max"]) == (pytest.approx(-0.7), pytest.approx(0.7))
    assert r["samples"] == 6
    assert r.samples["sample_reward"] == vals
    assert r.samples["sample_advantage"] == pytest.approx(adv.tolist())


def test_lengths_by_hand():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    truncated = torch.tensor([False, True, False])
    r = reduce_stats(length_stats(mask, truncated))
    assert r["completion_length_mean"] == pytest.approx(8 / 3)
    assert r["completion_length_std"] == pytest.approx(statistics.stdev([3, 4, 1]))
    assert (r["completion_length_min"], r["completion_length_max"]) == (1, 4)
    assert r["completions_clipped_ratio"] == pytest.approx(1 / 3)
    assert r["terminated_length_mean"] == 2.0
    assert (r["terminated_length_min"], r["terminated_length_max"]) == (1, 3)
    assert r["tokens"] == 8
    assert r.samples["sample_completion_length"] == [3.0, 4.0, 1.0]


def test_lengths_all_truncated_marks_terminated_invalid():
    r = reduce_stats(length_stats(torch.ones(2, 3), torch.ones(2, dtype=torch.bool)))
    assert {"terminated_length_mean", "terminated_length_min", "terminated_length_max"} == r.invalid
    assert r["completions_clipped_ratio"] == 1.0


def test_policy_by_hand():
    # ratios: row 0 [0.5, 2.0, 1.0], row 1 [0.5, 1.1, pad]; advantages row 0 -1, row 1 +1
    lr = torch.tensor([[math.log(0.5), math.log(2.0), 0.0], [math.log(0.5), math.log(1.1), 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    ref = torch.zeros(2, 3)
    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]])
    r = reduce_stats(policy_stats(lr, torch.zeros(2, 3), torch.tensor([-1.0, 1.0]), mask, 0.2, 0.05, ref, ent))
    # low: row 0 token 0 (0.5 < 0.8, adv < 0); high: row 1 token 1 (1.1 > 1.05, adv > 0)
    assert r["clip_ratio_low_mean"] == pytest.approx(1 / 5)
    assert r["clip_ratio_high_mean"] == pytest.approx(1 / 5)
    assert r["clip_ratio_region_mean"] == pytest.approx(2 / 5)
    assert r["clip_ratio_low_min"] == 0.0  # row 1 has no low clip
    assert r["clip_ratio_high_max"] == pytest.approx(1 / 2)
    assert r["policy_ratio_mean"] == pytest.approx((0.5 + 2 + 1 + 0.5 + 1.1) / 5)
    assert (r["policy_ratio_min"], r["policy_ratio_max"]) == (pytest.approx(0.5), pytest.approx(2.0))
    valid = lr[mask.bool()]
    assert r["approx_kl"] == pytest.approx((0.5 * valid**2).mean().item())
    k3 = torch.exp(-valid) + valid - 1  # r = ref - logprobs = -lr
    assert r["kl"] == pytest.approx(k3.mean().item(), rel=1e-6)
    assert r["kl_k1"] == pytest.approx(valid.mean().item(), rel=1e-6)
    assert r["kl_max"] == pytest.approx(k3.max().item(), rel=1e-6)
    assert r["kl_seq_mean"] == pytest.approx((k3[:3].sum() + k3[3:].sum()).item() / 2, rel=1e-6)
    assert r["entropy"] == pytest.approx(3.0)


def test_policy_token_level_advantages_and_empty_rows():
    lp = torch.tensor([[math.log(0.5), 0.0], [0.0, 0.0]])
    adv = torch.tensor([[-1.0, 1.0], [5.0, 5.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    r = reduce_stats(policy_stats(lp, torch.zeros(2, 2), adv, mask, 0.2, 0.2))
    assert r["clip_ratio_low_mean"] == 0.5
    assert r["clip_ratio_low_min"] == 0.5  # the empty row is not a sequence
    assert "kl" not in r and "entropy" not in r  # not requested


def test_diversity_by_hand():
    ids = torch.tensor([[1, 2, 1, 2, 9], [1, 2, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    r = reduce_stats(diversity_stats(ids, mask))
    assert r["distinct_1"] == pytest.approx(3 / 7)  # {1, 2, 3} over 7 tokens
    # bigrams (1,2) (2,1) (1,2) | (1,2) (2,3): distinct {(1,2), (2,1), (2,3)} over 5
    assert r["distinct_2"] == pytest.approx(3 / 5)


def test_diversity_width_pads_and_single_tokens_have_no_bigrams():
    ids = torch.tensor([[7], [7]])
    s = diversity_stats(ids, torch.ones(2, 1), width=4)
    assert s.ids["distinct_1"].numel() == 8
    r = reduce_stats(s)
    assert r["distinct_1"] == 0.5
    assert "distinct_2" in r.invalid
