"""What each TRL loss type clips, exported as TRL computes it (or not at all): real TRL runs on the tiny model,
one micro-batch per logged step (where TRL's logged values are exact), compared with TRL's `log_history`."""

from __future__ import annotations

import pytest

from otel_grpo.integrations import instrument
from trl_run import exported, in_memory_telemetry, make_recording_trainer

CLIP = {"clip_ratio/low_mean": "clip_ratio_low_mean", "clip_ratio/high_mean": "clip_ratio_high_mean",
        "clip_ratio/region_mean": "clip_ratio_region_mean", "clip_ratio/low_min": "clip_ratio_low_min",
        "clip_ratio/high_max": "clip_ratio_high_max"}


def _run(tmp_path, **config):
    trainer = make_recording_trainer(tmp_path / "train", model_dir=tmp_path / "model", max_steps=4,
                                     num_iterations=2, **config)
    tel, _, exporter = in_memory_telemetry(tmp_path / "telemetry")
    instrument(trainer, telemetry=tel)
    trainer.train()
    steps = {int(k): v for k, v in exported(exporter)["steps"].items()}
    trl = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    return steps, trl


@pytest.mark.parametrize("loss_type", ["grpo", "luspo"])
def test_sequence_level_clip_ratios_are_trls(tmp_path, loss_type):
    """GSPO (`importance_sampling_level="sequence"`) and luspo clip one ratio per sequence: the fractions are
    of sequences, as TRL logs them, never token fractions of a ratio TRL did not clip."""
    steps, trl = _run(tmp_path, loss_type=loss_type, importance_sampling_level="sequence", epsilon=0.002)
    clipped = 0.0
    for step in (1, 2, 3, 4):
        for name, key in CLIP.items():
            assert steps[step][key] == pytest.approx(trl[step][name], abs=1e-6), (step, key)
            clipped += trl[step][name]
    assert clipped > 0  # the runs did clip: the comparison is not of zeros only


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "vespo"])
def test_loss_types_without_two_sided_clipping_export_no_clip_ratios(tmp_path, loss_type):
    steps, trl = _run(tmp_path, loss_type=loss_type)
    for step in (1, 2, 3, 4):
        assert not set(CLIP.values()) & set(steps[step]), (step, sorted(steps[step]))
        assert not set(CLIP) & set(trl[step])  # TRL logs none of them either
    if loss_type == "cispo":  # what cispo clips, as TRL counts it
        assert all(steps[s]["trl_cispo_clip_ratio"] == pytest.approx(trl[s]["cispo_clip_ratio"]) for s in trl)


@pytest.mark.parametrize("level, epsilon", [("token", 0.02), ("sequence", 0.002)])
def test_delta_bounds_the_ratio_trl_counts_as_clipped(tmp_path, level, epsilon):
    """Two-sided GRPO (`delta`): TRL bounds the ratio at delta before it flags clipped tokens, so with delta
    below 1 + epsilon_high no token is high-clipped in its logs; the exported clip ratios are TRL's."""
    delta = 1.0 + epsilon / 2
    steps, trl = _run(tmp_path, importance_sampling_level=level, epsilon=epsilon, delta=delta)
    for step in (1, 2, 3, 4):
        for name, key in CLIP.items():
            assert steps[step][key] == pytest.approx(trl[step][name], abs=1e-6), (step, key)
    assert max(steps[s]["policy_ratio_max"] for s in steps if "policy_ratio_max" in steps[s]) > 1 + epsilon
    assert sum(trl[s]["clip_ratio/low_mean"] for s in trl) > 0  # the runs did clip: not a comparison of zeros
