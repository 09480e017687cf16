"""A team's runs past the step cache's bound: is the store's memory flat once the cache is full? (issue 64)

    .venv/bin/python benchmarks/cache_full.py                  # 50 runs to 240 steps, a 12 MiB cache

In a process per arm, a store on a fresh SQLite file as the sidecar opens it (its heap settings
too), with `--cache-mib` of step cache: `--runs` runs of 233 scalars grow together, a step of each
in turn, each read (every column, `points=1000`, as the run explorer asks) after its step, to
`--steps` steps. The cache fills after about 120 steps; from then on the runs it cannot hold are read
whole at every read. Every 40 steps: the process's RSS, glibc's heap in use and free (`mallinfo2`), the
cache's bytes. Arms: the free heap released (`release_free_heap`, as the sidecar's maintenance does)
at each of those points, and never.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_reads import _batch  # noqa: E402  (benchmarks/step_reads.py: a step of random scalars)

MiB = 2**20
EVERY = 40


class _Mallinfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def measure(release: bool, runs: int, steps: int, cache_mib: int) -> list[dict]:
    from otel_grpo.sidecar._heap import keep_freed_heap, release_free_heap
    keep_freed_heap()
    from otel_grpo.sidecar.store import open_store, open_writer

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo
    db = Path(tempfile.mkdtemp(prefix="cache-full-")) / "s.db"
    open_store(str(db)).close()
    store, writer, rng = open_store(str(db)), open_writer(str(db)), random.Random(1)
    store.step_cache.max_bytes = cache_mib * MiB
    out = []
    try:
        for step in range(steps):
            for k in range(runs):
                writer.write_batch(_batch(f"team{k}", [step], 233, rng))
                store.steps_json(f"team{k}", points=1000)
            if (step + 1) % EVERY == 0:
                if release:
                    release_free_heap()
                heap = libc.mallinfo2()
                rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
                out.append({"steps": step + 1, "rss": rss / 1024, "in use": heap.uordblks / MiB,
                            "free": heap.fordblks / MiB, "cache": store.step_cache.nbytes / MiB,
                            "runs held": len(store.step_cache)})
    finally:
        writer.close()
        store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--cache-mib", type=int, default=12)
    ap.add_argument("--measure", choices=("release", "never"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:  # a child: print the samples as JSON
        print(json.dumps(measure(args.measure == "release", args.runs, args.steps, args.cache_mib)))
        return
    arms = {}
    for arm in ("release", "never"):
        child = subprocess.run([sys.executable, __file__, "--measure", arm, "--runs", str(args.runs), "--steps",
                                str(args.steps), "--cache-mib", str(args.cache_mib)],
                               check=True, capture_output=True, text=True)
        arms[arm] = json.loads(child.stdout.splitlines()[-1])
    print(f"# cache_full: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
          f"{args.runs} runs x {args.steps} steps of 233 scalars, a {args.cache_mib} MiB step cache")
    print("| steps | release: RSS MiB | in use | free | never: RSS MiB | in use | free | cache MiB (runs held) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for a, b in zip(arms["release"], arms["never"]):
        print(f"| {a['steps']} | {a['rss']:.0f} | {a['in use']:.1f} | {a['free']:.1f} | {b['rss']:.0f} | "
              f"{b['in use']:.1f} | {b['free']:.1f} | {b['cache']:.1f} ({b['runs held']}) |")


if __name__ == "__main__":
    main()
