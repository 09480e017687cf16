"""A table of the store locked by someone else (a DBA's `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`, a `VACUUM FULL`
or an `ALTER TABLE` that rewrites it) for longer than the sidecar's timeouts, then let go.

Ingest and the reads of that table answer 503 + Retry-After within the bound, the rest reads on, /healthz is
untouched. /readyz answers 503 for as long as the lock is held, with no ingest meanwhile (it said ready `HOLD_S`
after the failed write, the lock still held), and 200 again by itself once it is gone: it reported the failed
write until the next commit, so a replica that Kubernetes took out of its Service for it (where no ingest can
reach it) stayed out for good after the database recovered.
"""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from otel_grpo.sidecar.store._health import HOLD_S
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
TIMEOUT_S = 2
READS = {"samples": "/api/runs/locked/samples", "steps": "/api/runs/locked/steps"}  # a read of the locked table
OTHER = {"samples": "/api/runs/locked/steps", "steps": "/api/runs/locked/samples"}  # one that does not read it


@pytest.mark.parametrize("table", ["samples", "steps"])
def test_a_table_locked_past_the_timeouts_is_a_fast_503_and_readiness_recovers_by_itself(sidecar_factory, pg_url,
                                                                                          otlp, table):
    proc = sidecar_factory(db=pg_url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": str(TIMEOUT_S)})
    http = httpx.Client(timeout=30)

    def timed(request) -> tuple[str, int, float, str | None, str]:
        start = time.monotonic()
        answer = request()
        return (answer.request.url.path, answer.status_code, round(time.monotonic() - start, 2),
                answer.headers.get("Retry-After"), answer.text[-240:])

    def ingest(step: int) -> httpx.Response:
        body = otlp.request(otlp.spans("locked", [step], samples=4)).SerializeToString()
        return http.post(proc.url + "/v1/traces", content=body, headers=PB)

    assert ingest(0).status_code == 200
    with psycopg.connect(pg_url) as dba:
        dba.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # held until the commit below
        blocked = [timed(lambda: ingest(1)), timed(lambda: http.get(proc.url + READS[table])),
                   timed(lambda: ingest(2)), timed(lambda: http.get(proc.url + READS[table]))]
        others = [timed(lambda: http.get(proc.url + OTHER[table])), timed(lambda: http.get(proc.url + "/healthz"))]
        ready = http.get(proc.url + "/readyz")
        dba.commit()
    print("locked:", blocked, others, ready.text)
    assert all(status == 503 and retry == "1" and "lock timeout" in text and "pg_locks" in text
               for _, status, _, retry, text in blocked), blocked
    assert max(took for _, _, took, _, _ in blocked) < TIMEOUT_S + 1.5, blocked  # the bound, not a speed check
    assert [status for _, status, *_ in others] == [200, 200], others
    assert ready.status_code == 503 and "last write failed" in ready.json()["detail"], ready.text

    wait_for(lambda: http.get(proc.url + "/readyz").status_code == 200, "/readyz 200 with no ingest meanwhile", 30)
    assert ingest(3).status_code == 200
    steps = http.get(proc.url + "/api/runs/locked/steps")
    assert [s["step"] for s in steps.json()] == [0, 3], steps.text  # nothing of the refused requests was kept
    assert http.get(proc.url + "/api/runs/locked/samples").status_code == 200
    http.close()


def test_readiness_stays_unready_while_the_lock_is_held_with_no_ingest(sidecar_factory, pg_url, otlp):
    """With no ingest arriving (a replica out of its Service gets none), /readyz said ready `HOLD_S` after the
    failed write although the table was still locked, then not ready at the next failed write: the readiness
    probe now tries a write of its own, which the lock refuses until it is gone."""
    proc = sidecar_factory(db=pg_url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "1"})
    http = httpx.Client(timeout=30)
    body = otlp.request(otlp.spans("held", [0], samples=2)).SerializeToString()
    with psycopg.connect(pg_url) as dba:
        dba.execute("LOCK TABLE samples IN ACCESS EXCLUSIVE MODE")
        assert http.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 503
        answers = []
        until = time.monotonic() + HOLD_S + 2  # past the hold that used to end it
        while time.monotonic() < until:
            answer = http.get(proc.url + "/readyz")
            answers.append((answer.status_code, answer.json().get("detail", "")))
            time.sleep(0.5)
        dba.commit()
    print("locked, no ingest:", answers[0], answers[-1], len(answers))
    assert {status for status, _ in answers} == {503}, [status for status, _ in answers]
    assert "lock timeout" in answers[-1][1], answers[-1]

    # another application's table in the same schema, locked meanwhile: not the store's to wait for
    with psycopg.connect(pg_url) as other:
        other.execute("CREATE TABLE someone_elses (x integer)")
        other.commit()
        other.execute("LOCK TABLE someone_elses IN ACCESS EXCLUSIVE MODE")
        wait_for(lambda: http.get(proc.url + "/readyz").status_code == 200, "/readyz 200 once the lock is gone", 30)
        assert http.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 200
    http.close()


def test_a_probe_that_cannot_write_holds_a_failure_for_a_while_not_for_good(sidecar_factory, pg_url, otlp, tmp_path):
    """A sidecar role without the TEMPORARY privilege: its readiness probe cannot try a write, and says so; a
    failed write is then reported for `HOLD_S` after the latest, as before, not until a commit that no ingest
    reaches a replica out of its Service to make."""
    sidecar_factory(db=pg_url).stop()  # migrated by the owner
    role = f"no_temp_{pg_url.rsplit('/', 1)[1]}"
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        owner.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
        owner.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
        owner.execute(f"REVOKE TEMPORARY ON DATABASE {pg_url.rsplit('/', 1)[1]} FROM PUBLIC")
    limited = pg_url.replace("otel:secret@", f"{role}:pw@")
    log = tmp_path / "sidecar.log"
    proc = sidecar_factory(db=limited, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "1"}, log=log)
    http = httpx.Client(timeout=30)
    body = otlp.request(otlp.spans("no-temp", [0], samples=2)).SerializeToString()
    with psycopg.connect(pg_url) as dba:
        dba.execute("LOCK TABLE samples IN ACCESS EXCLUSIVE MODE")
        assert http.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 503
        assert http.get(proc.url + "/readyz").status_code == 503
        dba.commit()
    # The lock is gone, the probe's write is refused a temporary table: ready once the hold is over.
    wait_for(lambda: http.get(proc.url + "/readyz").status_code == 200, "/readyz 200 after the hold", HOLD_S + 20)
    assert "the readiness probe cannot try a write" in log.read_text()
    assert http.post(proc.url + "/v1/traces", content=body, headers=PB).status_code == 200
    http.close()
