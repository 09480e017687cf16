"""Every connection slot of the PostgreSQL server taken by other clients (max_connections reached: "FATAL: sorry,
too many clients already"), after the sidecar's sessions ended (a restart of the server or of the sidecar, a
failover, an administrator): it cannot connect until they let go.

Reads, ingest and /readyz answer 503 within the bound and say why in words (they said "OperationalError", libpq's
message being hidden for the host and port it names); the log says it once per process (psycopg_pool logged a
warning per connection attempt: 42 in 20 s); once the slots are free, everything answers 200 by itself.
"""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from tests._support import postgres
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
SLOTS = 20


@pytest.fixture
def small_server():
    reason = postgres.available()
    if reason:
        pytest.skip(reason)
    server = postgres.PostgresServer.start(settings=f"-c max_connections={SLOTS}")
    yield server
    server.stop()


def _take_every_slot(server, url: str) -> list[psycopg.Connection]:
    """End the sidecar's sessions and hold every slot of the server; the connections holding them."""
    held = [psycopg.connect(server.url())]
    held[0].execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                    "'otel-grpo-sidecar'")
    held[0].commit()
    while True:
        try:
            held.append(psycopg.connect(url, connect_timeout=5))
        except psycopg.OperationalError as exc:
            assert "too many clients" in str(exc), exc
            return held


@pytest.mark.parametrize("workers", ["0", "2"])
def test_every_slot_taken_is_a_readable_503_logged_once_and_passes_by_itself(sidecar_factory, small_server, otlp,
                                                                             tmp_path, workers):
    url = small_server.new_database()
    log = tmp_path / "sidecar.log"
    proc = sidecar_factory(db=url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2",
                                        "OTEL_GRPO_SIDECAR_INGEST_WORKERS": workers}, log=log)
    http = httpx.Client(timeout=30)

    def ingest(step: int) -> httpx.Response:
        body = otlp.request(otlp.spans("slots", [step], samples=4)).SerializeToString()
        return http.post(proc.url + "/v1/traces", content=body, headers=PB)

    assert ingest(0).status_code == 200 and http.get(proc.url + "/api/runs/slots/samples").status_code == 200
    held = _take_every_slot(small_server, url)
    try:
        answers = []
        for step in range(1, 5):
            for request in (lambda: ingest(step), lambda: http.get(proc.url + "/api/runs/slots/samples"),
                            lambda: http.get(proc.url + "/api/runs"), lambda: http.get(proc.url + "/readyz")):
                start = time.monotonic()
                answer = request()
                answers.append((answer.request.url.path, answer.status_code, round(time.monotonic() - start, 2),
                                answer.headers.get("Retry-After"), answer.content[:240]))
    finally:
        for conn in held:
            conn.close()
    print("slots taken:", answers)
    assert all(status == 503 for _, status, *_ in answers), answers
    assert all(retry == "1" for path, _, _, retry, _ in answers if path != "/readyz"), answers
    assert max(took for _, _, took, _, _ in answers) < 2 + 1.5, answers  # the bound: DB_TIMEOUT_S is 2 s
    assert all(b"every connection slot is taken" in body and b"127.0.0.1" not in body for *_, body in answers), answers

    wait_for(lambda: http.get(proc.url + "/readyz").status_code == 200, "/readyz 200 once the slots are free", 30)
    assert ingest(9).status_code == 200 and http.get(proc.url + "/api/runs/slots/samples").status_code == 200
    http.close()
    proc.stop()
    lines = log.read_text().splitlines()
    said = [line for line in lines if "the sidecar cannot connect" in line]
    assert 1 <= len(said) <= 1 + int(workers), lines  # once per process that met it (ingest workers too)
    assert "too many clients" in said[0]
    assert any("takes the sidecar's connections again" in line for line in lines), lines
    noise = [line for line in lines if any(s in line for s in ("error connecting", "reconnection attempt"))]
    assert not noise, noise
