"""Step reads from the sidecar's held step histories, this code against an earlier one (issue 64).

    .venv/bin/python benchmarks/step_reads.py                       # before = main
    .venv/bin/python benchmarks/step_reads.py --before 7af201b --rounds 5 --steps 10000

One SQLite store holds a run of `--steps` steps of 62 scalars and one of 233 (this code writes
them: the schema is the same). Each round runs a process of the earlier code and one of this code
(`git archive <before>`, imported instead of this package) in turn on a copy of it; each process
opens the store as the sidecar does and times, per run, in the store (no HTTP):
- `kl,reward`: the whole run's two columns (Grafana's panel);
- `every column, points=1000`: the run explorer's request;
- `every column`: every step's row (an export's page of 10,000);
- `live`: one step written, then the explorer's request, 300 times: a live run's chart.
Each read is taken `--requests` times after one to warm up (the run held); p50 ms. Beside them, the
step cache's bytes after the live loop and glibc's heap growth over it (mallinfo2: in use + free).
First, on the fresh heap, a team's runs: 50 new runs of 233 scalars grow together, a step of each in
turn, each read (`points=1000`) after its step, to 150 steps; the heap's growth over them less the step
cache's, and the free heap's growth (what the allocator holds that the runs do not use).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"r62": 62, "r233": 233}
LIVE_STEPS = 300
TEAM_RUNS, TEAM_STEPS, TEAM_SCALARS = 50, 150, 233


def _checkout(rev: str, into: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "otel_grpo"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def _batch(run_id: str, steps, scalars: int, rng: random.Random):
    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
    batch = Batch()
    batch.runs[run_id] = {}
    for step in steps:
        metrics = {f"group{i % 9}/stat_{i}": rng.uniform(-10, 10) for i in range(scalars)}
        batch.steps.append(StepRecord(run_id, step, rng.randbytes(8), 1000.0 + step, 1001.0 + step, metrics))
    return batch


def fill(db: Path, steps: int) -> None:
    from otel_grpo.sidecar.store import open_store, open_writer
    rng = random.Random(0)
    open_store(str(db)).close()  # made at the current schema
    writer = open_writer(str(db))
    try:
        for run_id, scalars in RUNS.items():
            for start in range(0, steps, 500):
                writer.write_batch(_batch(run_id, range(start, min(steps, start + 500)), scalars, rng))
    finally:
        writer.close()


def measure(db: str, steps: int, requests: int) -> dict:
    """In a process of the code under test: the reads' p50 ms and the live loop's memory."""
    import ctypes

    from otel_grpo.sidecar._heap import keep_freed_heap
    keep_freed_heap()
    from otel_grpo.sidecar.store import open_store, open_writer

    class _Mallinfo(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo
    store, writer, rng, out = open_store(db), open_writer(db), random.Random(1), {}

    def p50(read) -> float:
        read()
        times = []
        for _ in range(requests):
            t = time.perf_counter()
            read()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    try:
        # First, on a fresh heap (the reads below leave tens of MiB free for it to fill).
        heap = libc.mallinfo2()
        for step in range(TEAM_STEPS):
            for k in range(TEAM_RUNS):
                writer.write_batch(_batch(f"team{k}", [step], TEAM_SCALARS, rng))
                store.steps_json(f"team{k}", points=1000)
        grown, cached = libc.mallinfo2(), store.step_cache.nbytes
        out["team heap growth less the cache MiB"] = (grown.uordblks + grown.fordblks - heap.uordblks - heap.fordblks
                                                       - cached) / 2**20
        out["team free heap growth MiB"] = (grown.fordblks - heap.fordblks) / 2**20
        out["team step cache MiB"] = cached / 2**20
        for run_id, scalars in RUNS.items():
            keys = ["group1/stat_1", "group2/stat_2"]
            out[f"{run_id} kl,reward"] = p50(lambda: store.steps_json(run_id, keys))
            out[f"{run_id} every column, points=1000"] = p50(lambda: store.steps_json(run_id, points=1000))
            out[f"{run_id} every column"] = p50(lambda: store.steps_json(run_id))
            heap = libc.mallinfo2()
            before = heap.uordblks + heap.fordblks
            live = []
            for step in range(steps, steps + LIVE_STEPS):
                writer.write_batch(_batch(run_id, [step], scalars, rng))
                t = time.perf_counter()
                store.steps_json(run_id, points=1000)
                live.append((time.perf_counter() - t) * 1000)
            heap = libc.mallinfo2()
            out[f"{run_id} live"] = statistics.median(live)
            out[f"{run_id} heap growth MiB"] = (heap.uordblks + heap.fordblks - before) / 2**20
        out["step cache MiB"] = (store.step_cache.nbytes - cached) / 2**20  # the two runs
    finally:
        writer.close()
        store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="the earlier code: a git revision")
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--measure", nargs=3, metavar=("DB", "STEPS", "REQUESTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:  # a child: print the figures as JSON
        print(json.dumps(measure(args.measure[0], int(args.measure[1]), int(args.measure[2]))))
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="step-reads-") as tmp:
        tmp = Path(tmp)
        seed = tmp / "seed.db"
        fill(seed, args.steps)
        paths = {"before": _checkout(args.before, tmp / "before"), "after": ROOT}
        results: dict[str, list[dict]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                db = tmp / f"{name}.db"
                shutil.copy(seed, db)
                env = {**os.environ, "PYTHONPATH": str(paths[name])}
                child = subprocess.run([sys.executable, __file__, "--measure", str(db), str(args.steps),
                                        str(args.requests)], env=env, cwd=tmp, check=True, capture_output=True, text=True)
                results[name].append(json.loads(child.stdout.splitlines()[-1]))
                db.unlink()
    print(f"# step_reads: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"{args.steps} steps, {args.rounds} rounds x {args.requests} requests; before = {args.before}")
    print("| read | before p50 ms | after p50 ms | after / before |\n| --- | ---: | ---: | ---: |")
    for key in results["after"][0]:
        b = statistics.median(r[key] for r in results["before"])
        a = statistics.median(r[key] for r in results["after"])
        print(f"| {key} | {b:.1f} | {a:.1f} | {a / b if b else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
