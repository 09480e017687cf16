"""A short CPU run of the demo model learns, and every signal the loop promises is emitted."""

from __future__ import annotations

from statistics import mean

import pytest

PHASES = {"rollout", "reward", "reference", "update"}


def test_short_run_learns_with_every_phase_and_signal(train_run):
    run = train_run("steps=30", "min_step_seconds=0", preset="demo")
    history = run.result.history
    assert len(history) == 30
    rewards = [h["reward"] for h in history]
    assert mean(rewards[-5:]) > mean(rewards[:5]) + 0.15, rewards
    assert max(h["clip_ratio_region_mean"] for h in history) > 0
    assert all(h["mismatch_k3_kl"] > 0 for h in history)  # bf16 rollout copy vs fp32 policy
    assert any(h["policy_ratio_max"] != 1.0 for h in history)  # several optimizer steps per batch
    assert all(h["kl"] >= 0 and h["entropy"] > 0 for h in history)

    phases = {s.attributes["grpo.phase"] for s in run.spans() if s.name.startswith("grpo.phase.")}
    assert PHASES <= phases
    steps = run.spans("grpo.step")
    assert len(steps) == 30 and all(s.attributes["grpo.run_id"] == "test-run" for s in steps)

    names = set(run.metrics())
    for name in ("grpo.reward.mean", "grpo.reward_fn.mean", "grpo.kl", "grpo.clip_ratio.high", "grpo.mismatch.k3_kl",
                 "grpo.mismatch.is_ratio.mean", "grpo.loss", "grpo.grad_norm", "grpo.learning_rate", "grpo.kl_coef",
                 "grpo.num_tokens", "grpo.step_time", "grpo.throughput", "grpo.phase.duration", "grpo.sample.reward"):
        assert name in names, name
    fns = {p.attributes["reward_fn"] for p in run.metrics()["grpo.reward_fn.mean"].data.data_points}
    assert fns == {"correct", "format"}
    assert run.counter("grpo.steps") == 30
    assert run.counter("grpo.samples") == 30 * 32 * 8


def test_warm_start_is_its_own_phase_and_samples_carry_their_columns(train_run, tmp_path):
    run = train_run("steps=2", "optim.sft_steps=2")
    assert len(run.spans("grpo.phase.warmup")) == 1
    rows = [__import__("json").loads(line) for line in (tmp_path / "run" / "samples" / "step_1.jsonl").open()]
    assert rows
    for column in ("prompt", "completion", "reward", "reward.correct", "reward.format", "advantage",
                   "completion_length", "prompt_length", "policy_version", "group",
                   "completion_index", "group_size", "reward_rank", "source_rank"):
        assert column in rows[0], column
    assert {r["policy_version"] for r in rows} == {2}  # the warm-start sync, then step 0's


def test_rollout_correction_reports_is_weights(train_run):
    run = train_run("steps=2", "rollout_correction.enabled=true", "rollout_correction.mode=mask")
    last = run.result.history[-1]
    assert "rollout_is_mean" in last and "rollout_is_masked_fraction" in last


@pytest.mark.parametrize("bounds, masked, vetoed", [
    # bf16 rollout copy vs fp32 policy: token ratios off 1 by ~1e-2 while the IS thresholds stay wide
    (("mask_threshold_lower=0.999", "mask_threshold_upper=1.001"), True, False),
    (("veto_threshold_upper=1.0001",), False, True),  # the upper veto bound alone
    (("veto_threshold=0.9999",), False, True),  # the lower one alone
])
def test_mask_bounds_and_both_veto_bounds_reach_the_correction(train_run, bounds, masked, vetoed):
    run = train_run("steps=1", "rollout_correction.enabled=true", "rollout_correction.mode=mask",
                    *(f"rollout_correction.{b}" for b in bounds))
    last = run.result.history[-1]
    assert (last["rollout_is_masked_fraction"] > 0) == masked
    assert (last["rollout_is_veto_fraction"] > 0) == vetoed
    assert last["rollout_is_valid"] == 1.0 and "grpo.rollout_is.valid" in run.metrics()
    assert last["loss"] == pytest.approx(last["loss_policy"] + last["loss_kl"], abs=1e-6)
