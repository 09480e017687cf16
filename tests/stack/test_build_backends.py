"""scripts/build-backends.sh, the first thing `make test` and `make demo` run on a new machine:
every target it names builds, and a machine that has them all rebuilds nothing and says nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from otel_grpo.stack._process import BINARIES, backend_versions, cache_name

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-backends.sh"


def _run(cache: Path, *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *targets], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OTEL_GRPO_BIN_CACHE": str(cache)})


def test_an_unknown_target_is_one_line_naming_every_target(tmp_path):
    out = _run(tmp_path, "grafana")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "build-backends: unknown target 'grafana' (prometheus alertmanager collector helm crds compose-go)"]


@pytest.mark.skipif(shutil.which("go") is None, reason="without Go the script only says so")
def test_a_machine_that_has_every_build_rebuilds_nothing_and_says_nothing(tmp_path):
    """The default run (no target) accepts each of its own targets and finds each build by the name the
    tests look it up under (a renamed build would be rebuilt on every `make test`)."""
    for name in map(cache_name, BINARIES):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    (tmp_path / f"prometheus-operator-crds-{backend_versions()['prometheus-operator']}").mkdir()
    out = _run(tmp_path)
    assert (out.returncode, out.stderr) == (0, "")
