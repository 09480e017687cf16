"""rollout_correction against seed 004's formulas, and hand-computed cases."""

import math

import pytest
import torch

import seed004_reference as seed
from otel_grpo.signals import reduce_stats, rollout_correction

LEVELS = ("token", "sequence", "geometric")
MODES = ("truncate", "mask", "both")
VETOES = (None, (0.05, 20.0))


def _batch(seed_value: int, B: int = 12, T: int = 20, scale: float = 0.6):
    """Random log-probs with ragged rows, one empty row, one single-token row; padding holds garbage."""
    g = torch.Generator().manual_seed(seed_value)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    lengths[3], lengths[5] = 0, 1
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
    rollout = -torch.rand(B, T, generator=g) * 3
    train = rollout + torch.randn(B, T, generator=g) * scale
    # the seed only ever sees 0 in padding; ours must ignore whatever is there
    garbage = torch.where(torch.rand(B, T, generator=g) < 0.5, float("nan"), -float("inf"))
    ours = (torch.where(mask.bool(), train, garbage), torch.where(mask.bool(), rollout, garbage))
    return ours, (train * mask, rollout * mask), mask


def _assert_matches(reduced, expected: dict[str, torch.Tensor]) -> None:
    assert set(reduced) | reduced.invalid == set(expected)
    assert not reduced.invalid
    for key, value in expected.items():
        assert reduced[key] == pytest.approx(value.item(), rel=2e-5, abs=2e-6), key


