"""The PostgreSQL server's disk fills under ingest (the store's database in a tablespace on a small tmpfs, mounted
for the test), then gets room again.

Ingest answers 503 + Retry-After at once, saying in words that the server's disk is full (it said "DiskFull");
reads go on; /readyz reports the full disk for as long as it lasts, with no ingest meanwhile (it said ready
`HOLD_S` after the last failed write, the disk still full), and says ready again by itself once there is room (a
replica out of its Service for it stayed out for good); then ingest is stored and nothing answered 200 is
missing. Mounting needs root (CAP_SYS_ADMIN); elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import os
import pwd
import time

import httpx
import psycopg
import pytest

from otel_grpo.sidecar.store._health import HOLD_S
from tests._support.tmpfs import resize, small_tmpfs
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration
PB = {"Content-Type": "application/x-protobuf"}
SAMPLES = 8


@pytest.fixture
def tablespace(pg_server):
    """A tmpfs for a tablespace; yields (its path, the URL of a database stored on it)."""
    name = f"disk_{os.getpid()}"
    mnt = pg_server.root / name  # where the server's user may go (a test's tmp_path is root's alone)
    mnt.mkdir()
    with small_tmpfs(mnt, "64m"):
        entry = pwd.getpwnam("postgres")
        os.chown(mnt, entry.pw_uid, entry.pw_gid)
        with psycopg.connect(pg_server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{mnt}'")
            conn.execute(f"CREATE DATABASE {name} TABLESPACE {name}")
        yield mnt, pg_server.url(name)
        with psycopg.connect(pg_server.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
            conn.execute(f"DROP TABLESPACE {name}")


def test_a_full_database_disk_is_a_readable_503_and_passes_by_itself(sidecar_factory, tablespace, otlp):
    mnt, url = tablespace
    proc = sidecar_factory(db=url, env={"OTEL_GRPO_SIDECAR_DB_TIMEOUT_S": "2"})  # migrated: its tables are there
    http = httpx.Client(timeout=30)
    answers: list[tuple[int, int, str]] = []  # step, status, body

    def ingest(step: int) -> int:
        # Incompressible text, so that each request takes room of its own (~100 KiB).
        body = otlp.request(otlp.spans("full", [step], samples=SAMPLES,
                                       completion=lambda s, i: os.urandom(6000).hex())).SerializeToString()
        answer = http.post(proc.url + "/v1/traces", content=body, headers=PB)
        answers.append((step, answer.status_code, answer.text))
        return answer.status_code

    assert ingest(0) == 200
    disk = os.statvfs(mnt)
    resize(mnt, (disk.f_blocks - disk.f_bfree) * disk.f_frsize // 1024 + 2048)  # 2 MiB of room left
    step = 1
    while ingest(step) == 200:
        step += 1
        assert step < 200, "the disk never filled"
    refused = [ingest(s) for s in range(step + 1, step + 4)]
    ready = http.get(proc.url + "/readyz")
    read = http.get(proc.url + "/api/runs/full/samples", params={"limit": 5})
    print("full after", step, "requests:", answers[-4:], ready.text)
    assert refused == [503, 503, 503], answers[-4:]
    assert all("No space left on device" in text and "disk is full" in text for _, status, text in answers[-4:]), \
        answers[-4:]
    assert ready.status_code == 503 and "No space left on device" in ready.json()["detail"], ready.text
    assert read.status_code == 200, read.text  # reads go on

    still = []  # no ingest meanwhile, as for a replica out of its Service
    until = time.monotonic() + HOLD_S + 2  # past the hold that used to end it
    while time.monotonic() < until:
        answer = http.get(proc.url + "/readyz")
        still.append((answer.status_code, answer.json().get("detail", "")))
        time.sleep(0.5)
    print("full, no ingest:", still[-1], len(still))
    assert {status for status, _ in still} == {503}, [status for status, _ in still]
    assert "No space left on device" in still[-1][1], still[-1]

    resize(mnt, 256 * 1024)
    wait_for(lambda: http.get(proc.url + "/readyz").status_code == 200, "/readyz 200 once there is room", 30)
    assert ingest(step + 10) == 200
    with psycopg.connect(url) as conn:
        have = dict(conn.execute("SELECT step, count(*) FROM samples WHERE run_id = 'full' GROUP BY step").fetchall())
    acked = [s for s, status, _ in answers if status == 200]
    assert all(have.get(s) == SAMPLES for s in acked), (acked, have)
    http.close()
