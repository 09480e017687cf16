"""Stats merging, reduce_stats finalization, degenerate batches and the catalog contract."""

import math

import pytest
import torch

from signal_batches import everything as _everything
from otel_grpo import catalog
from otel_grpo.signals import Stats, reduce_stats, reward_stats, rollout_correction
from otel_grpo.signals._policy import bucket_labels


def test_every_key_is_a_catalog_key_and_finite():
    reduced = reduce_stats(_everything(6, 9))
    for key in list(reduced) + list(reduced.samples) + list(reduced.invalid):
        base, label = catalog.split_stat_key(key)
        assert (catalog.get(base).label is None) == (label is None), key
    assert all(math.isfinite(v) for v in reduced.values())
    # 9-token completions fill only the first KL length bucket; the others have no token
    assert sorted(reduced.invalid) == [f"kl_by_length/{b}" for b in sorted(bucket_labels()) if b != "le_64"]


def test_merged_micro_batches_equal_one_batch():
    """Two halves merged with | give the one-batch numbers (token-weighted, true extrema)."""
    whole = reduce_stats(_everything(8, 11, seed=3))
    halves = reduce_stats(Stats.merge(*(_everything(8, 11, seed=3, rows=r) for r in (slice(0, 4), slice(4, 8)))))
    assert set(whole) == set(halves) and whole.invalid == halves.invalid
    for key in whole:  # float32 partial sums add in a different order: not bit-identical
        assert halves[key] == pytest.approx(whole[key], rel=1e-6, abs=1e-9), key
    assert whole.samples == halves.samples
    assert whole.columns == halves.columns and len(whole.columns["kl_ref_mean"]) == 8


@pytest.mark.parametrize("B,T", [(1, 1), (1, 7), (5, 1)])
def test_tiny_batches_are_finite(B, T):
    reduced = reduce_stats(_everything(B, T))
    assert reduced and all(math.isfinite(v) for v in reduced.values())


def test_no_valid_token_gives_invalid_not_nan():
    B, T = 3, 4
    mask = torch.zeros(B, T, dtype=torch.bool)
    reduced = reduce_stats(_everything(B, T, mask=mask))
    assert all(math.isfinite(v) for v in reduced.values())
    for key in ("kl", "rollout_is_mean", "mismatch_training_ppl", "is_ratio_max", "clip_ratio_low_min",
                "rollout_is_seq_std", "rollout_is_eff_sample_size", "distinct_1", "entropy"):  # fmt: skip
        assert key in reduced.invalid and key not in reduced
    assert reduced["tokens"] == 0 and reduced["completion_length_max"] == 0
    assert reduced.samples["sample_is_ratio"] == []


def test_single_token_std_is_zero_not_nan():
    _, _, stats = rollout_correction(torch.tensor([[0.3]]), torch.zeros(1, 1), torch.ones(1, 1))
    r = reduce_stats(stats)
    assert r["rollout_is_std"] == 0.0 and r["rollout_is_seq_std"] == 0.0


def test_nan_rewards_are_excluded_and_all_nan_is_invalid():
    r = reduce_stats(reward_stats(torch.tensor([float("nan")] * 2), 2))
    assert {"reward", "reward_min", "reward_p50", "reward_group_std", "frac_reward_zero_std"} <= r.invalid
    assert r.samples["sample_reward"] == [] and r["samples"] == 2


def test_merging_a_key_with_two_recipes_fails():
    a = Stats().add_mean("kl", torch.tensor(1.0), torch.tensor(1.0))
    b = Stats().add_sum("kl", torch.tensor(1.0))
    with pytest.raises(ValueError, match="kl"):
        a | b


def test_unknown_or_malformed_keys_fail():
    with pytest.raises(KeyError, match="not_a_signal"):
        Stats().add_mean("not_a_signal", torch.tensor(1.0), torch.tensor(1.0))
    with pytest.raises(ValueError, match="reward_fn_mean"):
        Stats().add_mean("reward_fn_mean", torch.tensor(1.0), torch.tensor(1.0))  # needs /<fn>


