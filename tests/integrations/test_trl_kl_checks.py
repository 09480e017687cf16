"""TRL's logged `kl` is KL evidence for the alerts wherever a run has no plain-k3 grpo.kl: a real
GRPOTrainer exported through its logs alone (`OtelGrpoCallback`, and `instrument` outside its TRL range)."""

from __future__ import annotations

import pytest

from otel_grpo.catalog import STEP_CHECKS
from otel_grpo.integrations import OtelGrpoCallback, instrument
from otel_grpo.integrations.trl import _compat
from tests._support.tiny_trl import make_grpo_trainer
from trl_run import in_memory_telemetry, metrics_by_name

# A learning rate this large moves the tiny policy far from its reference at the first update:
# TRL logs kl 0 at step 1 (policy = reference), then well above 1 (1.8, 1.3, 1.3 on this model).
DRIFTING = {"learning_rate": 0.5, "max_steps": 4}


def _kl_evidence(metrics) -> tuple[dict, dict]:
    """grpo.step.beyond by (bound, streak) and grpo.step.streak by bound, of signal="kl"."""
    beyond, streak = {}, {}
    for p in metrics["grpo.step.beyond"].data.data_points:
        if p.attributes["signal"] == "kl":
            beyond[(p.attributes["bound"], p.attributes["streak"])] = p.value
    for p in metrics["grpo.step.streak"].data.data_points:
        if p.attributes["signal"] == "kl":
            streak[p.attributes["bound"]] = p.value
    return beyond, streak


@pytest.mark.parametrize("how", ["callback", "instrument outside the TRL range"])
def test_trls_logged_kl_reaches_the_kl_step_checks(tmp_path, monkeypatch, how):
    tel, reader, _ = in_memory_telemetry(tmp_path / "telemetry")
    if how == "callback":
        trainer = make_grpo_trainer(tmp_path / "train", callbacks=[OtelGrpoCallback(tel)], **DRIFTING)
    else:
        monkeypatch.setattr(_compat, "SUPPORTED_TRL", ">=99")  # the log-path fallback, as with a newer TRL
        trainer = make_grpo_trainer(tmp_path / "train", **DRIFTING)
        instrument(trainer, telemetry=tel)
    trainer.train()
    tel.flush()
    metrics = metrics_by_name(reader)
    assert "grpo.kl" not in metrics and "grpo.trl.kl" in metrics  # TRL's logs alone: no plain k3

    kls = [e["kl"] for e in trainer.state.log_history if "kl" in e]
    assert len(kls) == 4 and all(kl > 1.0 for kl in kls[1:]), kls  # the setup drifts, or the test proves nothing
    beyond, streak = _kl_evidence(metrics)
    assert len(streak) == len(STEP_CHECKS["kl"].bounds)
    for bound in ("0.1", "1.0", "2.0"):  # every logged step counted against every bound, as TRL logged it
        assert beyond[(bound, "1")] == sum(kl > float(bound) for kl in kls), bound
    assert beyond[("1.0", "3")] == 1 and streak["1.0"] == 3  # GRPOKLHigh's evidence: 3 steps in a row over 1.0
    (point,) = metrics["grpo.step.kl"].data.data_points  # the per-step KL histogram: one per logged step
    assert point.count == 4 and point.sum == pytest.approx(sum(kls))
    if how == "callback":
        tel.finish()  # the callback exports through ours; instrument's train() finished it
