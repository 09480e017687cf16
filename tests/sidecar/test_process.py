"""A real sidecar process (uvicorn): SDK exporter round trips, malformed inputs, durability, schemathesis."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
JS = {"Content-Type": "application/json"}


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], list(children.get(pid, []))
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_sdk_exporter_round_trip_protobuf(sidecar_factory, db, otlp, compression):
    sidecar = sidecar_factory(db=db)
    exporter = OTLPSpanExporter(endpoint=sidecar.url + "/v1/traces", compression=compression, timeout=30)
    assert exporter.export(otlp.spans("sdk-run", range(3), samples=5)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    run = httpx.get(sidecar.url + "/api/runs").json()[0]
    assert (run["run_id"], run["last_step"], run["sample_count"]) == ("sdk-run", 2, 15)
    steps = httpx.get(sidecar.url + "/api/runs/sdk-run/steps").json()
    assert steps[1]["grpo.kl"] == 0.01 and "grpo.phase.duration/rollout" in steps[1]


@pytest.mark.parametrize("gzipped", [False, True])
def test_json_round_trip(sidecar, otlp, gzipped):
    body = otlp.to_json(otlp.request(otlp.spans("json-run", range(2), samples=3)))
    headers = {**JS, **({"Content-Encoding": "gzip"} if gzipped else {})}
    r = httpx.post(sidecar.url + "/v1/traces", content=gzip.compress(body) if gzipped else body, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json" and r.json() == {}
    samples = httpx.get(sidecar.url + "/api/runs/json-run/samples", params={"step_min": 0}).json()
    assert len(samples) == 6 and samples[0]["prompt"] == "prompt 0/0"


def test_malformed_requests_then_a_valid_one(sidecar_factory, otlp, tmp_path):
    proc = sidecar_factory(env={"OTEL_GRPO_SIDECAR_MAX_BODY_BYTES": str(256 * 1024)})
    url = proc.url + "/v1/traces"
    bomb = gzip.compress(b"\0" * (32 * 1024 * 1024))
    for body, headers, status in [
        (b"\x0a\xff", PB, 400), (b"{", JS, 400), (b"\x1f\x8bjunk", {**PB, "Content-Encoding": "gzip"}, 400),
        (bomb, {**PB, "Content-Encoding": "gzip"}, 413), (b"0" * (300 * 1024), PB, 413),
        (b"{}", {"Content-Type": "text/xml"}, 415), (b"{}", {}, 415), (b"{}", {**JS, "Content-Encoding": "zstd"}, 415),
    ]:
        assert httpx.post(url, content=body, headers=headers, timeout=30).status_code == status
        assert httpx.get(proc.url + "/healthz").status_code == 200
    valid = otlp.request(otlp.spans("ok-run", [0], samples=2)).SerializeToString()
    assert httpx.post(url, content=valid, headers=PB).status_code == 200
    assert httpx.get(proc.url + "/api/runs/ok-run/samples").json()[0]["prompt"] == "prompt 0/0"


def test_sigkill_right_after_200_loses_nothing(sidecar_factory, otlp, db):
    proc = sidecar_factory(db=db)
    for step in range(5):
        body = otlp.request(otlp.spans("durable", [step], samples=8)).SerializeToString()
        assert httpx.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 200
    workers = _descendants(proc.proc.pid)
    assert workers  # the default settings ingest in worker processes
    proc.kill()  # SIGKILL: no shutdown hooks, no checkpoint
    deadline = time.monotonic() + 60  # a bound on the wait, not an assertion on speed
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in workers)  # orphaned workers exit on their own
    again = sidecar_factory(db=db)
    run = httpx.get(again.url + "/api/runs").json()[0]
    assert (run["run_id"], run["last_step"], run["sample_count"]) == ("durable", 4, 40)
    assert len(httpx.get(again.url + "/api/runs/durable/steps").json()) == 5


def test_cli_flags_and_environment(sidecar_factory, tmp_path, otlp):
    proc = sidecar_factory(env={"OTEL_GRPO_SIDECAR_TOKEN": "t0k", "OTEL_GRPO_SIDECAR_READ_TOKEN": "r3ad"})
    body = otlp.request(otlp.spans("env", [0])).SerializeToString()
    assert httpx.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 401
    assert httpx.post(proc.url + "/v1/traces", content=body, headers={**PB, "Authorization": "Bearer t0k"}).status_code == 200
    assert httpx.get(proc.url + "/api/runs", headers={"Authorization": "Bearer r3ad"}).status_code == 200
    help_text = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "sidecar", "--help"], capture_output=True,
                               text=True, check=True).stdout
    for flag in ("--host", "--port", "--db", "--token", "--read-token"):
        assert flag in help_text


def test_schemathesis_finds_no_server_errors(sidecar_factory, db, otlp):
    sidecar = sidecar_factory(db=db)
    body = otlp.request(otlp.spans("run-a", range(3), samples=3)).SerializeToString()  # the schema's example
    assert httpx.post(sidecar.url + "/v1/traces", content=body, headers=PB).status_code == 200
    cli = shutil.which("schemathesis", path=str(__import__("pathlib").Path(sys.executable).parent))
    result = subprocess.run(
        [cli, "run", sidecar.url + "/openapi.json", "--checks", "not_a_server_error", "--max-examples", "25",
         "--seed", "1", "--workers", "1", "--phases", "examples,coverage,fuzzing", "--request-timeout", "30"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_environment_selects_postgres_and_a_bad_url_is_one_line_without_its_password(pg_url, otlp):
    from tests.sidecar.conftest import SidecarProcess

    proc = SidecarProcess(None, {"OTEL_GRPO_SIDECAR_DB": pg_url}).start()
    try:
        body = otlp.request(otlp.spans("env-pg", [0], samples=3)).SerializeToString()
        assert httpx.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 200
    finally:
        proc.stop()
    import psycopg

    with psycopg.connect(pg_url) as conn:  # it went to PostgreSQL, not to a file named like the URL
        assert conn.execute("SELECT sample_count FROM runs WHERE run_id = 'env-pg'").fetchone() == (3,)
    wrong = pg_url.replace(":secret@", ":n0t-the-password@")
    result = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "sidecar", "--db", wrong], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("otel-grpo sidecar: cannot open the sidecar database") and "n0t-the-password" not in result.stderr
