"""One managed child process: find its binary, start it with a log file, wait until ready, stop it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .._stop_request import StopRequest

# Built from their Go modules by scripts/build-backends.sh into the cache first (the
# versions compose pins); then the PATH, where Debian names them as below.
BINARIES = {
    "prometheus": ("prometheus", ("prometheus",)),
    "promtool": ("prometheus", ("promtool",)),
    "alertmanager": ("alertmanager", ("prometheus-alertmanager", "alertmanager")),
    "amtool": ("alertmanager", ("amtool",)),
    "otelcol": ("otelcol", ("otelcol-grpo", "otelcol-contrib")),
    "helm": ("helm", ("helm",)),
    "compose-config": ("compose-go", ("compose-config",)),
    "kube-score": ("kube-score", ("kube-score",)),
    "pod-security": ("pod-security-admission", ("pod-security",)),
}
_CACHE_NAME = {"otelcol": "otelcol-grpo"}
_BUILD_TARGET = {"otelcol": "collector", "compose-config": "compose-go"}
_BUILDER_CONFIG = Path(__file__).resolve().parents[2] / "collector" / "builder-config.yaml"


class StackError(RuntimeError):
    """A component is missing or failed to start; the message is one line for the user."""


def backend_versions() -> dict[str, str]:
    """The pinned versions (otel_grpo/stack/backends.yml): {"prometheus": "3.16.0", ...}."""
    text = (Path(__file__).with_name("backends.yml")).read_text()
    return {k.strip(): v.strip() for k, _, v in
            (line.partition(":") for line in text.splitlines() if line and not line.startswith("#"))}


def bin_cache() -> Path:
    """Where scripts/build-backends.sh puts the binaries (OTEL_GRPO_BIN_CACHE overrides)."""
    if os.environ.get("OTEL_GRPO_BIN_CACHE"):
        return Path(os.environ["OTEL_GRPO_BIN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "otel-grpo" / "bin"


def _collector_digest() -> str:
    """The digest scripts/build-backends.sh appends to the collector's cache name: its component list
    (builder-config.yaml without comment lines) decides which collector was built."""
    lines = _BUILDER_CONFIG.read_text().splitlines(keepends=True)
    return hashlib.sha256("".join(x for x in lines if not x.lstrip().startswith("#")).encode()).hexdigest()[:12]


def build_target(component: str) -> str:
    """The scripts/build-backends.sh target that builds a component (one target per binary)."""
    return _BUILD_TARGET.get(component, component)


def cache_name(component: str) -> str:
    """The file name of a component's pinned build in the cache (`prometheus-3.16.0`)."""
    package, _ = BINARIES[component]
    name = f"{_CACHE_NAME.get(component, component)}-{backend_versions()[package]}"
    return f"{name}-{_collector_digest()}" if package == "otelcol" else name


def cached_binary(component: str) -> Path | None:
    """The binary built for the pinned version, if scripts/build-backends.sh made it."""
    try:
        path = bin_cache() / cache_name(component)
    except OSError:  # an installed package without the repository's collector/ folder
        return None
    return path if os.access(path, os.X_OK) else None


def find_binary(component: str, *, pinned_only: bool = False) -> str:
    """Absolute path of a component's binary (the pinned build first), or StackError saying how to get it."""
    cached = cached_binary(component)
    if cached is not None:
        return str(cached)
    package, names = BINARIES[component]
    if not pinned_only:
        for name in names:
            path = shutil.which(name)
            if path:
                return path
    where = f"{bin_cache()}/{cache_name(component)}"
    if not pinned_only:
        where += f" nor any of {', '.join(names)} on PATH"
    raise StackError(f"{component}: not found: no {where}; "
                     f"`scripts/build-backends.sh {build_target(component)}` builds it (needs Go)")


def binary_version(path: str) -> str | None:
    """What `path --version` says its version is (`2.42.0+ds` for Debian's Prometheus), or None."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\bversion (\d\S*)", out.stdout + out.stderr)
    return found.group(1) if found else None


@dataclass(frozen=True, slots=True)
class Backend:
    """A backend binary the local stack runs: where it is, its version, and whether it is the pinned
    build (the version the tests run) or one found on PATH (Debian's Prometheus 2.42, say).

        Backend.find("prometheus")  # prometheus 3.16.0 (pinned build, ~/.cache/otel-grpo/bin/prometheus-3.16.0)
    """

    name: str
    path: str
    version: str | None
    pinned_version: str
    pinned: bool

    @classmethod
    def find(cls, component: str) -> Backend:
        """`find_binary`'s choice, described; StackError where there is none."""
        path, pinned = find_binary(component), cached_binary(component)
        version = backend_versions()[BINARIES[component][0]]
        if pinned is not None and path == str(pinned):
            return cls(component, path, version, version, True)
        return cls(component, path, binary_version(path), version, False)

    def __str__(self) -> str:
        home = str(Path.home()) + os.sep
        where = "~/" + self.path[len(home):] if self.path.startswith(home) else self.path
        if self.pinned:
            return f"{self.name} {self.version} (pinned build, {where})"
        return (f"{self.name} {self.version or '(version unknown)'} ({where} from PATH, not the pinned "
                f"{self.pinned_version} the rules are tested on: `scripts/build-backends.sh "
                f"{build_target(self.name)}` builds it)")


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM that arrive in the block take effect as it ends, through the handlers they
    had. Wrap a spawn and the line that keeps its `Popen`: an interrupt raised inside `Popen` (the
    child forked, its exec not yet confirmed) or just after it would leave a child running that
    nothing holds, so nothing stops."""
    held = (signal.SIGINT, signal.SIGTERM)
    # Python runs signal handlers in the main thread only: elsewhere nothing interrupts the block
    if threading.current_thread() is not threading.main_thread() or None in map(signal.getsignal, held):
        yield  # (None: a handler set outside Python, which cannot be put back)
        return
    caught: list[int] = []
    saved = {s: signal.signal(s, lambda signum, _: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)  # to the handler it had: KeyboardInterrupt, a StopRequest's, or the default


@dataclass(slots=True)
class Managed:
    """A child process with a readiness URL and a log file."""

    name: str
    argv: list[str]
    ready_url: str
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            # A new session: Ctrl-C in the terminal reaches only us, and we stop
            # children in order (Prometheus before Alertmanager before the sidecar).
            with interrupts_held():
                self.proc = subprocess.Popen(
                    self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**os.environ, **(self.env or {})}, start_new_session=True,
                )
        finally:
            log.close()

    def wait_ready(self, timeout_s: float, stop: StopRequest | None = None) -> None:
        """Poll the readiness URL until 200; fail early if the process exits, and with KeyboardInterrupt
        once `stop` is requested."""
        import httpx  # the [sidecar] extra, which `up` and `demo` require

        stop = StopRequest() if stop is None else stop  # None: a request that never comes
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                stop.check()
                if self.proc is not None and self.proc.poll() is not None:
                    raise StackError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
                try:
                    if client.get(self.ready_url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise StackError(f"{self.name} not ready at {self.ready_url} after {timeout_s:.0f}s: {self.log_tail()}")
                stop.wait(0.2)

    @contextmanager
    def running(self, timeout_s: float) -> Iterator[Managed]:
        """Started and ready for the block, stopped after it (also when it fails to get ready)."""
        self.start()
        try:
            self.wait_ready(timeout_s)
            yield self
        finally:
            self.stop()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after timeout_s; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) + f" (log: {self.log_path})"
