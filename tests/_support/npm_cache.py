"""npm packages the tests run (axe-core, Grafana's schema with TypeScript), installed once per machine.

    modules = npm_packages("axe-core-4.10.3", "axe-core@4.10.3")   # .../otel-grpo/<name>/node_modules

Pinned versions go into a cache outside the repository (`$XDG_CACHE_HOME/otel-grpo/<name>`, as the Go
backends do); without npm the test skips, saying what it needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def npm_packages(name: str, *packages: str, needs: str = "npm") -> Path:
    """The `node_modules` folder holding `packages` (each `<package>@<version>`), installed on first use."""
    if any(shutil.which(tool) is None for tool in needs.split()):
        pytest.skip(f"{needs} needed to install {', '.join(packages)} (node 20)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-grpo" / name
    done = cache / ".installed"
    if not done.exists():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "package.json").write_text('{"private": true}\n')
        out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *packages], cwd=cache,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        done.write_text(" ".join(packages) + "\n")
    return cache / "node_modules"
