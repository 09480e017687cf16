"""Step writes (`Store.write_batch` of step records), this code against an earlier one (issue 62).

    .venv/bin/python benchmarks/step_writes.py                      # before = main, SQLite and PostgreSQL
    .venv/bin/python benchmarks/step_writes.py --before 33ee64c --rounds 5 --backend sqlite

Each round runs a process of the earlier code and one of this code (`git archive <before>`, imported instead of
this package) in turn, each on a new store (an SQLite file; a new database of a PostgreSQL server this starts,
as the tests do), and times `--steps` write_batch calls after 100 to warm up, one step a call, in the store (no
HTTP):
- `one writer`: rank 0's record of 233 scalars, claiming its step (nearly every step of a run);
- `two writers`: rank 1's record of 20 other scalars (`grpo.writer_attempt`), then rank 0's claim of 233 (every
  step of a job with `export_all_ranks`).
Figures: ms per step, the median over the rounds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("one writer", "two writers")
RANK0, RANK1 = 10**18, 10**18 - 10**6  # a job's rank 0's attempt, and its rank 1's, started just before


def _checkout(rev: str, into: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "otel_grpo"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def _batches(mode: str, steps: int) -> list:
    from otel_grpo.sidecar.otlp._extract import Batch, StepRecord
    rng = random.Random(0)
    out = []
    for step in range(steps):
        writers = [(RANK1, False, 20, "_r1")] if mode == "two writers" else []
        for attempt, claims, scalars, suffix in [*writers, (RANK0, True, 233, "")]:
            batch = Batch()
            batch.runs["r"] = {}
            metrics = {f"group{i % 9}/stat_{i}{suffix}": rng.uniform(-10, 10) for i in range(scalars)}
            batch.steps.append(StepRecord("r", step, rng.randbytes(8), 1000.0 + step, 1001.0 + step, metrics,
                                          attempt, claims))
            out.append(batch)
    return out


def measure(target: str, mode: str, steps: int, warm: int = 100) -> float:
    """ms per step of `steps` steps written after `warm`."""
    from otel_grpo.sidecar.store import open_store
    store = open_store(target)
    batches = _batches(mode, warm + steps)
    per_step = len(batches) // (warm + steps)
    for batch in batches[:warm * per_step]:
        store.write_batch(batch)
    start = time.perf_counter()
    for batch in batches[warm * per_step:]:
        store.write_batch(batch)
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="the earlier code: a git revision")
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--measure", nargs=3, metavar=("TARGET", "MODE", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:  # a child: print the figure as JSON
        print(json.dumps(measure(args.measure[0], args.measure[1], int(args.measure[2]))))
        return
    sys.path.insert(0, str(ROOT))
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    server = None
    if "postgresql" in backends:
        from tests._support.postgres import PostgresServer
        server = PostgresServer.start(durable=True)
    try:
        with tempfile.TemporaryDirectory(prefix="step-writes-") as tmp:
            tmp = Path(tmp)
            paths = {"before": _checkout(args.before, tmp / "before"), "after": ROOT}
            results: dict[tuple, list[float]] = {}
            for r in range(args.rounds):
                for backend in backends:
                    for mode in MODES:
                        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                            target = str(tmp / f"{name}-{r}.db") if backend == "sqlite" else server.new_database()
                            env = {**os.environ, "PYTHONPATH": str(paths[name])}
                            child = subprocess.run([sys.executable, __file__, "--measure", target, mode,
                                                    str(args.steps)], env=env, cwd=tmp, check=True,
                                                   capture_output=True, text=True)
                            figure = json.loads(child.stdout.splitlines()[-1])
                            results.setdefault((backend, mode, name), []).append(figure)
    finally:
        if server is not None:
            server.stop()
    print(f"# step_writes: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, {args.steps} steps, {args.rounds} rounds; before = {args.before}")
    print("| backend | steps | before ms a step | after ms a step | after / before |")
    print("| --- | --- | ---: | ---: | ---: |")
    for backend in backends:
        for mode in MODES:
            b, a = (statistics.median(results[(backend, mode, name)]) for name in ("before", "after"))
            print(f"| {backend} | {mode} | {b:.2f} | {a:.2f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
