"""A burst of large reads, then quiet: does the sidecar's memory come back? (issue 64: "bounded memory
per read ... keeps RSS bounded and returns it").

    .venv/bin/python benchmarks/read_burst.py                 # release every 60 s against never
    .venv/bin/python benchmarks/read_burst.py --readers 50 --wait 75

One SQLite store holds a run of 10,000 samples (100-character prompts) and 10,000 steps of 20 scalars
(tests/sidecar/test_read_memory.py fills it). For each arm in turn (`OTEL_GRPO_SIDECAR_HEAP_RELEASE_S`:
60, the default, and 0, never), a sidecar process (`otel-grpo sidecar`, as benchmarks/sidecar.py starts
it, with its ingest workers) serves a copy of the store; `--readers` clients at once read a 10,000-row
page each (half of samples, half of every step), then nothing happens for `--wait` seconds. The
server process's RSS (not its workers': they take no reads) before, at its peak, right after and
at the end of the wait.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import sidecar as bench  # noqa: E402  (benchmarks/sidecar.py: sidecar processes)

ROWS = 10_000
ARMS = {"release every 60 s": "60", "never": "0"}


def rss_mib(pid: int) -> float:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:")) / 1024


def burst(db: Path, release: str, readers: int, wait_s: float) -> dict[str, float]:
    proc, url = bench.start_sidecar(db, {"OTEL_GRPO_SIDECAR_HEAP_RELEASE_S": release})
    try:
        httpx.get(url + "/api/runs/big/steps", params={"limit": 1}, timeout=60).raise_for_status()  # held
        out = {"before": rss_mib(proc.pid)}
        failed: list[str] = []

        def read(i: int) -> None:
            path, params = (("/api/runs/big/samples", {"step_min": 0, "limit": ROWS}) if i % 2
                            else ("/api/runs/big/steps", {"limit": ROWS}))
            r = httpx.get(url + path, params=params, timeout=600)
            if r.status_code != 200:
                failed.append(f"{path} {r.status_code}")

        threads = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
        peak = 0.0
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.1)
        if failed:
            raise RuntimeError(f"reads failed: {failed[:3]}")
        out |= {"peak": peak, "after the burst": rss_mib(proc.pid)}
        time.sleep(wait_s)
        out[f"{wait_s:g} s later"] = rss_mib(proc.pid)
        return out
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readers", type=int, default=50)
    ap.add_argument("--wait", type=float, default=75.0, help="seconds of quiet after the burst")
    args = ap.parse_args()
    from otel_grpo.sidecar.store import open_store
    from tests.sidecar import test_read_memory as fill

    with tempfile.TemporaryDirectory(prefix="read-burst-") as tmp:
        seed = Path(tmp) / "seed.db"
        store = open_store(str(seed))
        fill.SAMPLES = ROWS
        fill._fill(store, steps=ROWS)
        store.close()
        results = {}
        for name, release in ARMS.items():
            db = Path(tmp) / f"{release}.db"
            shutil.copy(seed, db)
            results[name] = burst(db, release, args.readers, args.wait)
    print(f"# read_burst: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"{args.readers} readers of {ROWS:,}-row pages, then {args.wait:g} s of quiet")
    columns = list(next(iter(results.values())))
    print("| sidecar RSS MiB | " + " | ".join(columns) + " |\n| --- |" + " ---: |" * len(columns))
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.0f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
