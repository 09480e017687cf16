"""TRL with a `rollout_func` (a user's own generation, an environment's answers between the model's turns) on a real
GRPOTrainer: every number TRL logs is what we export, its `env_mask` (which TRL treats as a tool mask) counts the
model's tokens in our lengths and distinct-n, and each sample row is the completion TRL scored."""

from __future__ import annotations

import pytest
import torch

from otel_grpo import signals
from otel_grpo.integrations import instrument
from expected import differences_from_trl
from trl_run import exported, in_memory_telemetry, make_recording_trainer

ANSWER = "sun moon"  # the environment's words between the model's two turns
TURN = 3  # tokens the model may write per turn


def _rollout(with_env_mask: bool):
    """A `rollout_func`: the model writes a turn; the environment answers rows 0 and 1 of every 3 (row 1 ends on
    the answer, row 0's model writes a second turn), row 2 is a single turn. Records each batch's rows."""

    def rollout(prompts: list[str], trainer) -> dict[str, list]:
        tok, model = trainer.processing_class, trainer.accelerator.unwrap_model(trainer.model)
        answer = tok(ANSWER, add_special_tokens=False)["input_ids"]
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        for row, prompt in enumerate(prompts):
            prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            ids, env_mask, logprobs = [], [], []
            for turn in (0, 1):
                context = torch.tensor([prompt_ids + ids])
                with torch.no_grad():
                    gen = model.generate(context, max_new_tokens=TURN, do_sample=True, output_scores=True,
                                         return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
                new = gen.sequences[0, context.shape[1]:].tolist()
                ids += new
                env_mask += [1] * len(new)
                logprobs += [torch.log_softmax(s[0], -1)[t].item() for s, t in zip(gen.scores, new)]
                if turn == 1 or row % 3 == 2:
                    break
                ids += answer
                env_mask += [0] * len(answer)
                logprobs += [0.0] * len(answer)
                if row % 3 == 1:
                    break
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(ids)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(env_mask)
        trainer.records["rollouts"].append({"ids": out["completion_ids"], "env_mask": out["env_mask"]})
        if not with_env_mask:
            del out["env_mask"]
        return out

    return rollout


@pytest.mark.parametrize("with_env_mask,mask_truncated", [(True, False), (True, True), (False, False)],
                         ids=["env_mask", "env_mask-mask_truncated", "no-env_mask"])
def test_rollout_func_run_exports_every_number_trl_logs(tmp_path, monkeypatch, with_env_mask, mask_truncated):
    """TRL counts a completion's length in its `env_mask`'s 1s (all its tokens without one), before
    `mask_truncated_completions` zeroes the truncated rows; clipped is a last token neither EOS nor pad."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=3,
                                     per_device_train_batch_size=8, rollout_func=_rollout(with_env_mask),
                                     mask_truncated_completions=mask_truncated)
    trainer.records["rollouts"] = []
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    out = exported(exporter)
    steps = {int(k): v for k, v in out["steps"].items()}
    compared, differ = differences_from_trl(trainer.state.log_history, steps)
    assert not differ
    assert {"completions/mean_length", "completions/min_length", "completions/max_length",
            "completions/clipped_ratio", "completions/mean_terminated_length", "kl", "entropy",
            "clip_ratio/region_mean", "reward_std"} <= compared

    eos = trainer.processing_class.eos_token_id
    written = {}  # (prompt, completion) -> (the model's tokens, whether it ended on EOS)
    for gen, rollout in zip(trainer.records["generations"], trainer.records["rollouts"], strict=True):
        ids = gen["completion_ids"]
        masks = rollout["env_mask"] if with_env_mask else [[1] * len(row) for row in rollout["ids"]]
        model = torch.tensor([m + [0] * (ids.shape[1] - len(m)) for m in masks]).bool()
        want = signals.reduce_stats(signals.diversity_stats(ids, model))
        got = steps[gen["step"] + 1]
        assert got["distinct_1"] == pytest.approx(want["distinct_1"]), gen["step"]
        assert got["distinct_2"] == pytest.approx(want["distinct_2"]), gen["step"]
        for key, row, mask in zip(zip(gen["prompts"], gen["completions"]), rollout["ids"], masks, strict=True):
            written[key] = (sum(mask), row[-1] == eos)
    rows = {(s["prompt"], s["completion"]): (s["completion_length"], s["terminated"]) for s in out["samples"]}
    assert len(out["samples"]) == len(rows) == 3 * 8 and rows == written

    answered = [m for r in trainer.records["rollouts"] for m in r["env_mask"] if 0 in m]
    assert answered and any(m[-1] == 0 for m in answered)  # environment answers, rows that end on one among them
    assert any(not ended for _, ended in written.values())  # and truncated rows
