"""Fixtures for the stack tests: real Prometheus / Alertmanager processes on free ports."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import httpx
import pytest

from otel_grpo.stack._process import Managed

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not on PATH (apt-get install prometheus prometheus-alertmanager)")
    return path


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
    d = tmp_path_factory.mktemp("prom")
    (d / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    proc = Managed("prometheus", [binary, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                   f"http://127.0.0.1:{port}/-/ready", d / "prometheus.log")
    proc.start()
    try:
        proc.wait_ready(60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


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