def test_empty_stats_reduce_to_nothing():
    assert reduce_stats(Stats()) == {}


def test_float64_inputs_stay_float64():
    lp = torch.zeros(2, 3, dtype=torch.float64)
    weights, _, _ = rollout_correction(lp, lp - 1e-12, torch.ones(2, 3))
    assert weights.dtype == torch.float64


def test_finalize_formulas_on_hand_made_parts():
    """Two 'micro-batches' of the values [1, 2] and [3, 6] built by hand, merged, finalized."""
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    parts = []
    for xs in ([1.0, 2.0], [3.0, 6.0]):
        x = t(xs)
        s = Stats().add_mean("kl", x.sum(), len(xs))
        s.add_std("reward_std", x.sum(), (x * x).sum(), t(2.0), unbiased=True)
        s.add_std("rollout_is_std", x.sum(), (x * x).sum(), t(2.0), unbiased=False)
        s.add_ess("rollout_is_eff_sample_size", x.sum(), (x * x).sum(), t(2.0))
        s.add_min("reward_min", x.min(), 2).add_max("reward_max", x.max(), 2).add_sum("tokens", x.sum())
        parts.append(s.add_samples("sample_reward", x, {"reward_p50": 0.5, "reward_p95": 0.95}))
    r = reduce_stats(Stats.merge(*parts))
    values = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    assert r["kl"] == 3.0 and r["tokens"] == 12.0
    assert r["reward_std"] == pytest.approx(values.std().item())  # n - 1
    assert r["rollout_is_std"] == pytest.approx(values.std(unbiased=False).item())  # n
    assert r["rollout_is_eff_sample_size"] == pytest.approx((3.0 + 1e-8) ** 2 / (50 / 4))
    assert (r["reward_min"], r["reward_max"]) == (1.0, 6.0)
    assert r["reward_p50"] == pytest.approx(2.5) and r["reward_p95"] == pytest.approx(values.quantile(0.95).item())
    assert r.samples["sample_reward"] == [1.0, 2.0, 3.0, 6.0]


def test_a_group_of_one_exchanges_nothing():
    # A single-process run inside an initialized group (as torchrun --nproc_per_node 1 makes):
    # the same numbers as without a group, and no collective at all.
    import torch.distributed as dist
    from dist_worker import counting_collectives

    stats = _everything(8, 13, 7)
    alone = reduce_stats(stats)
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with counting_collectives() as calls:
            in_group = reduce_stats(stats)
    finally:
        dist.destroy_process_group()
    assert calls == []
    assert dict(in_group) == dict(alone) and in_group.samples == alone.samples


def test_summaries_of_a_per_sample_vector_skip_nan_rows():
    values = torch.tensor([1.0, float("nan"), 4.0, 2.5])
    summaries = {"reward": "mean", "reward_std": "std", "reward_min": "min", "reward_max": "max"}
    r = reduce_stats(Stats().add_samples("sample_reward", values, summaries=summaries))
    valid = [1.0, 4.0, 2.5]
    assert r["reward"] == pytest.approx(sum(valid) / 3)
    assert r["reward_std"] == pytest.approx(torch.tensor(valid, dtype=torch.float64).std().item(), rel=1e-15)
    assert (r["reward_min"], r["reward_max"]) == (1.0, 4.0)
    assert r.samples["sample_reward"] == valid


def test_summaries_of_no_valid_row_are_invalid_and_of_one_row_have_no_spread():
    nan = float("nan")
    summaries = {"reward": "mean", "reward_std": "std", "reward_min": "min"}
    none = reduce_stats(Stats().add_samples("sample_reward", torch.tensor([nan, nan]), summaries=summaries))
    assert none.invalid == {"reward", "reward_std", "reward_min"} and not set(summaries) & set(none)
    one = reduce_stats(Stats().add_samples("sample_reward", torch.tensor([nan, 3.0]), summaries=summaries))
    assert (one["reward"], one["reward_std"], one["reward_min"]) == (3.0, 0.0, 3.0)


