"""TRL with tools (agentic GRPO) on a real GRPOTrainer whose model calls tools: every number TRL logs is what we
export, and our distinct-n counts the tokens the model wrote, not a tool's answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from otel_grpo import signals
from expected import differences_from_trl
from trl_run import recording_class, train_instrumented

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_support"))

from tiny_tools import make_tool_trainer  # noqa: E402


def _tool_recording() -> type:
    class ToolRecording(recording_class()):
        def _generate(self, prompts):
            out = super()._generate(prompts)
            self.records["tool_masks"].append([list(m) for m in out[2]])  # TRL's, before mask_truncated
            return out

    return ToolRecording


def _model_tokens(tool_masks: list[list[int]], width: int) -> torch.Tensor:
    """[B, width] the tokens the model wrote: TRL's host tool mask (0: a tool's answer), 0 past each row."""
    return torch.tensor([m + [0] * (width - len(m)) for m in tool_masks]).bool()


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_tool_calling_run_exports_every_number_trl_logs(tmp_path, mask_truncated):
    """With tools TRL counts a completion's length in the model's tokens (its tool mask), before
    `mask_truncated_completions` zeroes the truncated rows' masks; tools/*, KL, entropy and clip stats too."""
    trainer = make_tool_trainer(tmp_path, trainer_class=_tool_recording(), mask_truncated_completions=mask_truncated)
    trainer.records = {"generations": [], "micro_batches": [], "tool_masks": []}
    steps = train_instrumented(trainer, tmp_path / "telemetry")
    compared, differ = differences_from_trl(trainer.state.log_history, steps)
    assert not differ
    assert {"completions/mean_length", "completions/min_length", "completions/max_length",
            "completions/mean_terminated_length", "tools/call_frequency", "tools/failure_frequency", "kl",
            "entropy", "clip_ratio/region_mean", "reward_std"} <= compared

    eos = trainer.processing_class.eos_token_id
    answered = truncated_with_answer = 0
    for gen, tool_masks in zip(trainer.records["generations"], trainer.records["tool_masks"]):
        ids = gen["completion_ids"]
        for row, tools in zip(ids.tolist(), tool_masks):
            answered += 0 in tools
            truncated_with_answer += 0 in tools and row[len(tools) - 1] != eos
        model = _model_tokens(tool_masks, ids.shape[1])
        want = signals.reduce_stats(signals.diversity_stats(ids, model))
        got = steps[gen["step"] + 1]
        assert got["distinct_1"] == pytest.approx(want["distinct_1"]), gen["step"]
        assert got["distinct_2"] == pytest.approx(want["distinct_2"]), gen["step"]
    assert answered > 0 and truncated_with_answer > 0  # the run held tool answers, and truncated rows with them