@pytest.mark.parametrize("veto", VETOES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", LEVELS)
def test_matches_seed_on_random_batches(level, mode, veto):
    for seed_value in range(3):
        (train, rollout), (train0, rollout0), mask = _batch(seed_value, scale=0.3 + 0.5 * seed_value)
        kwargs = dict(threshold=(0.5, 2.0), mask_threshold=(0.4, 2.5))
        weights, new_mask, stats = rollout_correction(
            train, rollout, mask, level=level, mode=mode, veto_threshold=veto, **kwargs
        )
        ref_w, ref_mask, ref_metrics = seed.rollout_is(
            train0, rollout0, mask, level, mode, (2.0, 0.5), (2.5, 0.4), None if veto is None else veto[::-1]
        )
        torch.testing.assert_close(weights, ref_w, rtol=1e-6, atol=0)
        torch.testing.assert_close(new_mask, ref_mask)
        assert new_mask.dtype == mask.dtype
        _assert_matches(reduce_stats(stats), ref_metrics)


def test_random_batches_exercise_every_branch():
    """The comparison above is only meaningful if thresholds, masks and vetoes actually fire."""
    (train, rollout), _, mask = _batch(2, scale=1.3)
    for level in LEVELS:
        _, new_mask, stats = rollout_correction(
            train, rollout, mask, level=level, mode="both", threshold=(0.5, 2.0), veto_threshold=(0.05, 20.0)
        )
        r = reduce_stats(stats)
        assert r["rollout_is_ratio_fraction_high"] > 0 and r["rollout_is_ratio_fraction_low"] > 0
        assert 0 < r["rollout_is_masked_fraction"] < 1
        assert r["rollout_is_veto_fraction"] > 0
        assert new_mask.sum() < mask.sum()


def test_token_level_by_hand():
    # two rows: ratios [2, 0.25] and [1, pad]
    train = torch.tensor([[math.log(2.0), math.log(0.25)], [0.0, 5.0]])
    rollout = torch.zeros(2, 2)
    mask = torch.tensor([[True, True], [True, False]])
    weights, new_mask, stats = rollout_correction(
        train, rollout, mask, level="token", mode="both", threshold=(0.5, 1.5), mask_threshold=(0.5, 1.5)
    )
    torch.testing.assert_close(weights, torch.tensor([[1.5, 0.5], [1.0, 0.0]]))
    assert new_mask.tolist() == [[False, False], [True, False]]
    r = reduce_stats(stats)
    assert r["rollout_is_mean"] == pytest.approx((2 + 0.25 + 1) / 3)
    assert r["rollout_is_max"] == pytest.approx(2.0) and r["rollout_is_min"] == pytest.approx(0.25)
    assert r["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    assert r["rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)
    clamped = torch.tensor([1.5, 0.5, 1.0], dtype=torch.float64)
    assert r["rollout_is_std"] == pytest.approx(clamped.std(unbiased=False).item())
    assert r["rollout_is_eff_sample_size"] == pytest.approx((clamped.mean() ** 2 / (clamped**2).mean()).item())
    assert r["rollout_is_masked_fraction"] == pytest.approx(2 / 3)
    assert r["rollout_is_seq_masked_fraction"] == pytest.approx(1 / 2)
    assert r["rollout_is_seq_mean"] == pytest.approx(((2 + 0.25) / 2 + 1) / 2)
    assert r["rollout_is_seq_max_deviation"] == pytest.approx(0.125)


def test_sequence_level_uses_unclamped_log_space_and_safety_bound():
    # row 0: sum of log ratios 30 (beyond the bound), row 1: -2
    train = torch.tensor([[10.0, 20.0], [-2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    weights, _, stats = rollout_correction(train, torch.zeros(2, 2), mask, level="sequence", mode="mask")
    assert weights[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)  # safety-bounded, not truncated
    r = reduce_stats(stats)
    assert r["rollout_is_max"] == pytest.approx(math.exp(20.0), rel=1e-6)
    assert r["rollout_is_min"] == pytest.approx(math.exp(-2.0), rel=1e-6)
    assert r["rollout_is_ratio_fraction_high"] == 0.5 and r["rollout_is_ratio_fraction_low"] == 0.5


def test_veto_rejects_whole_sequences():
    train = torch.tensor([[0.0, -9.0, 0.0], [0.1, 0.0, 0.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    _, new_mask, stats = rollout_correction(
        train, torch.zeros(2, 3), mask, mode="truncate", veto_threshold=(1e-3, 1e3)
    )
    assert new_mask.tolist() == [[False] * 3, [True] * 3]
    r = reduce_stats(stats)
    assert r["rollout_is_veto_fraction"] == 0.5
    assert r["rollout_is_catastrophic_token_fraction"] == pytest.approx(1 / 6)


@pytest.mark.parametrize("level", LEVELS)
def test_unusual_bounds_match_the_seed(level):
    """A veto band that excludes ratio 1 (padding's) and a lower threshold of 0."""
    (train, rollout), (train0, rollout0), mask = _batch(5, scale=0.8)
    weights, new_mask, stats = rollout_correction(
        train, rollout, mask, level=level, mode="both", threshold=(0.0, 1.5), veto_threshold=(1.1, 50.0)
    )
    ref_w, ref_mask, ref_metrics = seed.rollout_is(train0, rollout0, mask, level, "both", (1.5, 0.0), None, (50.0, 1.1))
    torch.testing.assert_close(weights, ref_w, rtol=1e-6, atol=0)
    torch.testing.assert_close(new_mask, ref_mask)
    _assert_matches(reduce_stats(stats), ref_metrics)


def _std_float64(train, rollout, mask, level, threshold):
    """rollout_is_std from float64 copies of the (float32) inputs: token-weighted population std
    of the threshold-clamped weights."""
    t, r, m = train.double(), rollout.double(), mask.double()
    log_ratio = (t - r) * m
    if level == "token":
        w = log_ratio.clamp(-20, 20).exp()
    else:
        log_w = log_ratio.sum(-1)
        if level == "geometric":
            log_w = log_w / m.sum(-1).clamp(min=1)
        w = log_w.clamp(-20, 20).exp().unsqueeze(-1).expand_as(m)
    return w.clamp(*threshold)[m.bool()].std(unbiased=False).item()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("noise", [0.01, 0.001])
def test_std_is_exact_when_the_mismatch_is_small(level, mode, noise):
    """Weights sit near 1: E[w^2] - E[w]^2 cancels. The issue's case (geometric, B=4, T=200, noise
    0.01, float32): exact 7.11e-4, ours was 6.62e-4. Now within 1e-5 of the std itself."""
    g = torch.Generator().manual_seed(7)
    B, T = 4, 200
    rollout = -torch.rand(B, T, generator=g) * 3
    train = rollout + torch.randn(B, T, generator=g) * noise
    mask = torch.ones(B, T)
    mask[1, 150:] = 0  # ragged rows weight the row level by their token counts
    threshold = (0.5, 2.0)
    *_, stats = rollout_correction(train, rollout, mask, level=level, mode=mode, threshold=threshold)
    expected = _std_float64(train, rollout, mask, level, threshold)
    assert expected > 0
    assert reduce_stats(stats)["rollout_is_std"] == pytest.approx(expected, rel=1e-5, abs=0)


def test_calls_merged_with_different_parameters_keep_each_its_own():
    """Micro-batches at different levels, thresholds and modes merged with |: each key combines the calls'
    own values over their own denominators (tokens, rows with tokens, all rows), as one call's would."""
    (train, rollout), _, mask = _batch(4, B=30, scale=0.9)
    calls = [dict(level="token", mode="both", threshold=(0.5, 2.0), veto_threshold=(0.05, 20.0)),
             dict(level="geometric", mode="truncate", threshold=(0.9, 1.1)),
             dict(level="sequence", mode="mask", threshold=(0.7, 1.3), mask_threshold=(0.2, 5.0))]
    parts = [rollout_correction(train[i::3], rollout[i::3], mask[i::3], **kw).stats for i, kw in enumerate(calls)]
    alone = [reduce_stats(p) for p in parts]
    merged = reduce_stats(parts[0] | parts[1] | parts[2])
    n = [float(mask[i::3].sum()) for i in range(3)]  # tokens
    k = [float((mask[i::3].sum(-1) > 0).sum()) for i in range(3)]  # rows with tokens
    rows = [float(mask[i::3].shape[0]) for i in range(3)]  # all rows

    def combined(key, weights, which=range(3)):
        return sum(alone[i][key] * weights[i] for i in which) / sum(weights[i] for i in which)

    for key in ("rollout_is_mean", "rollout_is_catastrophic_token_fraction"):
        assert merged[key] == pytest.approx(combined(key, n), rel=1e-6), key
    for key in ("rollout_is_seq_mean", "rollout_is_seq_fraction_high", "rollout_is_seq_fraction_low",
                "rollout_is_veto_fraction"):
        assert merged[key] == pytest.approx(combined(key, k), rel=1e-6), key
    for key in ("rollout_is_ratio_fraction_high", "rollout_is_ratio_fraction_low"):  # sequence: over all rows
        assert merged[key] == pytest.approx(combined(key, [n[0], n[1], rows[2]]), rel=1e-6), key
    assert merged["rollout_is_masked_fraction"] == pytest.approx(combined("rollout_is_masked_fraction", n, (0, 2)))
    assert merged["rollout_is_seq_masked_fraction"] == pytest.approx(
        combined("rollout_is_seq_masked_fraction", rows, (0, 2)))
    for key, pick in (("rollout_is_max", max), ("rollout_is_seq_max", max), ("rollout_is_seq_max_deviation", max),
                      ("rollout_is_min", min), ("rollout_is_seq_min", min)):
        assert merged[key] == pick(a[key] for a in alone), key
    # the thresholds bite, differently in each call
    assert len({a["rollout_is_seq_fraction_high"] for a in alone}) == 3 and merged["rollout_is_masked_fraction"] > 0


@pytest.mark.parametrize("level", LEVELS)
def test_a_micro_batch_without_tokens_changes_no_rollout_is_stat(level):
    """Seed 004 leaves out a rank without a valid token; merged in, such a call changes nothing but the fraction
    of valid calls (an empty sequence-level call's exp(0) = 1 once became the max of ratios all below 1)."""
    g = torch.Generator().manual_seed(0)
    rollout = -torch.rand(4, 6, generator=g)
    train = rollout - 0.3 - 0.1 * torch.rand(4, 6, generator=g)  # every ratio below 1
    mask = torch.ones(4, 6)
    kw = dict(level=level, mode="both", veto_threshold=(0.05, 20.0))
    alone = reduce_stats(rollout_correction(train, rollout, mask, **kw).stats)
    merged = reduce_stats(rollout_correction(train, rollout, mask, **kw).stats
                          | rollout_correction(train, rollout, torch.zeros(4, 6), **kw).stats)
    assert alone["rollout_is_max"] < 1 and (alone["rollout_is_valid"], merged["rollout_is_valid"]) == (1.0, 0.5)
    assert {k: v for k, v in merged.items() if k != "rollout_is_valid"} == {
        k: v for k, v in alone.items() if k != "rollout_is_valid"}
