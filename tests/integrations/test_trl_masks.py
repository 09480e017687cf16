"""TRL options that mask tokens or rows, on a real GRPOTrainer: every number TRL logs is what we export, and our
own generation stats keep every completion the model generated."""

from __future__ import annotations

import pytest
import torch

from otel_grpo import signals
from otel_grpo.integrations import instrument
from expected import differences_from_trl
from trl_run import exported, in_memory_telemetry, make_recording_trainer, train_instrumented

MAX_LEN = 4  # short enough that most completions of the tiny model hit it


def _generated(gen: dict, eos: int) -> torch.Tensor:
    """[B, T] the tokens the model generated, as TRL's completion mask before it masks truncated rows: up to the
    first EOS, every token of a row without one."""
    ids = gen["completion_ids"]
    is_eos = ids == eos
    ends = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, ids.shape[1])
    return torch.arange(ids.shape[1])[None] < ends[:, None]


def test_loss_masks_leave_trls_numbers_and_the_generated_completions(tmp_path):
    """`mask_truncated_completions` zeroes truncated rows in TRL's completion mask, `top_entropy_quantile` and
    `off_policy_mask_threshold` mask tokens and rows of the loss alone: TRL's logged policy, KL and entropy
    numbers and ours agree; distinct-n still counts the truncated completions, which the model generated."""
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3,
                                     max_completion_length=MAX_LEN, mask_truncated_completions=True,
                                     top_entropy_quantile=0.2, off_policy_mask_threshold=0.0, scale_rewards="none")
    steps = train_instrumented(trainer, tmp_path / "telemetry")
    compared, differ = differences_from_trl(trainer.state.log_history, steps)
    assert not differ
    assert {"entropy", "kl", "clip_ratio/region_mean", "reward_std", "completions/mean_length"} <= compared

    masked = 0
    for gen in trainer.records["generations"]:
        masked += int((gen["completion_mask"].sum(1) == 0).sum())
        want = signals.reduce_stats(signals.diversity_stats(gen["completion_ids"], _generated(gen, trainer.processing_class.eos_token_id)))
        got = steps[gen["step"] + 1]
        assert got["distinct_1"] == pytest.approx(want["distinct_1"]) and got["distinct_2"] == pytest.approx(
            want["distinct_2"]), gen["step"]
    assert masked > 0  # TRL did mask truncated completions out of its loss


def _first_only(completions: list[str], **_) -> list[float | None]:
    """Scores the first completion of each call, None for the others."""
    return [1.0] + [None] * (len(completions) - 1)


def test_one_scored_row_has_a_spread_of_zero_where_trl_logs_none(tmp_path):
    """docs/signals.md: with one row scored (the others None) the sample std is 0 here and NaN in TRL (logged as
    None); the group, whose advantages TRL zeroes, is one without a learning signal here, one with in TRL's log."""
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=1,
                                     reward_funcs=[_first_only], reward_weights=[1.0])
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    ours, (trl, *_) = exported(exporter)["steps"]["1"], trainer.state.log_history
    assert trl["reward_std"] is None and trl["rewards/_first_only/std"] is None and trl["frac_reward_zero_std"] == 0.0
    assert ours["reward_std"] == ours["reward_fn_std/_first_only"] == 0.0 and ours["frac_reward_zero_std"] == 1.0
    assert not trainer.records["generations"][0]["advantages"].any()  # no learning signal in TRL's own advantages
