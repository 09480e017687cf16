"""TRL options that mask tokens or rows, on a real GRPOTrainer: every number TRL logs is what we export, and our
own generation stats keep every completion the model generated."""

from __future__ import annotations

import pytest
import torch

from otel_grpo import signals
from otel_grpo.catalog import stat_key
from otel_grpo.integrations import instrument
from expected import close
from trl_run import exported, in_memory_telemetry, make_recording_trainer

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
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    steps = {int(k): v for k, v in exported(exporter)["steps"].items()}
    compared = set()
    for entry in trainer.state.log_history:
        if "loss" not in entry:
            continue
        for name, value in entry.items():
            key = stat_key(name, "trl")
            if isinstance(value, float) and key in steps[entry["step"]]:
                assert close(steps[entry["step"]][key], value), (entry["step"], name, value)
                compared.add(name)
    assert {"entropy", "kl", "clip_ratio/region_mean", "reward_std", "completions/mean_length"} <= compared

    masked = 0
    for gen in trainer.records["generations"]:
        masked += int((gen["completion_mask"].sum(1) == 0).sum())
        want = signals.reduce_stats(signals.diversity_stats(gen["completion_ids"], _generated(gen, trainer.processing_class.eos_token_id)))
        got = steps[gen["step"] + 1]
        assert got["distinct_1"] == pytest.approx(want["distinct_1"]) and got["distinct_2"] == pytest.approx(
            want["distinct_2"]), gen["step"]
    assert masked > 0  # TRL did mask truncated completions out of its loss
