"""Fixtures for the sidecar tests: contract-shaped spans from the real OTel SDK, an in-process
app (TestClient), a real sidecar process (uvicorn) on a free port, and a real PostgreSQL
server: `db` runs a test on each backend (an SQLite path, then a fresh PostgreSQL database)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_grpo.sidecar import SidecarSettings, create_app
from tests._support import postgres

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("rollout", "reward", "update")


def grpo_spans(run_id: str = "run-a", steps=range(3), samples: int = 4, completion=None, resource_run: bool = True,
               extra=None, metrics=None, attempt=None, writer_attempt=None, first_index: int = 0):
    """Finished SDK spans exactly as the telemetry layer writes them (the span contract); `attempt`: their
    `grpo.attempt` (none by default, as a sender before attempts); `writer_attempt`: their `grpo.writer_attempt`
    instead (records that claim no attempt: an evaluation's, another rank's); `first_index`: the sample index of
    each step's first sample (another sender's rows: other indices)."""
    tag = {} if attempt is None else {"grpo.attempt": attempt}
    if writer_attempt is not None:
        tag["grpo.writer_attempt"] = writer_attempt
    exporter = InMemorySpanExporter()
    attrs = {"service.name": "trainer", "grpo.model": "tiny", "host.name": "h", "grpo.rank": 0}
    if resource_run:
        attrs["grpo.run_id"] = run_id
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("otel_grpo.telemetry")
    for step in steps:
        with tracer.start_as_current_span("grpo.step", attributes={"grpo.run_id": run_id, "grpo.step": step,
                                                                  **tag}) as span:
            for phase in PHASES:
                with tracer.start_as_current_span(f"grpo.phase.{phase}", attributes={"grpo.phase": phase, **tag}):
                    pass
            with tracer.start_as_current_span("grpo.samples", attributes={"grpo.run_id": run_id, "grpo.step": step,
                                                                         **tag}) as s:
                for i in range(samples):
                    s.add_event("grpo.sample", attributes={
                        "prompt": f"prompt {step}/{i}",
                        "completion": completion(step, i) if completion else f"answer {i} of step {step}",
                        "reward": float(i) / 2, "reward.format": float(i % 2), "advantage": i - 1.5,
                        "completion_length": 10.0 + i, "sample_index": first_index + i, "selection": "top",
                        "truncated": i == 3, "completion_original_length": 100 + i,
                        **(extra(step, i) if extra else {}),
                    })
            with tracer.start_as_current_span("unrelated.span"):
                pass
            span.set_attributes({
                "grpo.metric.kl": 0.01 * step, "grpo.metric.reward": 0.5 + step,
                "grpo.metric.clip_ratio_low_mean": 0.1, "grpo.metric.reward_fn_mean/format": 0.25,
                "grpo.metric.rollout_is_mean": 1.0, "grpo.metric.rollout_is_eff_sample_size": 0.9 - 0.01 * step,
                "grpo.metric.rollout_is_min": 0.7, "grpo.metric.rollout_is_max": 1.4 + 0.1 * step,
                "grpo.metric.reward_p05": step * 0.8, "grpo.metric.reward_p95": 1.0 + step * 1.2,
                "grpo.metric.mismatch_kl": 0.001 * (step % 3), "grpo.metric.clip_ratio_high_mean": 0.05,
                "grpo.metric.completion_length_mean": 120.0 + step, "grpo.metric.completions_clipped_ratio": 0.1,
            })
            if metrics:  # a test's own step scalars (catalog keys), over the defaults above
                span.set_attributes({f"grpo.metric.{k}": v for k, v in metrics(step).items()})
    provider.shutdown()
    return exporter.get_finished_spans()


def request_pb(spans):
    return encode_spans(spans)


def to_otlp_json(message) -> bytes:
    """OTLP/JSON: protobuf's JSON mapping with trace and span ids as hex, as the spec says."""
    doc = json_format.MessageToDict(message)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    import json
    return json.dumps(doc).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SidecarProcess:
    """`otel-grpo sidecar` as a real subprocess; start() waits until /readyz answers 200."""

    def __init__(self, db: Path | str | None, env: dict[str, str] | None = None, ready: str = "/readyz",
                 log: Path | None = None) -> None:
        self.db = db
        self.env = env or {}
        self.ready = ready  # the path that must answer 200 (/healthz where /readyz is meant to say 503)
        self.log = log  # the process's stderr goes here when given
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "SidecarProcess":
        self.port = self.port or free_port()  # a restart keeps its port, as a restarted service does
        cmd = [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--port", str(self.port), "--log-level", "warning",
               *(["--db", str(self.db)] if self.db is not None else [])]  # None: the environment says
        stderr = open(self.log, "ab") if self.log else None  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **self.env}, stderr=stderr)
        if stderr:
            stderr.close()
        deadline = time.monotonic() + 180  # a bound on start-up (a loaded CI machine), not on speed
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "sidecar exited during start-up"
            try:
                if httpx.get(self.url + self.ready, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("sidecar did not become ready")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL server for the session; each test gets a database of its own."""
    reason = postgres.available()
    if reason:
        pytest.skip(reason)
    server = postgres.PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture
def server():
    """A PostgreSQL server of the test's own: the tests stop, kill, reconfigure its processes. Its WAL writer is
    lazy (10 s rather than 0.2 s), so an acknowledged commit that only reached its buffers (synchronous_commit =
    off) is lost to a crash restart, not only sometimes."""
    reason = postgres.available()
    if reason:
        pytest.skip(reason)
    server = postgres.PostgresServer.start(settings="-c wal_writer_delay=10000")
    yield server
    server.thaw()  # a failed test must not leave it stopped: stop() needs it to answer
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    return pg_server.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    """Where the test's store lives: an SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "sidecar.db"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def otlp():
    return SimpleNamespace(spans=grpo_spans, request=request_pb, to_json=to_otlp_json)


@pytest.fixture
def settings(db) -> SidecarSettings:
    return SidecarSettings(db=db)


@pytest.fixture
def make_client(db):
    clients = []

    def make(**overrides) -> TestClient:
        s = SidecarSettings(**{"db": db, **overrides})
        client = TestClient(create_app(s))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()


@pytest.fixture
def sidecar_factory(tmp_path):
    procs: list[SidecarProcess] = []

    def make(db: Path | str | None = None, env: dict[str, str] | None = None, **kw) -> SidecarProcess:
        proc = SidecarProcess(db or tmp_path / "proc.db", env, **kw)
        procs.append(proc)
        return proc.start()

    yield make
    for proc in procs:
        proc.stop()


@pytest.fixture
def sidecar(sidecar_factory, db) -> SidecarProcess:
    """A sidecar process on each backend (the web page's and the process tests run on both)."""
    return sidecar_factory(db=db)
