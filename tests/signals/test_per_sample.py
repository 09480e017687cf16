"""Per-completion diagnostics: hand-computed on tiny tensors, returned as rows by `reduce_stats`."""

import math

import pytest
import torch

from otel_grpo.signals import Stats, policy_stats, reduce_stats, sample_diagnostics

# Two completions of up to 3 tokens; the second has 2, the third none.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
LP = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0], [0.0, 0.0, 0.0]])
ROLLOUT = torch.tensor([[-1.0, -1.0, -0.5], [-0.1, -1.0, 0.0], [0.0, 0.0, 0.0]])  # log ratios 0,-1,0 and 0,-2
REF = torch.tensor([[-1.0, -2.0, -1.5], [-0.1, -3.0, 9.0], [0.0, 0.0, 0.0]])  # ref - lp: 0,0,-1 and 0,0 (pad: 9)
ENTROPY = torch.tensor([[0.3, 0.6, 0.9], [1.0, 2.0, 50.0], [7.0, 7.0, 7.0]])


def _rows(**kw):
    return reduce_stats(sample_diagnostics(MASK, **kw)).column_rows()


def test_hand_computed_columns():
    rows = _rows(logprobs=LP, rollout_logprobs=ROLLOUT, ref_logprobs=REF, entropy=ENTROPY,
                 truncated=torch.tensor([False, True, False]))
    first, second, empty = rows
    assert first["completion_length"] == 3 and second["completion_length"] == 2
    assert first["length_clipped"] == 0 and second["length_clipped"] == 1
    assert first["log_ratio_mean"] == pytest.approx(-1 / 3) and first["log_ratio_absmax"] == 1
    assert first["is_weight_mean"] == pytest.approx((2 + math.exp(-1)) / 3)
    assert first["is_weight_max"] == 1.0
    assert second["log_ratio_absmax"] == 2 and second["is_weight_max"] == 1.0
    k3 = math.exp(-1) + 1 - 1  # exp(d) - d - 1 at d = -1
    assert first["kl_ref_mean"] == pytest.approx(k3 / 3) and first["kl_ref_max"] == pytest.approx(k3)
    assert second["kl_ref_mean"] == 0 and second["kl_ref_max"] == 0  # the padded 9 counts nowhere
    assert first["entropy_mean"] == pytest.approx(0.6) and second["entropy_mean"] == pytest.approx(1.5)
    # a completion without tokens has its length and flag, and no token statistic
    assert empty == {"completion_length": 0.0, "length_clipped": 0.0}


def test_only_what_the_inputs_allow():
    assert set(_rows()[0]) == {"completion_length"}
    assert set(_rows(logprobs=LP, ref_logprobs=REF)[0]) == {"completion_length", "kl_ref_mean", "kl_ref_max"}
    assert set(_rows(rollout_logprobs=ROLLOUT)[0]) == {"completion_length"}  # a ratio needs both sides


def test_columns_are_no_catalog_signals():
    reduced = reduce_stats(sample_diagnostics(MASK, logprobs=LP, rollout_logprobs=ROLLOUT))
    assert reduced.samples == {} and dict(reduced) == {}  # no histogram, no step scalar


def test_micro_batches_concatenate_in_order():
    halves = sample_diagnostics(MASK[:1], logprobs=LP[:1], ref_logprobs=REF[:1]) | sample_diagnostics(
        MASK[1:], logprobs=LP[1:], ref_logprobs=REF[1:])
    whole = sample_diagnostics(MASK, logprobs=LP, ref_logprobs=REF)
    assert reduce_stats(halves).column_rows() == reduce_stats(whole).column_rows()


def test_passes_of_an_update_pool_into_their_samples_as_the_step_pools_them():
    # two passes over the three samples in another order each; the second pass sees a changed policy
    later = LP + torch.tensor([[0.5, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    order = torch.tensor([2, 0, 1, 1, 2, 0])
    lps = torch.cat([LP[order[:3]], later[order[3:]]])
    diag = sample_diagnostics(MASK[order], logprobs=lps, ref_logprobs=REF[order], entropy=ENTROPY[order],
                              rows=order, size=3)
    first, second, empty = reduce_stats(diag).column_rows()
    one = [sample_diagnostics(MASK, logprobs=lp, ref_logprobs=REF, entropy=ENTROPY) for lp in (LP, later)]
    one = [reduce_stats(d).column_rows() for d in one]
    for i, row in enumerate((first, second)):  # every sample is in both passes, as many tokens each time
        assert row["kl_ref_mean"] == pytest.approx((one[0][i]["kl_ref_mean"] + one[1][i]["kl_ref_mean"]) / 2)
        assert row["kl_ref_max"] == max(one[0][i]["kl_ref_max"], one[1][i]["kl_ref_max"])
        assert row["entropy_mean"] == pytest.approx(one[0][i]["entropy_mean"])
    assert "completion_length" not in first and empty == {}  # the generation's column comes from its own call
    # the samples' token-weighted mean is the step's pooled KL, as policy_stats pools the two passes
    step = reduce_stats(policy_stats(lps, lps, torch.zeros(6), MASK[order], 0.2, 0.2, ref_logprobs=REF[order]))
    lengths = MASK.sum(1).tolist()
    weighted = sum(r["kl_ref_mean"] * n for r, n in zip((first, second), lengths)) / sum(lengths)
    # (policy_stats sums a row's tokens in the inputs' float32, the columns in float64)
    assert weighted == pytest.approx(step["kl"], rel=1e-6)
    assert max(first["kl_ref_max"], second["kl_ref_max"]) == pytest.approx(step["kl_max"], rel=1e-6)


@pytest.mark.parametrize("call, argument", [
    (lambda: sample_diagnostics(MASK[0]), "mask"),
    (lambda: sample_diagnostics(MASK, logprobs=LP[:2]), "logprobs"),
    (lambda: sample_diagnostics(MASK, entropy=ENTROPY.long()), "entropy"),
    (lambda: sample_diagnostics(MASK, truncated=torch.zeros(2)), "truncated"),
    (lambda: sample_diagnostics(MASK.float() * 2), "mask"),
    (lambda: sample_diagnostics(MASK, rows=torch.tensor([0, 1]), size=3), "rows"),
    (lambda: sample_diagnostics(MASK, rows=torch.tensor([0, 1, 2]), size=None), "rows"),
    (lambda: sample_diagnostics(MASK, truncated=torch.zeros(3), rows=torch.tensor([0, 1, 2]), size=3), "truncated"),
    (lambda: Stats().add_column("", torch.zeros(2)), "name"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_column_rows_split_by_rank():
    reduced = reduce_stats(sample_diagnostics(MASK))
    reduced.columns = {"x": [1.0, 2.0, None, 4.0]}  # as two ranks of two rows each would give
    reduced.column_ranks = (2, 2)
    assert reduced.column_rows(0, 2) == [{"x": 1.0}, {"x": 2.0}]
    assert reduced.column_rows(1, 2) == [{}, {"x": 4.0}]
    reduced.column_ranks = (1, 3)  # ranks with different numbers of rows
    assert reduced.column_rows(0, 2) == [{"x": 1.0}] and reduced.column_rows(1, 2) == [{"x": 2.0}, {}, {"x": 4.0}]
    with pytest.raises(ValueError, match="world: these stats were reduced over 2 ranks, got 3"):
        reduced.column_rows(0, 3)
    with pytest.raises(ValueError, match="rank: expected 0 .. 1, got 2"):
        reduced.column_rows(2, 2)