def test_a_summarized_vector_is_neither_a_histogram_nor_a_column():
    stats = Stats().add_summarized("ended", torch.tensor([2.0, float("nan"), 6.0]),
                                   {"terminated_length_mean": "mean", "terminated_length_max": "max"})
    r = reduce_stats(stats)
    assert (r["terminated_length_mean"], r["terminated_length_max"]) == (4.0, 6.0)
    assert r.samples == {} and r.columns == {}


def test_summaries_are_the_same_whatever_the_order_of_the_rows():
    """Sums are correctly rounded (fsum): the rows of several micro-batches or ranks in any order agree."""
    torch.manual_seed(1)
    values = torch.randn(999, dtype=torch.float64) * 1e6 + 1e9
    summaries = {"reward": "mean", "reward_std": "std"}
    forward = reduce_stats(Stats().add_samples("sample_reward", values, summaries=summaries))
    backward = reduce_stats(Stats().add_samples("sample_reward", values.flip(0), summaries=summaries))
    assert (forward["reward"], forward["reward_std"]) == (backward["reward"], backward["reward_std"])


@pytest.mark.parametrize("summaries, match", [
    ({"reward": "median"}, "'median' is none of mean, std, min, max, sum"),
    ({"reward": "std"}, "is a mean signal in the catalog"),
    ({"no_such_key": "mean"}, "no_such_key"),
])
def test_a_bad_summary_is_refused_naming_it(summaries, match):
    with pytest.raises((ValueError, KeyError), match=match):
        Stats().add_samples("sample_reward", torch.tensor([1.0]), summaries=summaries)


def test_group_spreads_of_a_per_sample_vector_skip_nan_rows_and_empty_groups():
    """Groups of 3 consecutive rows: [1, 2, NaN] (std of 1 and 2), [5, 5, 5] (std 0), [NaN x 3] (no group),
    [4, NaN, NaN] (one value: std 0); merged from two calls of whole groups, as ranks and micro-batches give them."""
    nan = float("nan")
    groups = {"reward_group_std": "std", "frac_reward_zero_std": "zero_std"}
    first = Stats().add_samples("sample_reward", torch.tensor([1.0, 2.0, nan, 5.0, 5.0, 5.0]), groups=groups,
                                group_size=3)
    second = Stats().add_samples("sample_reward", torch.tensor([nan, nan, nan, 4.0, nan, nan]), groups=groups,
                                 group_size=3)
    r = reduce_stats(first | second)
    assert r["reward_group_std"] == pytest.approx(math.sqrt(0.5) / 3, rel=1e-15)
    assert r["frac_reward_zero_std"] == 2 / 3
    none = reduce_stats(Stats().add_samples("sample_reward", torch.tensor([nan, nan]), groups=groups, group_size=2))
    assert none.invalid == set(groups)


@pytest.mark.parametrize("groups, size, match", [
    ({"reward_group_std": "var"}, 2, "'var' is none of std, zero_std"),
    ({"reward_group_std": "std"}, 3, "group_size must be a positive int dividing the 4 rows"),
    ({"reward_group_std": "std"}, 0, "group_size must be a positive int"),
])
def test_a_bad_group_spread_is_refused_naming_it(groups, size, match):
    with pytest.raises(ValueError, match=match):
        Stats().add_samples("sample_reward", torch.tensor([1.0, 2.0, 3.0, 4.0]), groups=groups, group_size=size)


def test_a_table_comes_back_as_host_rows_beside_the_stats_nan_kept():
    first = torch.tensor([[1.0, math.nan], [2.0, -math.inf]], dtype=torch.float64)
    stats = Stats().add_sum("samples", 2.0).add_table("t", first).add_table("t", first[:1] * 10)  # rows append
    got = reduce_stats(stats)
    assert got["samples"] == 2.0 and got.columns == {} and got.samples == {}
    flat = got.tables["t"]  # row-major, two columns
    assert flat[0::2] == [1.0, 2.0, 10.0] and flat[3] == -math.inf
    assert math.isnan(flat[1]) and math.isnan(flat[5]) and len(flat) == 6


