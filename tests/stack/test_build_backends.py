"""scripts/build-backends.sh, the first thing `make test` and `make demo` run on a new machine
(`make demo` through scripts/demo-backends.py, which builds only the servers the machine lacks):
every target it names builds, a machine that has them all rebuilds nothing and says nothing, and
what Go prints goes to a log that a failed build names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from otel_grpo.stack._process import BINARIES, backend_versions, build_target, cache_name

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-backends.sh"
DEMO_SCRIPT = ROOT / "scripts" / "demo-backends.py"


def _run(cache: Path, *targets: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *targets], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OTEL_GRPO_BIN_CACHE": str(cache), **(env or {})})


def test_an_unknown_target_is_one_line_naming_every_target(tmp_path):
    out = _run(tmp_path, "grafana")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "build-backends: unknown target 'grafana' (prometheus promtool alertmanager amtool collector helm crds compose-go kube-score pod-security)"]


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
    assert not (tmp_path / "build-backends.log").exists()


def test_each_binary_has_its_own_target_and_make_demo_builds_only_the_servers_it_runs(tmp_path):
    listed = _run(tmp_path, "grafana").stderr.strip().rsplit("(", 1)[1].rstrip(")").split()
    assert set(listed) == {build_target(c) for c in BINARIES} | {"crds"}  # find_binary's hint names these
    out = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(ROOT), "demo-backends"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["scripts/demo-backends.py", "prometheus", "alertmanager"]


def _demo_backends(cache: Path, path: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEMO_SCRIPT)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "OTEL_GRPO_BIN_CACHE": str(cache), **(env or {})})


@pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None,
                    reason="needs Debian's prometheus and prometheus-alertmanager (make system-deps)")
def test_make_demo_runs_the_servers_the_machine_has_and_names_their_versions(tmp_path):
    """A fresh machine with Debian's packages starts the demo without a Go build; what it runs is named."""
    out = _demo_backends(tmp_path, os.environ["PATH"])
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert [line.split()[1] for line in lines] == ["prometheus", "alertmanager"]
    assert all("from PATH, not the pinned" in line and "(version unknown)" not in line for line in lines), lines
    assert not (tmp_path / "build-backends.log").exists()
    (tmp_path / cache_name("prometheus")).write_text("#!/bin/sh\n")
    (tmp_path / cache_name("prometheus")).chmod(0o755)
    out = _demo_backends(tmp_path, os.environ["PATH"])
    assert f"prometheus {backend_versions()['prometheus']} (pinned build" in out.stderr.splitlines()[0]


@pytest.mark.skipif(shutil.which("go") is None, reason="without Go the script only says so")
def test_make_demo_builds_the_servers_the_machine_lacks(tmp_path):
    """Neither built nor on PATH: both are built (here with Go offline, so the build fails at once, naming them)."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for entry in Path(d).glob("*") if Path(d).is_dir() else ():
            if "prometheus" not in entry.name and "alertmanager" not in entry.name and not (bin_dir / entry.name).exists():
                (bin_dir / entry.name).symlink_to(entry)
    offline = {"GOPROXY": "off", "GOMODCACHE": str(tmp_path / "mod"), "GOFLAGS": "-modcacherw"}
    out = _demo_backends(tmp_path / "bin", str(bin_dir), offline)
    assert out.returncode != 0
    assert out.stderr.startswith(f"build-backends: building prometheus-{backend_versions()['prometheus']} "
                                 f"alertmanager-{backend_versions()['alertmanager']} from their Go modules")


@pytest.mark.skipif(shutil.which("go") is None, reason="without Go the script only says so")
def test_a_failed_build_names_its_log_and_keeps_go_off_the_terminal(tmp_path):
    """Go's output (hundreds of `go: downloading` lines on a new machine) goes to the log; the terminal gets
    the banner, one line per binary and, on a failure, the log's name and its last lines. A build that
    cannot fetch its module (no proxy, an empty module cache) fails at once."""
    offline = {"GOPROXY": "off", "GOMODCACHE": str(tmp_path / "mod"), "GOFLAGS": "-modcacherw"}
    out = _run(tmp_path / "bin", "helm", "amtool", env=offline)
    log = tmp_path / "bin" / "build-backends.log"
    assert out.returncode != 0
    lines = out.stderr.splitlines()
    assert lines[0].startswith("build-backends: building helm-") and str(log) in lines[0]
    assert lines[2].startswith("build-backends: [1/2] helm-") and lines[2].endswith(" failed (exit 1)")
    assert lines[3] == f"build-backends: building helm-{backend_versions()['helm']} failed; Go's output is in {log}, ending:"
    assert all(line.startswith("  ") for line in lines[4:]) and "GOPROXY=off" in out.stderr
    assert "GOPROXY=off" in log.read_text() and not (tmp_path / "bin" / cache_name("helm")).exists()
