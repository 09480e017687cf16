"""Stateless replicas: two sidecar processes on one PostgreSQL database.

Ingest through either and read through either; SIGKILL one in the middle of ingest and every
sample it (or the other) acknowledged with a 200 is readable through the survivor; retention
and exports see the rows whichever replica wrote them.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}


def _post(url: str, body: bytes) -> int:
    try:
        return httpx.post(url + "/v1/traces", content=body, headers=PB, timeout=30).status_code
    except httpx.HTTPError:  # the replica was killed with the request in flight
        return 0


def _count(url: str, run_id: str) -> int:
    return httpx.get(f"{url}/api/runs/{run_id}", timeout=30).json()["sample_count"]


def test_two_replicas_share_one_database(sidecar_factory, pg_url, otlp):
    a, b = sidecar_factory(db=pg_url), sidecar_factory(db=pg_url)
    for step in range(4):
        body = otlp.request(otlp.spans("shared", [step], samples=5)).SerializeToString()
        assert _post((a, b)[step % 2].url, body) == 200
    for replica in (a, b):
        assert _count(replica.url, "shared") == 20
        steps = httpx.get(replica.url + "/api/runs/shared/steps").json()
        assert [s["step"] for s in steps] == [0, 1, 2, 3] and "grpo.phase.duration/rollout" in steps[3]
        jsonl = httpx.get(replica.url + "/api/runs/shared/samples.jsonl", params={"step_min": 0}).text
        assert len(jsonl.splitlines()) == 20
    body = otlp.request(otlp.spans("shared", [1], samples=5)).SerializeToString()
    assert _post(b.url, body) == 200  # the same step again, through the other replica: no duplicates
    assert _count(a.url, "shared") == 20


def test_retention_run_by_one_replica_shows_through_the_other(sidecar_factory, pg_url, otlp):
    keep = {"OTEL_GRPO_SIDECAR_RETENTION_MAX_STEPS": "2", "OTEL_GRPO_SIDECAR_RETENTION_INTERVAL_S": "0.2"}
    writer = sidecar_factory(db=pg_url)
    body = otlp.request(otlp.spans("old", range(6), samples=2)).SerializeToString()
    assert _post(writer.url, body) == 200
    pruner = sidecar_factory(db=pg_url, env=keep)  # retention runs at its start and every 0.2 s
    for replica in (writer, pruner):
        steps = [s["step"] for s in httpx.get(replica.url + "/api/runs/old/steps").json()]
        assert steps == [4, 5]
        assert _count(replica.url, "old") == 4


def test_sigkill_of_a_replica_mid_ingest_loses_no_acknowledged_sample(sidecar_factory, pg_url, otlp):
    a, b = sidecar_factory(db=pg_url), sidecar_factory(db=pg_url)
    acked: dict[str, list[int]] = {"via-a": [], "via-b": []}
    stop = threading.Event()

    def ingest(run_id: str, url: str) -> None:
        step = 0
        while not stop.is_set() and step < 400:
            body = otlp.request(otlp.spans(run_id, [step], samples=16)).SerializeToString()
            if _post(url, body) == 200:
                acked[run_id].append(step)
            step += 1

    threads = [threading.Thread(target=ingest, args=("via-a", a.url)), threading.Thread(target=ingest, args=("via-b", b.url))]
    for t in threads:
        t.start()
    while len(acked["via-a"]) < 10:  # let both replicas take writes, then kill one mid-stream
        threads[0].join(0.05)
        assert threads[0].is_alive() or len(acked["via-a"]) >= 10
    a.kill()
    while len(acked["via-b"]) < len(acked["via-a"]) + 10:
        threads[1].join(0.05)
        if not threads[1].is_alive():
            break
    stop.set()
    for t in threads:
        t.join()
    for run_id, steps in acked.items():
        assert steps, run_id
        have = {s for s in httpx.get(f"{b.url}/api/runs/{run_id}/sample-steps").json()}
        assert set(steps) <= have, f"{run_id}: acknowledged steps missing: {sorted(set(steps) - have)}"
        rows = httpx.get(f"{b.url}/api/runs/{run_id}/samples", params={"step_min": 0, "limit": 10000}).json()
        per_step = {}
        for r in rows:
            per_step[r["step"]] = per_step.get(r["step"], 0) + 1
        assert all(per_step[s] == 16 for s in steps)  # whole steps, each sample once


def test_a_postgres_outage_is_503_then_the_sidecar_recovers(sidecar_factory, otlp):
    from tests._support.postgres import PostgresServer

    server = PostgresServer.start()  # its own server: this test stops it
    try:
        proc = sidecar_factory(db=server.new_database())
        body = otlp.request(otlp.spans("outage", [0], samples=4)).SerializeToString()
        assert _post(proc.url, body) == 200
        server.halt()
        later = otlp.request(otlp.spans("outage", [1], samples=4)).SerializeToString()
        answer = httpx.post(proc.url + "/v1/traces", content=later, headers=PB, timeout=60)
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"  # retryable, not a 500
        assert httpx.get(proc.url + "/api/runs", timeout=60).status_code == 503
        assert httpx.get(proc.url + "/readyz", timeout=60).status_code == 503
        server.resume()
        assert _post(proc.url, later) == 200  # the broken connections are replaced, nothing to restart
        assert _count(proc.url, "outage") == 8
        # readiness probes on a connection of its own: the first probe after the restart may find it broken and
        # replace it; a probe a moment later (a kubelet's period) says ready
        wait_for(lambda: httpx.get(proc.url + "/readyz").status_code == 200, "ready after the database is back",
                 timeout=15)
    finally:
        server.stop()