@pytest.mark.parametrize("table", [torch.zeros(3), torch.zeros(2, 2, dtype=torch.float32)])
def test_a_table_must_be_two_dimensional_float64(table):
    with pytest.raises(ValueError, match="table 't'"):
        Stats().add_table("t", table)


def _scaled_mean(rows, params, calls):
    """A test finish: each row's column 0 times its call's param, over the tokens in column 1; one sample a call."""
    n = rows[:, 1].sum()
    per_call = [rows[calls == c, 0].sum() for c in range(calls.max() + 1)]
    return ({"kl": ((rows[:, 0] * params[:, 0]).sum() / max(n, 1.0), n > 0), "entropy": (n, True)},
            {"sample_reward": [float(x) for x in per_call]})


def test_a_finished_table_becomes_stats_each_call_with_its_own_params():
    first = torch.tensor([[1.0, 2.0], [3.0, 1.0]], dtype=torch.float64)
    stats = Stats().add_table("t", first, finish=_scaled_mean, params=(10.0,))
    stats = stats | Stats().add_table("t", first[:1] * 2, finish=_scaled_mean, params=(-1.0,))  # other params
    got = reduce_stats(stats.add_sum("samples", 1.0))
    assert got["kl"] == (1 * 10 + 3 * 10 - 2) / 7 and got["entropy"] == 7.0 and got["samples"] == 1.0
    assert got.samples == {"sample_reward": [4.0, 2.0]} and got.tables == {}
    empty = reduce_stats(Stats().add_table("t", torch.zeros(1, 2, dtype=torch.float64), finish=_scaled_mean,
                                           params=(1.0,)))
    assert "kl" not in empty and empty.invalid == {"kl"}  # invalid: listed, not reported


def test_finished_rows_of_several_ranks_come_in_rank_order_with_their_calls():
    from otel_grpo.signals._gathered import Layout

    stats = Stats().add_table("t", torch.zeros(2, 2, dtype=torch.float64), finish=_scaled_mean, params=(1.0,))
    stats |= Stats().add_table("t", torch.zeros(1, 2, dtype=torch.float64), finish=_scaled_mean, params=(2.0,))
    params, calls = Layout.of(stats).call_rows("table:2:t", rows=((2, 1), (2, 1)))
    assert params[:, 0].tolist() == [1.0, 1.0, 2.0] * 2 and calls.tolist() == [0, 0, 1, 2, 2, 3]
    params, calls = Layout.of(stats).call_rows("table:2:t", rows=((1, 0), (3, 2)))  # ranks' own row counts
    assert params[:, 0].tolist() == [1.0, 1.0, 1.0, 1.0, 2.0, 2.0] and calls.tolist() == [0, 2, 2, 2, 3, 3]


def test_a_finished_table_refuses_what_ranks_could_not_share():
    t = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="module-level function"):
        Stats().add_table("t", t, finish=lambda rows, params, calls: ({}, {}))
    with pytest.raises(ValueError, match="params: table 't' has no finish"):
        Stats().add_table("t", t, params=(1.0,))
    with pytest.raises(ValueError, match="two finishes"):
        Stats().add_table("t", t) | Stats().add_table("t", t, finish=_scaled_mean)
    with pytest.raises(ValueError, match="two finishes"):
        Stats().add_table("t", t, finish=_scaled_mean).add_table("t", t)
    with pytest.raises(ValueError, match="takes 1 params a call, got 2"):
        Stats().add_table("t", t, finish=_scaled_mean, params=(1.0,)) | Stats().add_table(
            "t", t, finish=_scaled_mean, params=(1.0, 2.0))
