"""The sidecar behind PgBouncer in transaction pooling mode, as platform teams run PostgreSQL: each transaction
runs on whichever server session is free, the pooler refuses session settings in the start-up packet, and it
is restarted and told to RECONNECT under a running service.

Two replicas start together on a store of an old schema (one migrates, under a lock that holds through the
pooler), take writes through either, and answer every read many times over (past psycopg's threshold for
preparing a statement on the server) with a 200; so after the pooler drops every server connection and after
it restarts. Where the operator told the pooler to ignore `options` (the usual way around its refusal), the
sidecar's settings must not depend on it either.
"""

from __future__ import annotations

import threading

import httpx
import psycopg
import pytest

from otel_grpo.sidecar.store.migrations import HEAD
from tests._support import old_schema, pgbouncer
from tests.sidecar.conftest import SidecarProcess

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
READS = ("/api/runs", "/api/runs/shared", "/api/runs/shared/steps", "/api/runs/shared/samples?limit=5",
         "/api/steps?run_id=shared", "/readyz")


@pytest.fixture(params=["", "ignore_startup_parameters = options"], ids=["default", "ignoring-options"])
def bouncer(request, pg_server):
    reason = pgbouncer.available()
    if reason:
        pytest.skip(reason)
    url = pg_server.new_database()
    old_schema.make(url, 4)  # replicas starting on it migrate: the lock must hold through the pooler
    # Two server connections for two replicas' writers, probes and read pools: transactions share sessions.
    bouncer = pgbouncer.PgBouncer.start(pg_server, url.rsplit("/", 1)[1], pool_mode="transaction", pool_size=2,
                                        settings=request.param)
    yield bouncer
    bouncer.stop()


def _read_all(replicas: list[SidecarProcess], rounds: int) -> list[tuple[str, int, str]]:
    """Every read through every replica `rounds` times: the failures (path, status, body)."""
    failed = []
    for _ in range(rounds):
        for replica in replicas:
            for path in READS:
                response = httpx.get(replica.url + path, timeout=30)
                if response.status_code != 200:
                    failed.append((path, response.status_code, response.text[:200]))
    return failed


def test_replicas_behind_a_transaction_pooler_migrate_write_and_read(bouncer, pg_server, otlp):
    starting = [SidecarProcess(bouncer.url) for _ in range(2)]
    errors: list[str] = []
    threads = [threading.Thread(target=lambda p=p: _start(p, errors)) for p in starting]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == [], errors
        for step in range(6):
            body = otlp.request(otlp.spans("shared", [step], samples=3)).SerializeToString()
            response = httpx.post(starting[step % 2].url + "/v1/traces", content=body, headers=PB, timeout=30)
            assert response.status_code == 200, response.text
        assert _read_all(starting, rounds=4) == []
        for replica in starting:
            assert httpx.get(replica.url + "/api/runs/shared").json()["sample_count"] == 18

        bouncer.admin("RECONNECT")  # every server connection replaced as it is next released
        assert _read_all(starting, rounds=2) == []
        bouncer.restart()  # every client connection dropped: each replica's next statements reconnect
        assert _read_all(starting, rounds=2) == []
        body = otlp.request(otlp.spans("shared", [6], samples=3)).SerializeToString()
        assert httpx.post(starting[0].url + "/v1/traces", content=body, headers=PB, timeout=30).status_code == 200
    finally:
        for replica in starting:
            replica.stop()
    with psycopg.connect(pg_server.url(bouncer.database), autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(f"v{HEAD}",)]
        # No lock left behind on a server session the pooler keeps (where it would hold up the next migration).
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone() == (0,)


def _start(replica: SidecarProcess, errors: list) -> None:
    try:
        replica.start()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(f"{type(exc).__name__}: {exc}")
