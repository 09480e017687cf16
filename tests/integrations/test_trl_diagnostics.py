"""Per-sample diagnostics on a real TRL run: each stored completion carries the numbers of its first pass
through TRL's loss (`signals.sample_diagnostics`), matched against the tensors TRL itself produced."""

from __future__ import annotations

import pytest

from otel_grpo.integrations import instrument
from otel_grpo.integrations.trl._capture import ROW_KEY
from trl_run import exported, in_memory_telemetry, make_recording_trainer

LOSS_COLUMNS = {"log_ratio_mean", "log_ratio_absmax", "is_weight_mean", "is_weight_max", "entropy_mean"}


def run(tmp_path, **config):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", **config)
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    return trainer, exported(exporter)["samples"]


def first_pass(trainer, generated_at: int) -> dict[int, dict[str, float]]:
    """Row position -> entropy mean and k3 KL mean / max of the loss pass over it at the generation's step."""
    out = {}
    for mb in trainer.records["micro_batches"]:
        if mb["step"] != generated_at:
            continue
        for j, row in enumerate(mb[ROW_KEY].tolist()):
            m = mb["completion_mask"][j].bool()
            values = {"entropy_mean": mb["entropies"][j][m].double().mean().item()}
            if "ref_per_token_logps" in mb:
                d = (mb["ref_per_token_logps"][j][m] - mb["logps"][j][m]).double()
                k3 = d.exp() - d - 1.0
                values |= {"kl_ref_mean": k3.mean().item(), "kl_ref_max": k3.max().item()}
            out[row] = values
    return out


def test_on_policy_rows_carry_their_loss_numbers(tmp_path):
    trainer, samples = run(tmp_path, max_steps=2, num_iterations=1, logging_steps=1)
    assert len(samples) == 2 * trainer.args.per_device_train_batch_size  # one batch per logged step, all kept
    for s in samples:
        assert LOSS_COLUMNS | {"kl_ref_mean", "kl_ref_max", "length_clipped"} <= set(s), sorted(s)
        # num_iterations=1: TRL's pi_old is pi_theta itself, so every weight is exactly 1
        assert s["is_weight_mean"] == s["is_weight_max"] == 1.0 and s["log_ratio_absmax"] == 0.0
        assert s["length_clipped"] == (0.0 if s["terminated"] else 1.0)
        assert isinstance(s["completion_length"], int)  # TRL's own count, not the diagnostics' float
        expected = first_pass(trainer, s["policy_version"])[s["sample_index"]]
        for key, value in expected.items():
            assert s[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
        assert 0.0 <= s["kl_ref_mean"] <= s["kl_ref_max"]
        if s["policy_version"] == 0:
            assert s["kl_ref_max"] < 1e-5  # step 0: the reference is the policy
    assert max(s["kl_ref_max"] for s in samples if s["policy_version"] == 1) > 1e-6  # the policy moved


def test_without_a_reference_no_kl_and_rows_wait_for_their_loss_pass(tmp_path):
    """beta=0: TRL computes no reference log-probs, so no KL column. steps_per_generation=2: half a generation
    batch goes through the loss one step later, after an update, so its rows go out at the next logged step,
    all of them, with IS weights that are no longer 1."""
    trainer, samples = run(tmp_path, max_steps=4, num_iterations=1, steps_per_generation=2, beta=0.0)
    batch = 2 * trainer.args.per_device_train_batch_size
    assert len(trainer.records["generations"]) == 2
    assert sorted((s["step"], s["policy_version"]) for s in samples) == [(2, 0)] * batch + [(4, 2)] * batch
    later = []
    for s in samples:
        assert LOSS_COLUMNS <= set(s) and "kl_ref_mean" not in s
        step, expected = loss_pass(trainer, s)
        for key, value in expected.items():
            assert s[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
        if step > s["policy_version"]:
            later.append(s["is_weight_max"])
    assert len(later) == batch and max(abs(w - 1.0) for w in later) > 1e-4  # pi_theta moved since pi_old


def loss_pass(trainer, sample) -> tuple[int, dict[str, float]]:
    """The step of the first loss pass over the sample's row, and its entropy and IS weight means from TRL's tensors."""
    lo = sample["policy_version"]
    for mb in trainer.records["micro_batches"]:
        if lo <= mb["step"] < lo + 2:
            for j, row in enumerate(mb[ROW_KEY].tolist()):
                if row == sample["sample_index"]:
                    m = mb["completion_mask"][j].bool()
                    weight = (mb["logps"][j][m] - mb["old_per_token_logps"][j][m]).double().exp()
                    return mb["step"], {"entropy_mean": mb["entropies"][j][m].double().mean().item(),
                                        "is_weight_mean": weight.mean().item(), "is_weight_max": weight.max().item()}
    raise AssertionError(f"row {sample['sample_index']} of step {lo} never went through the loss")
