"""The promised public surface of every package imports, and `import otel_grpo` stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import otel_grpo

PACKAGES = ["catalog", "signals", "telemetry", "sidecar", "trainer", "generate", "stack", "cli", "integrations.follow"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_imports(package):
    module = importlib.import_module(f"otel_grpo.{package}")
    assert module.__all__, f"otel_grpo.{package} declares no public names"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


def test_top_level_names_resolve_lazily():
    for name in otel_grpo.__all__:
        assert getattr(otel_grpo, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        otel_grpo.no_such_name  # noqa: B018


def test_import_otel_grpo_needs_neither_torch_nor_the_sdk():
    # The sidecar image and `otel-grpo sidecar` must not pay for torch.
    code = "import sys, otel_grpo, otel_grpo.catalog; print('torch' in sys.modules, 'opentelemetry.sdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sidecar_and_cli_load_without_torch():
    code = "import sys, otel_grpo.sidecar, otel_grpo.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
