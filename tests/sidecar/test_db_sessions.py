"""PostgreSQL ending the sidecar's sessions under it, against real sidecar processes over HTTP.

Terminated (`pg_terminate_backend`, as a DBA, a PgBouncer restart, a failover or an idle timeout does): the
next request that took such a pooled connection answered 503 ("AdminShutdown") though the server was fine.
Now every request after it succeeds, on both replicas of one database, ingest included. A stopped server is
still a 503 within the bound, saying why. A rotated password (`ALTER ROLE ... PASSWORD`): every 503 and
/readyz read "OperationalError" (reads: "no database connection free ... all 8 busy"), and the log had a
warning per request and per connection attempt; now they say "authentication failed", the log says it once,
and the sidecar takes requests again by itself once the password is set back.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests._support import postgres
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
READS = ("/api/runs", "/api/runs/r/steps", "/api/steps?run_id=r", "/api/runs/r/samples?step=0", "/api/runs/r")


def _terminate(url: str) -> int:
    """Ends every session of the sidecars on `url`'s database; how many."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s "
                            "AND application_name = 'otel-grpo-sidecar'", (name,)).fetchone()[0]


class Client:
    def __init__(self, url: str, otlp) -> None:
        self.url = url
        self.otlp = otlp
        self.http = httpx.Client(timeout=30)

    def post(self, step: int) -> httpx.Response:
        body = self.otlp.request(self.otlp.spans("r", [step], samples=4)).SerializeToString()
        return self.http.post(self.url + "/v1/traces", content=body, headers=PB)

    def get(self, path: str) -> httpx.Response:
        return self.http.get(self.url + path)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_every_request_after_the_sessions_are_terminated_succeeds(sidecar_factory, pg_url, otlp, workers):
    env = {"OTEL_GRPO_SIDECAR_INGEST_WORKERS": workers}
    replicas = [Client(sidecar_factory(db=pg_url, env=env).url, otlp) for _ in range(2)]
    assert replicas[0].post(0).status_code == 200
    with ThreadPoolExecutor(8) as threads:  # several pooled connections in each replica, idle afterwards
        assert {r.status_code for r in threads.map(lambda i: replicas[i % 2].get(READS[i % 5]), range(40))} == {200}

    answers: list[tuple[str, int, str]] = []
    for round_, idle_s in enumerate((0.0, 0.0, 1.5)):  # 1.5: past the pool's old idle check
        assert _terminate(pg_url) >= 4
        time.sleep(idle_s)
        for replica in replicas:
            for path in READS:
                r = replica.get(path)
                answers.append((path, r.status_code, r.text[:80]))
            r = replica.post(round_ + 1)
            answers.append(("/v1/traces", r.status_code, r.text[:80]))
            r = replica.get("/readyz")
            answers.append(("/readyz", r.status_code, r.text[:80]))
    assert _terminate(pg_url) >= 4
    with ThreadPoolExecutor(8) as threads:  # many requests at once, each on a terminated connection or after one
        answers += threads.map(lambda i: (READS[i % 5], (r := replicas[i % 2].get(READS[i % 5])).status_code,
                                          r.text[:80]), range(40))
    failed = [a for a in answers if a[1] != 200]
    assert not failed, failed
    steps = replicas[1].get("/api/runs/r/steps").json()
    assert [s["step"] for s in steps] == [0, 1, 2, 3]  # each step's ingest stored once per replica's post: upserts


def test_a_stopped_server_is_a_fast_503_that_says_so(sidecar_factory, server, otlp):
    """The retry on a new connection must not make a down server slower: its wait for one shares the read's
    bound. The server's fast shutdown terminates every session first, so the first read used to get
    "AdminShutdown" at once and the ones after it the readable 503; now each read gets the readable one."""
    url = server.new_database()
    client = Client(sidecar_factory(db=url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2",
                                                 "OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"}).url, otlp)
    assert client.post(0).status_code == 200
    with ThreadPoolExecutor(4) as threads:
        assert set(threads.map(lambda _: client.get("/api/runs").status_code, range(8))) == {200}
    server.halt()
    try:
        answers = []
        for path in ("/api/runs", "/api/runs/r/steps", "/api/runs", "/v1/traces"):
            start = time.monotonic()
            r = client.post(1) if path == "/v1/traces" else client.get(path)
            answers.append((path, r.status_code, round(time.monotonic() - start, 2), r.headers.get("Retry-After"),
                            r.text[:120]))
    finally:
        server.resume()
    print("stopped:", answers)
    assert all(status == 503 and retry == "1" and took < 2 + 1.5 for _, status, took, retry, _ in answers), answers
    reads = [text for path, _, _, _, text in answers if path != "/v1/traces"]
    assert all("no database connection free within 2 s" in text for text in reads), reads
    wait_for(lambda: client.get("/api/runs").status_code == 200, "a read once the server is back", 15)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_rotated_password_is_a_503_that_says_authentication_and_is_logged_once(sidecar_factory, server, otlp,
                                                                                 tmp_path, workers):
    url = server.new_database()
    log = tmp_path / "sidecar.log"
    proc = sidecar_factory(db=url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2",
                                        "OTEL_GRPO_SIDECAR_INGEST_WORKERS": workers}, log=log)
    client = Client(proc.url, otlp)
    assert client.post(0).status_code == 200 and client.get("/api/runs").status_code == 200
    rotated = server.url().replace(f":{postgres.PASSWORD}@", ":rotated@")
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("ALTER ROLE otel PASSWORD 'rotated'")
    try:
        assert client.get("/api/runs").status_code == 200  # a rotation ends no session: it reads on the ones it has
        assert _terminate(url.replace(f":{postgres.PASSWORD}@", ":rotated@"))  # as a restart, failover, idle timeout
        answers = []
        for step in range(2, 6):
            for r in (client.get("/api/runs"), client.get("/api/runs/r/steps"), client.post(step),
                      client.get("/readyz")):
                answers.append((r.request.url.path, r.status_code, r.headers.get("Retry-After"), r.content[:200]))
    finally:
        with psycopg.connect(rotated, autocommit=True) as conn:
            conn.execute(f"ALTER ROLE otel PASSWORD '{postgres.PASSWORD}'")
    print("refused:", answers)
    assert all(status == 503 and b"authentication failed" in body for _, status, _, body in answers), answers
    assert all(retry == "1" for path, _, retry, _ in answers if path != "/readyz"), answers  # retryable
    assert all(b"127.0.0.1" not in body for *_, body in answers), answers  # libpq's message names the host
    wait_for(lambda: client.get("/readyz").status_code == 200, "/readyz 200 once the password is right again", 15)
    assert client.get("/api/runs").status_code == 200 and client.post(9).status_code == 200
    proc.stop()
    lines = log.read_text().splitlines()
    refused = [line for line in lines if "refused the sidecar's log-in" in line]
    assert 1 <= len(refused) <= 1 + int(workers), refused  # once per process that met it (ingest workers too)
    assert "authentication failed for user" in refused[0]  # the server's own words, in the log only
    assert any("lets the sidecar log in again" in line for line in lines), lines
    noise = [line for line in lines if any(s in line for s in ("store unavailable for", "error connecting",
                                                                "reconnection attempt", "cannot take writes"))]
    assert not noise, noise
