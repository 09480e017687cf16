"""scripts/build-backends.sh, the first thing `make test` and `make demo` run on a new machine
(`make test` beside the suite through scripts/test.sh, `make demo` through scripts/demo-backends.py,
which builds only the servers the machine lacks): every target it names builds, a machine that has
them all rebuilds nothing and says nothing, a binary being built is waited for and not built twice,
and what Go prints goes to a log per binary that a failed build names."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
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
    assert not (tmp_path / "logs").exists()
    assert _run(tmp_path, "--missing").stdout == ""


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
    assert not (tmp_path / "logs").exists()
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
    log = tmp_path / "bin" / "logs" / f"{cache_name('helm')}.log"
    assert out.returncode != 0
    lines = out.stderr.splitlines()
    assert lines[0].startswith("build-backends: building helm-") and f"{log.parent}/<name>.log" in lines[0]
    assert lines[2].startswith("build-backends: [1/2] helm-") and lines[2].endswith(" failed (exit 1)")
    assert lines[3] == f"build-backends: building helm-{backend_versions()['helm']} failed; Go's output is in {log}, ending:"
    assert all(line.startswith("  ") for line in lines[4:]) and "GOPROXY=off" in out.stderr
    assert "GOPROXY=off" in log.read_text() and not (tmp_path / "bin" / cache_name("helm")).exists()


OFFLINE = {"GOPROXY": "off", "GOFLAGS": "-modcacherw"}
"""With an empty module cache (GOMODCACHE) a build fails at once: a run that builds anything shows it."""


@pytest.mark.skipif(shutil.which("go") is None, reason="without Go the script only says so")
def test_a_binary_being_built_by_another_run_is_waited_for_and_not_built_again(tmp_path):
    """`make test` builds every backend while each test asks for the one it needs: the test's run waits for
    the build under way (its lock) and then uses what it built."""
    cache, name = tmp_path / "bin", cache_name("helm")
    cache.mkdir()
    env = {**os.environ, "OTEL_GRPO_BIN_CACHE": str(cache), "GOMODCACHE": str(tmp_path / "mod"), **OFFLINE}
    with open(cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other run, building helm
        waiting = subprocess.Popen(["bash", str(SCRIPT), "helm"], stderr=subprocess.PIPE, text=True, env=env)
        said = [waiting.stderr.readline() for _ in range(3)]
        assert said[2] == f"build-backends: {name} is being built by another run; waiting for it\n", said
        time.sleep(0.5)
        assert waiting.poll() is None
        (cache / name).write_text("#!/bin/sh\n")  # what the other run built
        (cache / name).chmod(0o755)
    assert waiting.wait(timeout=60) == 0, waiting.stderr.read()
    assert waiting.stderr.read() == "" and not (cache / "logs" / f"{name}.log").exists()  # it built nothing


def test_a_stopped_build_says_stopped_and_leaves_no_work_directory(tmp_path):
    """A build stopped by a signal (the suite ended, or a Ctrl-C) is not a failure: its line ends "stopped", with no
    failure report, and its work directory is removed. A `go` that never ends stands in for a long build."""
    cache, work, fake = tmp_path / "bin", tmp_path / "tmp", tmp_path / "fake"
    for folder in (cache, work, fake):
        folder.mkdir()
    (fake / "go").write_text(f"#!/bin/sh\ntouch {fake / 'running'}\nexec sleep 60\n")
    (fake / "go").chmod(0o755)
    env = {**os.environ, "OTEL_GRPO_BIN_CACHE": str(cache), "TMPDIR": str(work), "PATH": f"{fake}:{os.environ['PATH']}"}
    build = subprocess.Popen(["bash", str(SCRIPT), "helm"], stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    log = cache / "logs" / f"{cache_name('helm')}.log"
    deadline = time.monotonic() + 30
    # The build under way, its `go` started: a TERM before that reaches no `go`, and bash waits for the one it
    # starts next (60 s) before its trap runs.
    while not (log.exists() and log.read_text().startswith("==== ") and (fake / "running").exists()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(work.iterdir())  # the build's work directory
    os.killpg(build.pid, signal.SIGTERM)
    assert build.wait(timeout=30) == 143
    said = build.stderr.read()
    assert said.splitlines()[-1].startswith(f"build-backends: [1/1] {cache_name('helm')} (go install ")
    assert said.endswith(") ... stopped\n"), said
    assert "failed" not in said and list(work.iterdir()) == []


def _processes_with(text: str) -> list[int]:
    """The processes whose environment holds `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


@pytest.mark.skipif(shutil.which("go") is None, reason="without Go nothing is built beside the suite")
def test_make_test_builds_what_is_missing_beside_the_suite_and_stops_the_builds_with_it(tmp_path):
    """scripts/test.sh starts the builds, tells the suite they are under way (its order), runs the suite and stops
    the builds when it ends, with every process they started, also one slow to stop (a linker on a loaded machine:
    CI once found one still running as the suite ended)."""
    cache = tmp_path / "bin"
    cache.mkdir()
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "flock").write_text(  # the builds wait in it; it leaves a child that takes a second to stop, as `go` its compiler
        f"#!/bin/bash\nbash -c \"trap 'sleep 1; exit 143' TERM; sleep 60 & wait\" &\nexec {shutil.which('flock')} \"$@\"\n")
    (slow / "flock").chmod(0o755)
    env = {**os.environ, "OTEL_GRPO_BIN_CACHE": str(cache), "GOMODCACHE": str(tmp_path / "mod"), **OFFLINE,
           "PATH": f"{slow}:{os.environ['PATH']}"}
    env.pop("OTEL_GRPO_BACKENDS_BUILDING", None)
    progress = tmp_path / "backends.log"
    suite = "import os, time; time.sleep(1); print(os.environ.get('OTEL_GRPO_BACKENDS_BUILDING'))"
    with open(cache / f".{cache_name('prometheus')}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the builds' first binary: they wait there until stopped
        out = subprocess.run(["bash", str(ROOT / "scripts/test.sh"), str(progress), sys.executable, "-c", suite],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "1\n"
        assert out.stderr == f"make test: building {len(BINARIES) + 1} backends beside the tests (progress: {progress})\n"
        assert "prometheus-3" in progress.read_text() and "waiting for it" in progress.read_text()
        assert "failed" not in progress.read_text()  # stopped, not failed
        assert _processes_with(str(cache)) == []  # stopped, though still waiting
    env["OTEL_GRPO_BIN_CACHE"] = str(tmp_path)  # nothing missing: nothing is built, and the suite's order is its own
    for binary in map(cache_name, BINARIES):
        (tmp_path / binary).write_text("#!/bin/sh\n")
        (tmp_path / binary).chmod(0o755)
    (tmp_path / f"prometheus-operator-crds-{backend_versions()['prometheus-operator']}").mkdir()
    out = subprocess.run(["bash", str(ROOT / "scripts/test.sh"), str(progress), sys.executable, "-c",
                          suite + "; raise SystemExit(3)"], capture_output=True, text=True, timeout=60, env=env)
    assert (out.returncode, out.stdout, out.stderr) == (3, "None\n", "")  # the suite's status
