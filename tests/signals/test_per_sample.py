"""Per-completion diagnostics: hand-computed on tiny tensors, returned as rows by `reduce_stats`."""

import math

import pytest
import torch

from otel_grpo.signals import Stats, reduce_stats, sample_diagnostics

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


@pytest.mark.parametrize("call, argument", [
    (lambda: sample_diagnostics(MASK[0]), "mask"),
    (lambda: sample_diagnostics(MASK, logprobs=LP[:2]), "logprobs"),
    (lambda: sample_diagnostics(MASK, entropy=ENTROPY.long()), "entropy"),
    (lambda: sample_diagnostics(MASK, truncated=torch.zeros(2)), "truncated"),
    (lambda: sample_diagnostics(MASK.float() * 2), "mask"),
    (lambda: Stats().add_column("", torch.zeros(2)), "name"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_column_rows_split_by_rank():
    reduced = reduce_stats(sample_diagnostics(MASK))
    reduced.columns = {"x": [1.0, 2.0, None, 4.0]}  # as two ranks of two rows each would give
    assert reduced.column_rows(0, 2) == [{"x": 1.0}, {"x": 2.0}]
    assert reduced.column_rows(1, 2) == [{}, {"x": 4.0}]
