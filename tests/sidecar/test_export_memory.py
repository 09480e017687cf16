"""Exports stream: a 120 MiB export keeps the server's resident memory within a fixed bound."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import httpx

from otel_grpo.sidecar.store import Store
from otel_grpo.sidecar.store._writes import _RUN_UPSERT, _SAMPLE_INSERT

ROWS, TEXT = 30_000, 4000
MiB = 1024 * 1024


def _fill(db: Path) -> None:
    store = Store.open(db)
    try:
        with store._tx() as conn:
            conn.execute(_RUN_UPSERT, ("big", "t", "m", "h", time.time(), time.time()))
            conn.executemany(_SAMPLE_INSERT, (
                ("big", i // 500, f"u{i}", i % 500, i / ROWS, 0.0, 10.0, f"prompt {i} " + "p" * TEXT,
                 f"completion {i}", time.time(), json.dumps({"reward.format": 1.0, "selection": "top"}), None)
                for i in range(ROWS)))
            conn.execute("UPDATE runs SET first_step = 0, last_step = ?, sample_count = ? WHERE run_id = 'big'",
                         (ROWS // 500 - 1, ROWS))
    finally:
        store.close()


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _export(url: str, fmt: str) -> tuple[int, bytes, bytes]:
    size, head, tail = 0, b"", b""
    with httpx.stream("GET", f"{url}/api/runs/big/samples.{fmt}", params={"step_min": 0, "limit": ROWS},
                      timeout=120) as r:
        assert r.status_code == 200
        for chunk in r.iter_bytes():
            size += len(chunk)
            head = head if len(head) >= 65536 else head + chunk[:65536]
            tail = (tail + chunk)[-65536:]
    return size, head, tail


def test_csv_and_jsonl_exports_run_in_constant_memory(sidecar_factory, tmp_path):
    db = tmp_path / "big.db"
    _fill(db)
    proc = sidecar_factory(db=db, env={"OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"})
    pid = proc.proc.pid
    assert httpx.get(proc.url + "/api/runs/big/samples", params={"step": 0}).status_code == 200  # warm up
    for fmt in ("csv", "jsonl"):
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        base = _status_kib(pid, "VmRSS")
        size, head, tail = _export(proc.url, fmt)
        peak = _status_kib(pid, "VmHWM")
        assert size > ROWS * TEXT  # about 120 MiB went out ...
        grown = (peak - base) * 1024
        print(f"{fmt}: {size / MiB:.0f} MiB exported, server RSS peak grew {grown / MiB:.1f} MiB")
        assert grown < 32 * MiB, f"{fmt}: RSS grew {grown / MiB:.0f} MiB for a {size / MiB:.0f} MiB export"
        if fmt == "csv":
            header = next(csv.reader(io.StringIO(head.decode())))
            assert header[:3] == ["run_id", "step", "sample_index"] and "reward.format" in header
            assert f",completion {ROWS - 1},".encode() in tail.rstrip().split(b"\n")[-1]
        else:
            assert json.loads(head.split(b"\n")[0])["prompt"].startswith("prompt 0 ")
            assert json.loads(tail.rstrip(b"\n").split(b"\n")[-1])["prompt"].startswith(f"prompt {ROWS - 1} ")
