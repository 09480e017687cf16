"""docs/signals.md and docs/integrations.md are generated from the catalog: committed = regenerated, every signal
and peer name in them; `otel-grpo dashboards --help` names them."""

from __future__ import annotations

import subprocess
import sys

import click
import typer.main

from otel_grpo import catalog
from otel_grpo.cli._app import app
from otel_grpo.catalog._docs import render_signals_md
from otel_grpo.generate._docs import DOC_FILES
from otel_grpo.generate._integrations_md import render_integrations_md


def test_committed_signals_doc_equals_regenerated(root):
    assert (root / "docs" / "signals.md").read_text() == render_signals_md(), "run `otel-grpo dashboards`"
    assert ("docs/signals.md", render_signals_md) in DOC_FILES


def test_every_signal_and_peer_name_is_documented_with_same_or_how_it_differs():
    text = render_signals_md()
    for s in catalog.SIGNALS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{s.key}`"))
        for peer in ("trl", "verl", "maxent"):
            name = getattr(s, peer)
            if name:
                how = s.difference(peer)
                assert (f"`{name}` same" in row) if how is None else (f"`{name}` differs: " in row), (s.key, peer)
    assert "1.083 pooled vs 1.048 averaged" in text and "population" in text


def test_dashboards_check_reports_a_stale_doc(root, tmp_path):
    # --check against a copy whose doc is out of date: exit 1 naming it
    for rel, render in DOC_FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(render() + "edited by hand\n")
    proc = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "dashboards", "--root", str(tmp_path), "--check"],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 1 and "docs/signals.md" in proc.stdout


def test_integrations_doc_lists_every_trl_key_and_needs_no_framework(root):
    code = ("import sys; from otel_grpo.generate._integrations_md import render_integrations_md; render_integrations_md(); "
            "print(sorted(m for m in ('trl', 'transformers', 'torch', 'otel_grpo.integrations') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.split() == ["[]"]
    text = render_integrations_md()
    assert all(f"| `{key}` | `{signal.name}` |" in text for key, signal in catalog.peer_names("trl"))
    assert (root / "docs" / "integrations.md").read_text() == text, "run `otel-grpo dashboards`"


def test_dashboards_help_names_every_generated_doc():
    # `otel-grpo dashboards --help` said it writes docs/signals.md and docs/integrations.md, not docs/alerts.md
    command = typer.main.get_command(app)
    help_text = command.get_command(click.Context(command), "dashboards").help
    assert [rel for rel, _ in DOC_FILES if rel not in help_text] == []

