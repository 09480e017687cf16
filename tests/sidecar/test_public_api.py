"""The sidecar's promised public names import, and the CLI command is registered."""

from __future__ import annotations

import otel_grpo.sidecar as sidecar
import otel_grpo.sidecar.otlp as otlp
import otel_grpo.sidecar.store as store


def test_every_promised_name_exists():
    for module in (sidecar, otlp, store):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_sidecar_command_is_registered():
    from typer.main import get_command

    from otel_grpo.cli import app

    assert "sidecar" in get_command(app).commands


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_RETENTION_MAX_RUNS", "3")
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_CORS_ORIGINS", '["http://grafana:3000"]')
    settings = sidecar.SidecarSettings()
    assert (settings.db, settings.retention_max_runs, settings.cors_origins) == (
        tmp_path / "env.db", 3, ["http://grafana:3000"])
    assert settings.host == "127.0.0.1" and settings.port == 8000 and settings.ingest_token is None
