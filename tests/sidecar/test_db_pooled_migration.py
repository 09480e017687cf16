"""The migration's lock behind PgBouncer in transaction pooling mode, whose server connections are handed out in
turn (`server_round_robin = 1`): each transaction of one client runs on another server session than the last,
so nothing a migration leaves in a session can pass for safe by luck.

A session advisory lock (the migration's before) was taken on one server session and released on another: it
stayed on a session the pooler keeps, excluded nothing from a transaction landing there (the lock is re-entrant
within a session: a second migrator went ahead, and a sidecar's start-up failed on the first's tables), and made
every write transaction landing on another session wait for it (writes take the same key) until their lock
timeout: a 503. The transaction-level lock ends with the migration's transaction, wherever that ran.
"""

from __future__ import annotations

import threading

import httpx
import psycopg
import pytest

from otel_grpo.sidecar.store.migrations import HEAD, migrate_postgres
from tests._support import old_schema, pgbouncer
from tests.sidecar.conftest import SidecarProcess

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}


def _round_robin_pooler(server, servers: int) -> pgbouncer.PgBouncer:
    """A pooler in transaction mode for a new database of schema 4, with `servers` server connections open, used
    in turn."""
    reason = pgbouncer.available()
    if reason:
        pytest.skip(reason)
    url = server.new_database()
    old_schema.make(url, 4)
    bouncer = pgbouncer.PgBouncer.start(server, url.rsplit("/", 1)[1], pool_mode="transaction", pool_size=servers,
                                        settings="server_round_robin = 1")
    clients = [psycopg.connect(bouncer.url, prepare_threshold=None) for _ in range(servers)]
    for client in clients:  # all in a transaction at once: each on a server connection of its own
        client.execute("SELECT 1")
    for client in clients:
        client.commit()
        client.close()
    return bouncer


def _advisory_locks(server, database: str) -> list[tuple]:
    """The advisory locks the server holds (asked beside the pooler)."""
    with psycopg.connect(server.url(database), autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(f"v{HEAD}",)]
        return conn.execute("SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'advisory'").fetchall()


@pytest.mark.parametrize("servers", [2, 3])
def test_a_migration_through_a_transaction_pooler_leaves_no_lock_behind(pg_server, servers):
    bouncer = _round_robin_pooler(pg_server, servers)
    try:
        found = migrate_postgres(lambda: psycopg.connect(bouncer.url, prepare_threshold=None), timeout_s=30)
        assert found == 4
        assert _advisory_locks(pg_server, bouncer.database) == []
    finally:
        bouncer.stop()


def test_two_sidecars_starting_at_once_through_a_transaction_pooler_migrate_once_and_take_writes(pg_server, otlp):
    bouncer = _round_robin_pooler(pg_server, 2)
    replicas = [SidecarProcess(bouncer.url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2"}) for _ in range(2)]
    errors: list[str] = []
    threads = [threading.Thread(target=_start, args=(replica, errors)) for replica in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == [], errors  # a replica that migrated beside the other fails on the tables it made
        assert _advisory_locks(pg_server, bouncer.database) == []
        # Every write transaction takes the migration's key: each lands on either server session, and is a 200.
        answers = []
        for step in range(8):
            body = otlp.request(otlp.spans("pooled", [step], samples=2)).SerializeToString()
            answer = httpx.post(replicas[step % 2].url + "/v1/traces", content=body, headers=PB, timeout=30)
            answers.append((answer.status_code, answer.text[:120]))
        assert [status for status, _ in answers] == [200] * 8, answers
    finally:
        for replica in replicas:
            replica.stop()
        bouncer.stop()


def _start(replica: SidecarProcess, errors: list) -> None:
    try:
        replica.start()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(f"{type(exc).__name__}: {exc}")
