"""Hand-checked pieces: tokenizer, task rewards, advantages, the clipped loss, faults, config loading."""

from __future__ import annotations

import math

import pytest
import torch

from otel_grpo.trainer import CharTokenizer, ConfigError, DigitTask, Fault, TaskConfig, load_config, to_dict
from otel_grpo.trainer._loss import SequenceMeanLoss, TokenMeanLoss, group_advantages, k3_kl


def test_tokenizer_round_trip_stops_at_eos():
    tok = CharTokenizer()
    ids = tok.encode("3714", bos=True, eos=True) + [tok.encode("9")[0]]
    assert tok.decode(ids) == "3714"


def test_sort_task_rewards_partial_credit_and_format():
    task = DigitTask(TaskConfig(kind="sort", num_digits=4), CharTokenizer())
    r = task.score(["1347", "1399", "134", "13477"], [True, True, True, False], ["1347"] * 4)
    assert r["correct"].tolist() == pytest.approx([1.0, 0.5, 0.75, 0.8])
    assert r["format"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert task.total_reward(r)[0].item() == pytest.approx(1.0)


def test_sample_batch_targets_are_the_transform():
    task = DigitTask(TaskConfig(kind="reverse", num_digits=3), CharTokenizer())
    batch = task.sample_batch(5, torch.Generator().manual_seed(0))
    assert batch.prompt_ids.shape == (5, task.cfg.prompt_len)
    assert all(t == p[:3][::-1] for p, t in zip(batch.prompts, batch.targets))


def test_group_advantages_are_normalized_within_groups():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), 2)
    # mean 0.5, unbiased std sqrt(0.5): +-0.5 / sqrt(0.5)
    assert adv[:2].tolist() == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-3)
    assert adv[2:].tolist() == [0.0, 0.0]


def test_clipped_loss_by_hand():
    # one sequence, two tokens; ratio e^0.5 > 1 + 0.28 is clipped for a positive advantage
    logp = torch.tensor([[0.5, 0.0]])
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    loss = SequenceMeanLoss(epsilon_low=0.2, epsilon_high=0.28, beta=0.0)(logp, old, old, torch.tensor([1.0]), mask)
    assert loss.item() == pytest.approx(-(1.28 + 1.0) / 2)
    # DAPO token mean over a batch with unequal lengths
    mask2 = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    z = torch.zeros(2, 2)
    tok_loss = TokenMeanLoss(epsilon_low=0.2, epsilon_high=0.2, beta=0.0)(z, z, z, torch.tensor([1.0, -1.0]), mask2)
    assert tok_loss.item() == pytest.approx((-1 - 1 + 1) / 3)


def test_k3_kl_is_zero_at_equality_and_positive_otherwise():
    a = torch.tensor([-1.0, -2.0])
    assert k3_kl(a, a).abs().max().item() == 0.0
    assert (k3_kl(a, a + 0.3) > 0).all()


def test_faults_parse_and_schedule():
    cfg = load_config(preset="tiny", overrides=["faults.inject=[kl-spike@3, nan@1, rollout-drift@2]"]).faults
    assert Fault.parse("stall@4") == Fault("stall", 4)
    assert [cfg.lr_factor(s) for s in (2, 3, 9)] == [1.0, 100.0, 100.0]
    assert cfg.nan_at(1) and not cfg.nan_at(2)
    assert cfg.rollout_drift(1) == 0.0 and cfg.rollout_drift(3) > cfg.rollout_drift(2) > 0


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 7\ngrpo:\n  beta: 0.02\ntask:\n  kind: reverse\n")
    cfg = load_config(preset="tiny", yaml_path=path, overrides=["grpo.beta=0.05"])
    assert (cfg.steps, cfg.grpo.beta, cfg.task.kind, cfg.model.d_model) == (7, 0.05, "reverse", 32)
    assert to_dict(cfg)["grpo"]["beta"] == 0.05


@pytest.mark.parametrize(
    "override, needle",
    [
        ("grpo.nope=1", "unknown config field 'grpo.nope'"),
        ("grpo.prompts_per_step=-2", "grpo.prompts_per_step must be positive"),
        ("grpo.epsilon_low=1.5", "grpo.epsilon_low must be in (0, 1)"),
        ("faults.inject=[boom@2]", "unknown fault 'boom'"),
        ("steps=many", "steps: expected an integer"),
    ],
)
def test_bad_config_is_one_readable_line(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config(preset="tiny", overrides=[override])
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("text, kind", [("- steps: 7\n", "list"), ("root:x:0:0:root:/root:/bin/bash\n", "str")])
def test_a_config_file_that_is_no_mapping_is_one_readable_line(tmp_path, text, kind):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(preset="tiny", yaml_path=path)
    assert f"expected a mapping of TrainConfig fields, got a {kind}" in str(info.value)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_reference_sync_moves_the_reference_toward_the_policy(tmp_path, monkeypatch):
    from otel_grpo.trainer import GRPOTrainer

    monkeypatch.setenv("OTEL_GRPO_METRICS_EXPORTERS", "none")
    cfg = load_config(preset="tiny", overrides=[f"output_dir={tmp_path}", "telemetry=false", "progress=false"])
    trainer = GRPOTrainer(cfg)
    with torch.no_grad():
        for p in trainer.unwrapped.parameters():
            p.add_(1.0)
    before = [r.clone() for r in trainer.reference.parameters()]
    trainer.sync_reference(0.25)
    for b, r, p in zip(before, trainer.reference.parameters(), trainer.unwrapped.parameters()):
        assert torch.allclose(r, 0.75 * b + 0.25 * p)
