"""Retention passes at scale: how long a pass takes, and the longest it holds the write lock (what a write may
wait for), by the number of runs in the store; this code against an earlier one.

    .venv/bin/python benchmarks/retention.py                                  # both backends, 4,000 runs
    .venv/bin/python benchmarks/retention.py --before 25d02d6                 # the code to compare with
    .venv/bin/python benchmarks/retention.py --backend postgresql --latency-ms 1   # a database 1 ms away
    .venv/bin/python benchmarks/retention.py --steps 12 --max-steps 10        # every run has steps to trim

Each code gets a store of its own (an SQLite file; a database on a PostgreSQL server started for the run, as
the tests start it), filled by this code's `write_batch` with `--runs` runs of `--steps` steps, 2 samples a
step. Then a process of that code (`git archive <before>` into a temporary folder for the earlier one) opens
the store and runs `--passes` passes of `apply_retention(max_steps=--max-steps)`, back to back, as a sidecar's
start-up pass and the maintenance loop's later ones would; each pass's time, and the longest write
transaction in it (its `_tx`, timed from entry, locks taken, to commit). `--latency-ms N` (PostgreSQL): the
measuring process reaches the server through a proxy holding every byte the server sends for N ms.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _measure(db: str, passes: int, max_steps: int) -> list[dict]:
    """In a process of the code to measure (its root first on sys.path)."""
    from otel_grpo.sidecar.store import open_store

    store = open_store(db)
    tx, held = store._tx, []

    @contextlib.contextmanager
    def timed(*args, **kwargs):
        t = time.perf_counter()
        with tx(*args, **kwargs) as conn:
            yield conn
        held.append(time.perf_counter() - t)

    store._tx = timed
    figures = []
    for _ in range(passes):
        held.clear()
        t = time.perf_counter()
        deleted = store.apply_retention(max_steps=max_steps)
        figures.append({"pass_s": time.perf_counter() - t, "longest_tx_s": max(held), "transactions": len(held),
                        "deleted_steps": deleted["steps"]})
    store.close()
    return figures


def _fill(db: str, runs: int, steps: int) -> None:
    sys.path.insert(0, str(ROOT))
    from otel_grpo.sidecar.otlp import extract
    from otel_grpo.sidecar.store import open_store
    from tests.sidecar.conftest import grpo_spans, request_pb

    store = open_store(db)
    per_batch = 100
    for i in range(0, runs, per_batch):
        spans = [s for j in range(i, min(i + per_batch, runs)) for s in grpo_spans(f"run-{j:05d}", range(steps), 2)]
        store.write_batch(extract(request_pb(spans)))
    store.close()


def _code(before: str | None, tmp: Path) -> Path:
    if before is None:
        return ROOT
    archive = subprocess.run(["git", "archive", before, "otel_grpo"], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp / "before", filter="data")
    return tmp / "before"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--before", help="a commit: its code measured too, on a store of its own")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the measuring process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.passes, args.max_steps)))
        return
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from runs_scale import LatencyProxy
    from tests._support import postgres

    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        codes = [("after", ROOT)] + ([("before", _code(args.before, tmp))] if args.before else [])
        for backend in backends:
            server = postgres.PostgresServer.start() if backend == "postgresql" else None
            try:
                for label, code in codes:
                    db = server.new_database() if server else str(tmp / f"{label}.db")
                    t = time.perf_counter()
                    _fill(db, args.runs, args.steps)
                    fill_s = time.perf_counter() - t
                    served, proxy = db, None
                    if server and args.latency_ms:
                        proxy = LatencyProxy(("127.0.0.1", server.port), args.latency_ms / 1000)
                        served = db.replace(f":{server.port}/", f":{proxy.port}/")
                    out = subprocess.run(
                        [sys.executable, __file__, "--measure", served, "--passes", str(args.passes),
                         "--max-steps", str(args.max_steps)], check=True, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}, cwd=code)
                    for k, f in enumerate(json.loads(out.stdout.splitlines()[-1])):
                        print(f"{backend:10s} {label:6s} {args.runs} runs x {args.steps} steps, max_steps "
                              f"{args.max_steps}, latency {args.latency_ms:g} ms (fill {fill_s:.0f} s): pass {k + 1} "
                              f"{f['pass_s'] * 1000:7.1f} ms, longest transaction {f['longest_tx_s'] * 1000:7.1f} ms "
                              f"of {f['transactions']}, {f['deleted_steps']} steps deleted", flush=True)
            finally:
                if server is not None:
                    server.stop()


if __name__ == "__main__":
    main()
