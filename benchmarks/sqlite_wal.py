"""WAL bytes per sample and insert rate of the SQLite store's samples table, by page size and index.

    .venv/bin/python benchmarks/sqlite_wal.py [--at 100000 1000000] [--commits 10] [--rewards uniform|levels] [--dir DIR]

The store's schema (`Store.open`: the samples table, its unique (run, step, uid) index and its
(run, reward) index) and its sample insert, in four databases: 32 KiB pages (a new store's) and 4 KiB (a store of an
earlier release), each with and without the reward index. Each is filled with requests of 512
samples (~3 KB of text each, one run, steps increasing; rewards uniform at random, or with
`--rewards levels` one of five values, as a 0/1 correctness plus a format bonus gives) inserted
straight into the table, one transaction per request, checkpointed now and then so the WAL
stays small. At each size of `--at` the WAL is cut to zero, `--commits` more requests are
committed, and the WAL's growth per sample and their insert rate are printed: what a write
costs in the WAL (every byte of it is written twice, to the WAL and then by the checkpoint).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otel_grpo.sidecar.store import Store  # noqa: E402
from otel_grpo.sidecar.store._writes import _SAMPLE_INSERT as INSERT  # noqa: E402  (the store's own statement)

REQUEST = 512  # samples per request, as the collector's batches of the fill benchmark


def make_store(db: Path, page_bytes: int, reward_index: bool) -> sqlite3.Connection:
    with sqlite3.connect(db) as conn:  # the page size is fixed once the file has a header
        conn.execute(f"PRAGMA page_size = {page_bytes}")
        conn.execute("PRAGMA journal_mode = WAL")
    Store.open(db).close()  # the store's schema, migrated to the current version
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # the WAL's size is the figure, not fsync time
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    if not reward_index:
        conn.execute("DROP INDEX samples_run_reward")
    return conn


LEVELS = (0.0, 0.25, 0.5, 1.0, 1.25)
"""`--rewards levels`: a few rewards repeated, so the index's new entries follow the run's earlier ones
of the same value (rowid order) instead of landing anywhere in the run's range."""


def request(rng: random.Random, step: int, levels: bool) -> list[tuple]:
    text = "completion " * 250
    # in INSERT's column order: run, step, uid, index, reward, advantage, length, prompt, completion, time, data, attempt
    return [("run-a", step, f"{step}-{i}", i, rng.choice(LEVELS) if levels else rng.random(), rng.gauss(0.0, 1.0),
             250.0, "prompt " * 40, text, time.time(), '{"kl_ref_mean": 0.01, "entropy_mean": 2.0}', None)
            for i in range(REQUEST)]


def measure(conn: sqlite3.Connection, wal: Path, rng: random.Random, step: int, commits: int,
            levels: bool) -> tuple[float, float, int]:
    """(WAL KiB per sample, samples/s) over `commits` requests, from an empty WAL; the next step."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = wal.stat().st_size if wal.exists() else 0
    t0 = time.perf_counter()
    for _ in range(commits):
        commit(conn, request(rng, step, levels))
        step += 1
    seconds = time.perf_counter() - t0
    return (wal.stat().st_size - before) / (commits * REQUEST) / 1024, commits * REQUEST / seconds, step


def commit(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    conn.execute("BEGIN")
    conn.executemany(INSERT, rows)
    conn.execute("COMMIT")


def run(folder: Path, page_bytes: int, reward_index: bool, sizes: list[int], commits: int, levels: bool) -> None:
    db = folder / f"p{page_bytes}_r{int(reward_index)}.db"
    conn = make_store(db, page_bytes, reward_index)
    rng, step, rows = random.Random(0), 0, 0
    for size in sorted(sizes):
        while rows < size:
            commit(conn, request(rng, step, levels))
            step, rows = step + 1, rows + REQUEST
            if step % 64 == 0:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        kib, rate, step = measure(conn, Path(f"{db}-wal"), rng, step, commits, levels)
        rows += commits * REQUEST
        print(f"| {'levels' if levels else 'uniform'} | {page_bytes // 1024} KiB | {'yes' if reward_index else 'no'} "
              f"| {size:,} | {kib:.1f} | {rate:,.0f} |",
              flush=True)
    conn.close()
    for suffix in ("", "-wal", "-shm", "-ingest.lock"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--at", type=int, nargs="+", default=[100_000, 1_000_000], metavar="SAMPLES")
    ap.add_argument("--commits", type=int, default=10, help="requests measured at each size")
    ap.add_argument("--rewards", choices=("uniform", "levels"), default="uniform",
                    help="rewards uniform at random, or one of five values (default: uniform)")
    ap.add_argument("--dir", type=Path, default=None, help="where the databases go (default: a temp folder)")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(dir=a.dir))
    try:
        print("| rewards | page | reward index | samples | WAL KiB per sample | samples/s |")
        print("| --- | --- | --- | ---: | ---: | ---: |")
        for page_bytes in (32768, 4096):
            for reward_index in (True, False):
                run(folder, page_bytes, reward_index, a.at, a.commits, a.rewards == "levels")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"sqlite {sqlite3.sqlite_version}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
