"""Fixtures for `otel-grpo follow`: verl's wheel (outside the venv), a verl-like writer process, a real
sidecar, a real Prometheus scraping the follower, and the follower as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests._support.verl_source import verl_site
from tests.sidecar.conftest import SidecarProcess, free_port
from tests.stack.conftest import need, serve_prometheus

ROOT = Path(__file__).resolve().parents[3]
WRITER = Path(__file__).with_name("verl_writer.py")


@pytest.fixture(autouse=True)
def _runs_shut_down():
    """The in-process `Run`s of a test end with it (an open one would be ended by the exit hook, with its
    warning about a forgotten finish())."""
    yield
    from .test_files import Run

    while Run.made:
        Run.made.pop().shutdown()


@pytest.fixture(scope="session")
def verl() -> Path:
    return verl_site()


class Writer:
    """verl_writer.py as another process: verl's own FileLogger appending while we follow; `tag`: the
    attempt's mark on its completions and scores (verl_writer.py)."""

    def __init__(self, verl: Path, metrics: Path, rollouts: Path | None, last: int, *, first: int = 1,
                 delay: float = 0.0, pause_after: int | None = None, tag: str = "") -> None:
        self.go = metrics.with_suffix(".go")
        argv = [sys.executable, str(WRITER), str(verl), str(metrics), str(rollouts or "-"), str(first), str(last),
                str(delay)]
        if pause_after is not None:
            argv += [str(pause_after), str(self.go)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env={**os.environ, "VERL_WRITER_TAG": tag})

    def resume(self) -> None:
        self.go.touch()

    def wait(self) -> None:
        assert self.proc.wait(timeout=120) == 0


class FollowProcess:
    """`otel-grpo follow ...` with traces to the sidecar and a Prometheus endpoint on `metrics_port`."""

    def __init__(self, args: list[str], sidecar_url: str, metrics_port: int, log: Path) -> None:
        env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "prometheus", "OTEL_GRPO_PROMETHEUS_PORT": str(metrics_port),
               "OTEL_GRPO_PROMETHEUS_HOST": "127.0.0.1", "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{sidecar_url}/v1/traces", "OTEL_BSP_SCHEDULE_DELAY": "200"}
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "follow", *args], cwd=ROOT, env=env,
                                     stdout=subprocess.DEVNULL, stderr=open(log, "ab"))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)

    def stop_if_running(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def sidecar(tmp_path):
    proc = SidecarProcess(tmp_path / "sidecar.db", {"OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"}).start()
    yield proc
    proc.stop()


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping the follower's endpoint every second; yields (api url, follower port)."""
    binary = need("prometheus")
    target = free_port()
    d = tmp_path / "prom"
    d.mkdir()
    config = ("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: follow\n"
              f"    static_configs:\n      - targets: ['127.0.0.1:{target}']\n")
    with serve_prometheus(binary, d, config) as url:
        yield url, target


def prom_query(url: str, query: str) -> list[dict]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]["result"]
