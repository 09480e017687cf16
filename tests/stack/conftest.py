"""Fixtures for the stack tests: real Prometheus / Alertmanager processes on free ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from otel_grpo.stack import LocalStack, RuleSettings, StackSettings
from otel_grpo.stack._process import Managed, StackError, build_target, find_binary

ROOT = Path(__file__).resolve().parents[2]


_ISSUED: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before in this session (a stack takes several at once,
    and the kernel may offer a just-released port again)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ISSUED:
            _ISSUED.add(port)
            return port


def need(component: str) -> str:
    """The pinned build of a backend (scripts/build-backends.sh), built now if Go is there (or waited for, where
    `make test` is building it beside the suite: the script's lock for that binary).

    The rules rely on Prometheus 3 semantics (left-open ranges, normalized `le`), so
    older binaries on PATH (Debian's 2.42) are not used: without Go, the test skips.
    """
    try:
        return find_binary(component, pinned_only=True)
    except StackError as missing:
        if shutil.which("go") is None:
            pytest.skip(f"{missing} (Go is not installed)")
    out = subprocess.run([str(ROOT / "scripts/build-backends.sh"), build_target(component)], capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    return find_binary(component, pinned_only=True)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def free_port_factory():
    return free_port


@pytest.fixture(scope="module")
def prometheus_api(tmp_path_factory) -> str:
    """A bare Prometheus (no targets, no rules): PromQL is parsed and run, nothing else."""
    binary = need("prometheus")
    with serve_prometheus(binary, tmp_path_factory.mktemp("prom"), "global:\n  scrape_interval: 1m\n") as url:
        yield url


@contextmanager
def serve_prometheus(binary: str, d: Path, config: str) -> Iterator[str]:
    """A real Prometheus on a free port, serving `config` (YAML) with its data under `d`; yields its URL."""
    (d / "prometheus.yml").write_text(config)
    port = free_port()
    proc = Managed("prometheus", [binary, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                   f"http://127.0.0.1:{port}/-/ready", d / "prometheus.log")
    with proc.running(60):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def http() -> httpx.Client:
    with httpx.Client(timeout=10.0) as client:
        yield client


@pytest.fixture(scope="session")
def promtool() -> str:
    return need("promtool")


@pytest.fixture(scope="session")
def amtool() -> str:
    return need("amtool")


@pytest.fixture(scope="session")
def otelcol() -> str:
    return need("otelcol")


@pytest.fixture(scope="session")
def helm() -> str:
    return need("helm")


@pytest.fixture(scope="session")
def kube_score() -> str:
    return need("kube-score")


@pytest.fixture(scope="session")
def pod_security() -> str:
    return need("pod-security")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return need("prometheus")


@pytest.fixture(scope="session")
def alertmanager_bin() -> str:
    return need("alertmanager")


@pytest.fixture(scope="module")
def stack(request, tmp_path_factory, free_port_factory):
    """`otel-grpo up`'s stack (local-mode rules, 1 s scrapes) on free ports, one per test module; a module's
    `STACK_RULES` replace the rules (local mode's with per-run overrides, as a user sets them)."""
    ports = {k: free_port_factory() for k in ("sidecar_port", "prometheus_port", "alertmanager_port",
                                              "trainer_metrics_port")}
    rules = getattr(request.module, "STACK_RULES", None) or RuleSettings.fast()
    with LocalStack(StackSettings(dir=tmp_path_factory.mktemp("stack"), rules=rules, **ports)) as s:
        yield s


def scraped_process(code: str, settings: StackSettings, out: Path, env: dict[str, str] | None = None
                    ) -> subprocess.Popen:
    """A Python process running `code` whose telemetry serves `/metrics` where the local Prometheus scrapes the
    trainer (no OTel variables of ours leak in; `env` adds to its environment, or replaces: its traces' exporter)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full.update(OTEL_GRPO_METRICS_EXPORTERS="prometheus", OTEL_GRPO_TRACES_EXPORTERS="none",
                OTEL_GRPO_PROMETHEUS_PORT=str(settings.trainer_metrics_port), OTEL_GRPO_OUTPUT_DIR=str(out))
    full.update(env or {})
    return subprocess.Popen([sys.executable, "-c", code], env=full, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
