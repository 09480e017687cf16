"""Rank detection: torch.distributed when initialized wins over RANK / WORLD_SIZE."""

from __future__ import annotations

import pytest

from otel_grpo.telemetry._providers import detect_rank

from .conftest import free_port


def test_environment_when_no_process_group(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert detect_rank() == (3, 4)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert detect_rank() == (0, 1)


def test_initialized_process_group_wins(monkeypatch):
    dist = pytest.importorskip("torch.distributed")
    monkeypatch.setenv("RANK", "1")  # stale launcher variables must not make rank 0 silent
    monkeypatch.setenv("WORLD_SIZE", "8")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert detect_rank() == (0, 1)
    finally:
        dist.destroy_process_group()


def test_telemetry_turned_off_and_a_rank_that_does_not_export_share_one_null_sink(tmp_path, monkeypatch):
    from otel_grpo.telemetry import Telemetry, TelemetrySettings
    from otel_grpo.telemetry._sinks import NullSink

    monkeypatch.setenv("OTEL_GRPO_TOP_K", "many")  # turned off, nothing is read from the environment
    off = Telemetry.disabled()
    with off.step(0) as s:
        with s.phase("rollout"):
            s.record({"kl": 0.1})
            s.samples([{"reward": 1.0}])
        s.skip()
    off.log_metrics(1, {"kl": 0.2})
    assert not off.exporting and off.flush(1.0) and off.prometheus_port is None
    off.finish()
    monkeypatch.delenv("OTEL_GRPO_TOP_K")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    silent = Telemetry(TelemetrySettings(output_dir=tmp_path / "run"))
    with silent.step(0) as s:
        s.samples([{"reward": 1.0}])
    silent.finish()
    assert type(off._sink) is type(silent._sink) is NullSink
    assert not (tmp_path / "run").exists()
