"""The integrations' public names resolve, and importing the package (or the TRL key mapping) pulls in no framework."""

from __future__ import annotations

import subprocess
import sys

import otel_grpo.integrations
import otel_grpo.integrations.trl


def test_every_name_in_all_imports():
    for module in (otel_grpo.integrations, otel_grpo.integrations.trl):
        assert [n for n in module.__all__ if getattr(module, n, None) is None] == []


def test_import_needs_neither_trl_nor_transformers():
    code = ("import sys, otel_grpo.integrations, otel_grpo.integrations.trl; "
            "from otel_grpo.integrations.trl import trl_mapping; trl_mapping(); "
            "print(any(m in sys.modules for m in ('trl', 'transformers', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_trl_mapping_is_the_catalogs_trl_names():
    from otel_grpo.catalog import peer_names
    from otel_grpo.integrations.trl import trl_mapping

    assert trl_mapping() == peer_names("trl") and ("kl", "grpo.trl.kl") in {(k, s.name) for k, s in trl_mapping()}
