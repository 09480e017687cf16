"""The SQLite file deleted or replaced under a running sidecar (a cleanup script, `rm -rf` of the data directory,
a volume re-provisioned or restored): ingest kept answering 200 into the deleted file (every row lost on the next
restart), reads answered 500 ("no such table") from a new empty file that a read connection created, and /readyz
said 200. Now every ingest and read is a 503 with Retry-After, /readyz says why, and nothing creates a file."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

PB = {"Content-Type": "application/x-protobuf"}


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_file_deleted_or_replaced_is_a_503_that_readiness_names(sidecar_factory, tmp_path, otlp, how,
                                                                            workers):
    db = tmp_path / "s.db"
    proc = sidecar_factory(db=db, env={"OTEL_GRPO_SIDECAR_INGEST_WORKERS": workers})
    http = httpx.Client(timeout=30)

    def post(step: int) -> httpx.Response:
        body = otlp.request(otlp.spans("r", [step])).SerializeToString()
        return http.post(proc.url + "/v1/traces", content=body, headers=PB)

    assert post(0).status_code == 200
    for path in tmp_path.glob("s.db*"):
        if not path.name.endswith("-ingest.lock"):  # the lock file is not the data
            path.unlink()
    if how == "replaced":  # another database at the path: a restore, another process's new file
        with sqlite3.connect(db) as other:
            other.execute("CREATE TABLE other (x)")
    for step in (1, 2, 3):
        answer = post(step)
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", answer.text
        assert answer.elapsed.total_seconds() < 3
    for path in ("/api/runs", "/api/runs/r/steps", "/api/runs/r/samples?step=0"):
        read = http.get(proc.url + path)
        assert read.status_code == 503 and "deleted or replaced" in read.text, (path, read.status_code, read.text)
    ready = http.get(proc.url + "/readyz")
    assert ready.status_code == 503 and "deleted or replaced" in ready.json()["detail"], ready.text
    if how == "deleted":
        assert not db.exists(), "a connection created a new, empty database file"
    http.close()
