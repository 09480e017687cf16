"""TRL with a `rollout_func` that returns its sampler's log-probs and no vLLM, on a run whose generation and optimizer
steps line up: TRL keeps the sampler's log-probs but computes no `old_per_token_logps` (its loss takes the current
policy's, detached, as pi_old), so the mismatch and rollout-IS sets are measured against the training policy's
log-probs of each row's first loss pass, as `signals.rollout_correction` computes them from those tensors."""

from __future__ import annotations

import pytest
import torch

from otel_grpo import signals
from otel_grpo.integrations import instrument
from expected import close
from trl_run import exported, in_memory_telemetry, make_recording_trainer


def _rollout(noise: float):
    """A `rollout_func`: the model samples each completion and reports its own log-probs of the sampled tokens (a
    forward pass over the prompt and completion), plus `noise` times a fixed normal draw per token: a sampler
    whose numbers differ from the training policy's."""

    def rollout(prompts: list[str], trainer) -> dict[str, list]:
        tok, model = trainer.processing_class, trainer.accelerator.unwrap_model(trainer.model)
        draw = torch.Generator().manual_seed(len(trainer.records["generations"]))
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for prompt in prompts:
            prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                seq = model.generate(torch.tensor([prompt_ids]), max_new_tokens=trainer.max_completion_length,
                                     do_sample=True, pad_token_id=tok.pad_token_id)[0]
                new = seq[len(prompt_ids):]
                logits = model(seq[None]).logits[0, len(prompt_ids) - 1 : -1].float()
            logprobs = torch.log_softmax(logits, -1).gather(1, new[:, None])[:, 0]
            logprobs = logprobs + noise * torch.randn(logprobs.shape, generator=draw)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(new.tolist())
            out["logprobs"].append(logprobs.tolist())
        return out

    return rollout


def _expected(trainer, step: int) -> dict[str, float]:
    """`signals.rollout_correction`'s mismatch and IS stats of the loss passes of `step` (logged every step):
    the training policy's log-probs that the loss used against the sampler's that TRL kept."""
    mbs = [m for m in trainer.records["micro_batches"] if m["step"] == step - 1]
    assert mbs and all("old_per_token_logps" not in m for m in mbs)  # TRL's pi_old is the loss pass's own
    args = trainer.args
    level, mode = args.vllm_importance_sampling_mode.split("_")
    threshold = (args.vllm_importance_sampling_clip_min or 0.0, args.vllm_importance_sampling_clip_max)
    train = torch.cat([m["logps"] for m in mbs])
    sampling = torch.cat([m["sampling_per_token_logps"] for m in mbs])
    mask = torch.cat([m["completion_mask"] for m in mbs])
    stats = signals.rollout_correction(train, sampling, mask, level=level, mode=mode, threshold=threshold,
                                       with_mismatch=True).stats
    return dict(signals.reduce_stats(stats))


@pytest.mark.parametrize("noise", [0.0, 0.3], ids=["own-logprobs", "perturbed-logprobs"])
def test_rollout_logprobs_without_vllm_give_mismatch_and_rollout_is(tmp_path, monkeypatch, noise):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=2,
                                     rollout_func=_rollout(noise))
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    steps = {int(k): v for k, v in exported(exporter)["steps"].items()}
    for step in (1, 2):
        expected = _expected(trainer, step)
        keys = [k for k in expected if k.startswith(("mismatch_", "rollout_is_", "is_ratio_"))]
        assert {"mismatch_kl", "mismatch_logprob_abs_diff", "mismatch_logprob_abs_diff_max", "is_ratio_mean",
                "rollout_is_mean", "rollout_is_eff_sample_size"} <= set(keys)
        missing = [k for k in keys if k not in steps[step]]
        assert not missing, (step, missing)
        for key in keys:
            assert close(steps[step][key], expected[key], abs_=1e-5), (step, key, steps[step][key], expected[key])
        diff = steps[step]["mismatch_logprob_abs_diff_max"]
        if noise:  # a sampler off the training policy
            assert diff > 0.1 and steps[step]["mismatch_k3_kl"] > 1e-3
        else:  # the policy's own numbers: what the batched forward pass rounds differently
            assert diff < 1e-4 and steps[step]["mismatch_k3_kl"] < 1e-8
