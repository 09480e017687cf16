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
