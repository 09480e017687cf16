"""Every name `otel_grpo.trainer` promises imports, and the CLI command is registered."""

from __future__ import annotations

import otel_grpo.trainer as trainer
from otel_grpo.cli import app


def test_all_names_import():
    for name in trainer.__all__:
        assert getattr(trainer, name) is not None, name


def test_presets_are_valid_configs():
    for name in trainer.PRESETS:
        cfg = trainer.load_config(preset=name)
        assert cfg.steps > 0


def test_train_command_registered():
    assert "train" in {c.name or c.callback.__name__ for c in app.registered_commands}
