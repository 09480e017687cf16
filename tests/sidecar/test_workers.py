"""Ingest worker processes: settings, round trips in and out of process, lost workers, shutdown."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

import pytest

from otel_grpo.sidecar import SidecarSettings

PB = {"Content-Type": "application/x-protobuf"}


def _body(otlp, run_id: str, steps, samples: int = 4) -> bytes:
    return otlp.request(otlp.spans(run_id, steps, samples=samples)).SerializeToString()


def _workers(client):
    return list(client.app.state.pool._workers)


def _metric(client, reason: str) -> str:
    line = f'otel_grpo_sidecar_requests_rejected_total{{reason="{reason}"}}'
    return next(x for x in client.get("/metrics").text.splitlines() if x.startswith(line)).split()[-1]


def test_worker_count_setting_is_validated(tmp_path, monkeypatch):
    assert SidecarSettings(db=tmp_path / "s.db").ingest_workers >= 1  # the default uses worker processes
    for bad in (-1, 65, "two"):
        with pytest.raises(ValueError, match="ingest_workers"):
            SidecarSettings(db=tmp_path / "s.db", ingest_workers=bad)
    with pytest.raises(ValueError, match="ingest_worker_timeout_s"):
        SidecarSettings(db=tmp_path / "s.db", ingest_worker_timeout_s=0)
    monkeypatch.setenv("OTEL_GRPO_SIDECAR_INGEST_WORKERS", "0")
    assert SidecarSettings(db=tmp_path / "s.db").ingest_workers == 0


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_round_trip_in_process_and_through_workers(make_client, otlp, workers):
    client = make_client(ingest_workers=workers)
    assert (client.app.state.pool is None) == (workers == 0)
    for step in range(4):  # more requests than workers: each worker commits some
        r = client.post("/v1/traces", content=_body(otlp, "rt", [step]), headers=PB)
        assert r.status_code == 200, r.text
    r = client.post("/v1/traces", content=b"\x0a\xff", headers=PB)  # malformed: 400, as in process
    assert r.status_code == 400
    run = client.get("/api/runs").json()[0]
    assert (run["run_id"], run["first_step"], run["last_step"], run["sample_count"]) == ("rt", 0, 3, 16)
    assert client.get("/api/runs/rt/samples", params={"step": 2}).json()[3]["completion"] == "answer 3 of step 2"
    metrics = client.get("/metrics").text
    assert "otel_grpo_sidecar_sample_events_ingested_total 16.0" in metrics
    assert "otel_grpo_sidecar_spans_ingested_total 24.0" in metrics  # 6 spans per step, 4 steps
    assert _metric(client, "malformed") == "1.0"


def test_a_worker_killed_between_requests_is_replaced_and_logged_once(make_client, otlp, caplog):
    client = make_client(ingest_workers=1)
    assert client.post("/v1/traces", content=_body(otlp, "k", [0]), headers=PB).status_code == 200
    (worker,) = _workers(client)
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join()
    with caplog.at_level(logging.WARNING, logger="otel_grpo.sidecar"):
        r = client.post("/v1/traces", content=_body(otlp, "k", [1]), headers=PB)
        assert r.status_code in (200, 503)  # a retried success, or retry later
        if r.status_code == 503:
            assert r.headers["Retry-After"] == "1"
            r = client.post("/v1/traces", content=_body(otlp, "k", [1]), headers=PB)
        assert r.status_code == 200
        assert client.post("/v1/traces", content=_body(otlp, "k", [2]), headers=PB).status_code == 200
    lost = [rec for rec in caplog.records if "ingest worker" in rec.getMessage()]
    assert len(lost) == 1 and str(worker.process.pid) in lost[0].getMessage()
    (new,) = _workers(client)
    assert new.process.pid != worker.process.pid and new.process.is_alive()
    assert client.get("/api/runs").json()[0]["sample_count"] == 12


def test_a_worker_killed_during_a_request_gives_503_or_success_and_ingest_goes_on(make_client, otlp):
    client = make_client(ingest_workers=1)
    (worker,) = _workers(client)
    big = _body(otlp, "mid", range(40), samples=64)  # long enough to be killed while working on it
    answers = []
    sender = threading.Thread(target=lambda: answers.append(client.post("/v1/traces", content=big, headers=PB)))
    sender.start()
    os.kill(worker.process.pid, signal.SIGKILL)
    sender.join()
    (r,) = answers
    assert r.status_code in (200, 503)
    if r.status_code == 503:
        assert r.headers["Retry-After"] == "1" and _metric(client, "worker_lost") == "1.0"
    assert client.post("/v1/traces", content=_body(otlp, "after", [0]), headers=PB).status_code == 200
    assert client.post("/v1/traces", content=big, headers=PB).status_code == 200  # the collector's retry
    runs = {x["run_id"]: x["sample_count"] for x in client.get("/api/runs").json()}
    assert runs == {"mid": 40 * 64, "after": 4}


def test_a_hung_worker_is_killed_after_the_timeout_and_replaced(make_client, otlp):
    client = make_client(ingest_workers=1, ingest_worker_timeout_s=0.5)
    (worker,) = _workers(client)
    os.kill(worker.process.pid, signal.SIGSTOP)  # alive but never answers
    try:
        r = client.post("/v1/traces", content=_body(otlp, "h", [0]), headers=PB)
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone once the watchdog killed it
            os.kill(worker.process.pid, signal.SIGCONT)
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert not worker.process.is_alive()
    assert client.post("/v1/traces", content=_body(otlp, "h", [0]), headers=PB).status_code == 200
    assert client.get("/api/runs").json()[0]["sample_count"] == 4


def test_shutdown_stops_the_workers(make_client, otlp):
    client = make_client(ingest_workers=2)
    workers = _workers(client)
    assert all(w.process.is_alive() for w in workers)
    client.__exit__(None, None, None)
    assert not any(w.process.is_alive() for w in workers)
