"""mismatch_stats: seed 004's keys against its formulas, our additions by hand."""

import math

import pytest
import torch

import seed004_reference as seed
from otel_grpo.signals import mismatch_stats, reduce_stats, rollout_correction

SEED_KEYS = {
    "mismatch_training_ppl", "mismatch_training_log_ppl", "mismatch_kl", "mismatch_k3_kl",
    "mismatch_rollout_ppl", "mismatch_rollout_log_ppl", "mismatch_log_ppl_diff",
    "mismatch_log_ppl_abs_diff", "mismatch_log_ppl_diff_max", "mismatch_log_ppl_diff_min",
    "mismatch_ppl_ratio", "mismatch_logprob_abs_diff",
}  # fmt: skip


@pytest.mark.parametrize("seed_value", range(4))
def test_matches_seed_formulas(seed_value):
    g = torch.Generator().manual_seed(seed_value)
    B, T = 10, 17
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[2] = 0  # an all-padded row counts in the seed's all-row means
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
    rollout = (-torch.rand(B, T, generator=g) * 4) * mask
    train = (rollout + torch.randn(B, T, generator=g) * 0.4) * mask
    expected = seed.mismatch(train, rollout, mask)
    garbage = torch.full((B, T), float("nan"))
    got = reduce_stats(
        mismatch_stats(torch.where(mask.bool(), train, garbage), torch.where(mask.bool(), rollout, -garbage), mask)
    )
    assert SEED_KEYS == set(expected)
    for key in SEED_KEYS:
        assert got[key] == pytest.approx(expected[key].item(), rel=2e-5, abs=2e-6), key


def test_additions_by_hand():
    # log ratios: row 0 [ln 2, ln 0.5], row 1 [ln 4, pad]
    train = torch.tensor([[math.log(2), math.log(0.5)], [math.log(4), 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    r = reduce_stats(mismatch_stats(train, torch.zeros(2, 2, dtype=torch.float64), mask))
    assert r["is_ratio_mean"] == pytest.approx((2 + 0.5 + 4) / 3)
    assert (r["is_ratio_min"], r["is_ratio_max"]) == (pytest.approx(0.5), pytest.approx(4.0))
    assert r["mismatch_logprob_abs_diff_max"] == pytest.approx(math.log(4))
    assert r["mismatch_chi2_token"] == pytest.approx((4 + 0.25 + 16) / 3 - 1)  # verl's E[rho^2] - 1
    # sequence ratios: 1 and 4
    assert r["mismatch_chi2_seq"] == pytest.approx((1 + 16) / 2 - 1)
    assert r.samples["sample_is_ratio"] == pytest.approx([1.0, 4.0])
    assert r["mismatch_kl"] == pytest.approx(-math.log(4) / 3)


def test_safety_bound_and_rows_without_tokens():
    train = torch.tensor([[50.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 0], [0, 0]])
    r = reduce_stats(mismatch_stats(train, torch.zeros(2, 2), mask))
    assert r["is_ratio_max"] == pytest.approx(math.exp(20), rel=1e-6)
    # over all rows, as verl: the empty row adds exp(0)^2 - 1 = 0
    assert r["mismatch_chi2_seq"] == pytest.approx((math.exp(40) - 1) / 2, rel=1e-5)
    assert len(r.samples["sample_is_ratio"]) == 1  # the empty row is NaN, dropped from samples
    # the seed's all-row means include the empty row (mean log-prob 0, ppl 1)
    assert r["mismatch_training_ppl"] == pytest.approx((math.exp(-50) + 1) / 2)


def test_a_micro_batch_without_tokens_adds_nothing_to_the_all_row_means():
    """Seed 004 leaves out a rank whose batch has no valid token: merged in, such a call changes nothing (its
    rows' perplexity of 1 once went into the sums, not the counts: training ppl 1.62 became 2.62)."""
    g = torch.Generator().manual_seed(0)
    train = -torch.rand(4, 6, generator=g, dtype=torch.float64)
    rollout = train + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 6)
    alone = reduce_stats(mismatch_stats(train, rollout, mask))
    for other in (mismatch_stats(train, rollout, torch.zeros(4, 6)), mismatch_stats(train, None, torch.zeros(4, 6))):
        merged = reduce_stats(mismatch_stats(train, rollout, mask) | other)
        assert merged == alone and merged.samples == alone.samples


def test_a_call_without_rollout_logprobs_counts_only_in_the_training_perplexity():
    g = torch.Generator().manual_seed(1)
    train = -torch.rand(3, 5, generator=g, dtype=torch.float64)
    rollout = train + 0.3 * torch.randn(3, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 5)
    alone = reduce_stats(mismatch_stats(train, rollout, mask))
    merged = reduce_stats(mismatch_stats(train, rollout, mask) | mismatch_stats(train - 1.0, None, mask))
    assert {k: v for k, v in merged.items() if "training" not in k} == {
        k: v for k, v in alone.items() if "training" not in k}
    both = reduce_stats(mismatch_stats(torch.cat([train, train - 1.0]), None, torch.ones(6, 5)))
    assert merged["mismatch_training_ppl"] == pytest.approx(both["mismatch_training_ppl"], rel=1e-12)
    assert merged["mismatch_training_log_ppl"] == pytest.approx(both["mismatch_training_log_ppl"], rel=1e-12)


@pytest.mark.parametrize("tokens", (0, 1))
def test_without_rollout_logprobs_only_the_training_perplexity_is_there(tokens):
    r = reduce_stats(mismatch_stats(-torch.rand(3, 4), None, torch.full((3, 4), tokens)))
    assert set(r) | r.invalid == {"mismatch_training_ppl", "mismatch_training_log_ppl"}
    assert bool(r.invalid) == (tokens == 0) and r.samples == {}


@pytest.mark.parametrize("level", [None, "token", "sequence"])
def test_a_row_with_a_nan_logprob_is_left_out_of_sample_is_ratio(level):
    """NaN marks an invalid row in every per-sample vector: a NaN log-prob on a token leaves its row out
    of `sample_is_ratio` (through mismatch_stats or the IS correction's shared pass), never a NaN sample."""
    train = torch.tensor([[float("nan"), -1.0], [math.log(2), -1.0]], dtype=torch.float64)
    rollout = torch.tensor([[-1.0, -1.0], [0.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    if level is None:
        stats = mismatch_stats(train, rollout, mask)
    else:
        stats = rollout_correction(train, rollout, mask, level=level, with_mismatch=True).stats
    assert reduce_stats(stats).samples["sample_is_ratio"] == pytest.approx([math.sqrt(2)])


def test_chi2_token_keeps_its_digits_at_a_small_mismatch():
    """E[rho^2] - 1 near 0 (log ratios of 1e-6) over 19200 tokens: summed row by row it matches the exact
    mean of expm1(2 x) to 1e-8 (2e-9 here), where sum rho^2 - n over the batch cancelled to 4e-8."""
    g = torch.Generator().manual_seed(1)
    x = 1e-6 * torch.randn(64, 300, generator=g, dtype=torch.float64)
    train = -torch.rand(64, 300, generator=g, dtype=torch.float64)
    rollout = train - x
    r = reduce_stats(mismatch_stats(train, rollout, torch.ones(64, 300, dtype=torch.bool)))
    log_ratio = (train - rollout).reshape(-1)
    exact = math.fsum(torch.expm1(2 * log_ratio).tolist()) / log_ratio.numel()
    assert r["mismatch_chi2_token"] == pytest.approx(exact, rel=1e-8, abs=0)
