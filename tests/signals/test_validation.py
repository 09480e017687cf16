"""Bad input raises ValueError naming the argument; value checks defer on accelerators."""

import pytest
import torch

from otel_grpo.signals import (
    _validate,
    diversity_stats,
    length_stats,
    mismatch_stats,
    policy_stats,
    reduce_stats,
    reward_stats,
    rollout_correction,
)

LP = torch.zeros(2, 3)
MASK = torch.ones(2, 3)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: rollout_correction(LP, torch.zeros(2, 4), MASK), "rollout_logprobs"),
        (lambda: rollout_correction(LP.long(), LP, MASK), "train_logprobs"),
        (lambda: rollout_correction(LP, LP, torch.ones(3, 2)), "mask"),
        (lambda: rollout_correction(LP, LP, MASK * 2), "mask"),
        (lambda: rollout_correction(LP, LP, MASK, level="tokens"), "level"),
        (lambda: rollout_correction(LP, LP, MASK, mode="clip"), "mode"),
        (lambda: rollout_correction(LP, LP, MASK, threshold=(2.0, 0.5)), "threshold"),
        (lambda: rollout_correction(LP, LP, MASK, mask_threshold=(3.0, 0.3)), "mask_threshold"),
        (lambda: rollout_correction(LP, LP, MASK, veto_threshold=(1e4, 1e-4)), "veto_threshold"),
        (lambda: rollout_correction(LP, LP, MASK, threshold=(-1.0, 2.0)), "threshold"),
        (lambda: rollout_correction(LP, LP, MASK, threshold=2.0), "threshold"),
        (lambda: mismatch_stats(LP, LP.double()[:1], MASK), "rollout_logprobs"),
        (lambda: mismatch_stats(LP, LP, MASK - 0.5), "mask"),
        (lambda: reward_stats(torch.zeros(6), 4), "group_size"),
        (lambda: reward_stats(torch.zeros(6), 0), "group_size"),
        (lambda: reward_stats(torch.zeros(2, 3), 1), "rewards"),
        (lambda: reward_stats(torch.zeros(0), 1), "rewards"),
        (lambda: reward_stats(torch.zeros(4), 2, {"a": torch.zeros(3)}), "components"),
        (lambda: reward_stats(torch.zeros(4), 2, {"a/b": torch.zeros(4)}), "components"),
        (lambda: reward_stats(torch.zeros(4), 2, advantages=torch.zeros(5)), "advantages"),
        (lambda: length_stats(MASK, torch.ones(3)), "truncated"),
        (lambda: length_stats(MASK, torch.full((2,), 2)), "truncated"),
        (lambda: length_stats(torch.ones(6), torch.ones(6)), "completion_mask"),
        (lambda: policy_stats(LP, LP, torch.zeros(3), MASK, 0.2, 0.2), "advantages"),
        (lambda: policy_stats(LP, LP, torch.zeros(2), MASK, -0.1, 0.2), "epsilon_low"),
        (lambda: policy_stats(LP, LP, torch.zeros(2), MASK, 0.2, 0.2, ref_logprobs=LP.T), "ref_logprobs"),
        (lambda: policy_stats(LP, LP, torch.zeros(2), MASK, 0.2, 0.2, entropy=LP.int()), "entropy"),
        (lambda: diversity_stats(LP, MASK), "completion_ids"),
        (lambda: diversity_stats(-LP.long() - 1, MASK), "completion_ids"),
        (lambda: diversity_stats(LP.long(), MASK, width=2), "width"),
        (lambda: reduce_stats({"kl": 0.1}), "stats"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_bool_and_integer_masks_are_accepted():
    for mask in (MASK.bool(), MASK.long(), MASK.double()):
        _, new_mask, _ = rollout_correction(LP, LP, mask)
        assert new_mask.dtype == mask.dtype


def test_value_checks_defer_to_reduce_where_they_would_sync(monkeypatch):
    """On a GPU the 0/1 check stays on device and reduce_stats raises it from its one host copy."""
    monkeypatch.setattr(_validate, "EAGER_VALUE_CHECK_DEVICES", set())
    stats = length_stats(MASK * 2, torch.zeros(2))  # no error yet: nothing read on the host
    with pytest.raises(ValueError, match="completion_mask must contain only 0 and 1"):
        reduce_stats(stats | reward_stats(torch.zeros(2), 1))
    ok = length_stats(MASK, torch.zeros(2))
    assert "completion_mask" in ok.checks and reduce_stats(ok)["tokens"] == 6
    with pytest.raises(ValueError, match="completion_ids"):
        reduce_stats(diversity_stats(-torch.ones(2, 3, dtype=torch.long), MASK))
