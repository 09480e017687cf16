"""docs/signals.md and docs/integrations.md are generated from the catalog: committed = regenerated, every signal
and peer name in them; `otel-grpo dashboards --help` names them. And what the README and the docs tell a reader
to type exists: every `OTEL_GRPO_*` variable, every `otel-grpo <command> --flag`, every sidecar route and query
parameter."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import typer.main
from pydantic import AliasChoices

from otel_grpo import catalog
from otel_grpo.cli._app import app
from otel_grpo.sidecar._app import create_app
from otel_grpo.sidecar._settings import SidecarSettings
from otel_grpo.telemetry import TelemetrySettings
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


def _doc_texts(root) -> dict[str, str]:
    return {p: (root / p).read_text() for p in ["README.md", *sorted(f"docs/{f.name}" for f in (root / "docs").glob("*.md"))]}


def _setting_variables(cls) -> set[str]:
    """Every environment name a pydantic-settings class reads: prefix + field, and each alias."""
    names = set()
    for field, info in cls.model_fields.items():
        names.add(cls.model_config["env_prefix"] + field.upper())
        alias = info.validation_alias
        names |= {a.upper() for a in (alias.choices if isinstance(alias, AliasChoices) else [alias]) if isinstance(a, str)}
    return names


def test_every_variable_flag_and_sidecar_route_the_docs_name_exists(root, tmp_path):
    """A reader copies these names from the docs into a shell or a job spec; a stale one does nothing or fails there."""
    docs = _doc_texts(root)
    command = typer.main.get_command(app)
    ctx = click.Context(command)
    commands = {name: command.get_command(ctx, name) for name in command.list_commands(ctx)}
    flags = {name: {o for p in c.params for o in [*p.opts, *p.secondary_opts]} for name, c in commands.items()}
    cli_variables = {v for c in commands.values() for p in c.params
                     for v in ([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])}
    # the stack's own: read by os.environ in the package, or interpolated by compose, the collector, the scripts
    elsewhere = [*(root / "otel_grpo").rglob("*.py"), root / "docker-compose.yml", root / "collector/config.yaml",
                 *(root / "scripts").iterdir()]
    read = {m for f in elsewhere if f.is_file()
            for m in re.findall(r"environ(?:\.get)?[\[(]\"(OTEL_GRPO_\w+)|\$\{(?:env:)?(OTEL_GRPO_\w+)", f.read_text())}
    variables = (_setting_variables(TelemetrySettings) | _setting_variables(SidecarSettings) | cli_variables
                 | {name for pair in read for name in pair if name})

    spec = create_app(SidecarSettings(db=tmp_path / "s.db", ingest_workers=0)).openapi()["paths"]
    routes = [(re.compile("^" + re.sub(r"\\\{\w+\\\}", "[^?]+", re.escape(path)) + "$"),
               {q["name"] for op in ops.values() for q in op.get("parameters", [])}) for path, ops in spec.items()]

    wrong, checked = [], 0
    for page, text in docs.items():
        for name in set(re.findall(r"\bOTEL_GRPO_[A-Z0-9_]*[A-Z0-9]\b", text)):
            checked += 1
            if name not in variables:
                wrong.append(f"{page}: {name} is no setting")
        # `otel-grpo <command> ...--flag` in a code span or a fenced line (a table cell's `[--a] [--b]` too)
        spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        spans += [line for block in re.findall(r"```.*?```", text, re.S) for line in block.splitlines()]
        for span in spans:
            for m in re.finditer(r"(?:otel-grpo|-m otel_grpo\.cli) (\w+)((?:(?!otel-grpo).)*)", span):
                if m.group(1) not in commands:  # prose ("in the otel-grpo checkout") unless it opens the line
                    if re.match(r"\s*(?:\S*/)?otel-grpo ", span[:m.end(1)]):
                        wrong.append(f"{page}: no command `otel-grpo {m.group(1)}`")
                    continue
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m.group(2)):
                    checked += 1
                    if flag not in flags[m.group(1)]:
                        wrong.append(f"{page}: `otel-grpo {m.group(1)}` has no {flag}")
        # the sidecar's routes, bare or on its port; Prometheus's and Alertmanager's /api/v1, /api/v2 are theirs
        for m in re.finditer(r"(?:(?<=:8000)|(?<![\w.:/]))(/api/(?!v\d/)[^\s`)\"'\],?]*|/v1/traces|/healthz|/readyz)"
                             r"(\?[^\s`)\"'\]]*)?", text):
            path = re.sub(r"<[^>]*>|\{[^}]*\}", "x", m.group(1)).rstrip(".:;")
            params = [p for rx, ps in routes if rx.match(path) for p in ps]
            checked += 1
            if not any(rx.match(path) for rx, _ in routes):
                wrong.append(f"{page}: no sidecar route {m.group(0)}")
            wrong += [f"{page}: {m.group(0)} has no parameter {q}" for q in re.findall(r"[?&](\w+)=", m.group(2) or "")
                      if q not in params]
    assert checked > 100 and wrong == [], wrong
