"""The command line as a user meets it: help texts and one readable line on bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_help_lists_every_command():
    out = run("--help")
    assert out.returncode == 0
    for command in ("train", "sidecar", "up", "demo", "dashboards", "version"):
        assert command in out.stdout


def test_sidecar_help_shows_its_defaults():
    out = run("sidecar", "--help")
    assert "127.0.0.1" in out.stdout and "8000" in out.stdout


@pytest.mark.parametrize(
    "args, env, names",
    [
        (["sidecar", "--port", "-5"], None, "port"),
        (["sidecar"], {"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": "lots"}, "max_body_bytes"),
        (["sidecar", "--db", "/proc/no-such-dir/s.db"], None, "/proc/no-such-dir/s.db"),  # was 69 lines
        (["sidecar", "--db", "/dev/null/s.db"], None, "/dev/null/s.db"),
        (["train", "--set", "grpo.epsilon_low=5"], None, "epsilon_low"),
        (["train", "--fault", "meltdown@3"], None, "meltdown"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(args, env, names):
    out = run(*args, env=env)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0], out.stderr
    assert "Traceback" not in out.stderr
