"""A table of the store locked by someone else (a DBA's `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`, a `VACUUM FULL`
or an `ALTER TABLE` that rewrites it) for longer than the sidecar's timeouts, then let go.

Ingest and the reads of that table answer 503 + Retry-After within the bound, the rest reads on, /healthz is
untouched. Once the lock is gone, /readyz answers 200 again by itself, with no ingest meanwhile: it reported
the failed write until the next commit, so a replica that Kubernetes took out of its Service for it (where no
ingest can reach it) stayed out for good after the database recovered.
"""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

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
