"""Runs at scale: the read API over 10,000 runs x 100 steps, this code against an earlier one (issue 64).

    .venv/bin/python benchmarks/runs_scale.py                           # both backends, before = main
    .venv/bin/python benchmarks/runs_scale.py --backend sqlite --runs 2000 --requests 20
    .venv/bin/python benchmarks/runs_scale.py --before fb77a15          # the code to compare with
    .venv/bin/python benchmarks/runs_scale.py --backend postgresql --runs 1000 --latency-ms 50   # a distant database

One store per backend (an SQLite file; a database on a PostgreSQL server started for the run, as the
tests start it) is created by the earlier code (`git archive <before>` into a temporary folder, so
its schema is the earlier one) and filled with plain SQL: `--runs` runs of `--steps` steps, 12
scalars a step, one run updated a second (the newest 600 inside the active window), and a firing
alert on every 200th run. Then a sidecar process of the earlier code serves it and the query mix is
timed over HTTP keep-alive from this process, then a sidecar of this code (which migrates the store
to its schema: the runs' `(last_update, run_id)` index) on the same data. First, once, an All
(`/api/steps?run_id=.*`) on the fresh sidecar: every run's steps read whole. Then each query:
`--requests` requests after 3 to warm up (the step cache included), p50 / p99 ms. Where the earlier
code has no runs listing (before da7e939), its `/api/steps?run_id=.*` reads every run: timed once,
with `--all-timeout` (it may not finish); its sidecar is stopped right after (it goes on working for
a client that left), and queries it does not have (filters, cursors) are left blank on its side:
there a client read the whole list.

`--latency-ms N` (PostgreSQL): both sidecars reach the server through a TCP proxy in this process
that holds every byte the server sends for N ms, as a database that far away answers: each
statement costs a round trip of N ms more (the fill and the timing client go direct).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _proxy import TcpProxy, pipe  # noqa: E402  (benchmarks/_proxy.py)

SCALARS = ("kl", "reward", "entropy", "clip_ratio_low_mean", "clip_ratio_high_mean", "completion_length_mean",
           "grad_norm", "loss", "learning_rate", "rollout_is_mean", "mismatch_kl", "reward_std")
ACTIVE_S = 600  # the sidecar's default run_active_s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _checkout(rev: str, into: Path) -> Path:
    """The package of `rev` (git archive), importable from the folder returned."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "otel_grpo"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def _env(code: Path) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1",
                         "OTEL_GRPO_SIDECAR_INGEST_WORKERS": "0"}


def _create(code: Path, db: str) -> None:
    """The store created (migrated) by `code`: its schema."""
    subprocess.run([sys.executable, "-c", "import sys; from otel_grpo.sidecar.store import open_store; "
                    "open_store(sys.argv[1]).close()", db], check=True, cwd=code, env=_env(code))


def _rows(runs: int, steps: int, now: float):
    rng = random.Random(0)
    run_rows, step_rows, alert_rows = [], [], []
    for i in range(runs):
        run_id = f"run-{i:05d}"
        last = now - (runs - 1 - i)  # one run updated a second; run-(runs-1) just now
        first = last - steps * 5
        run_rows.append((run_id, "bench", "tiny", "h", first, last, 0, steps - 1, 0, steps, 0))
        for s in range(steps):
            metrics = {k: rng.random() for k in SCALARS}
            step_rows.append((run_id, s, first + s * 5, first + s * 5 + 4, last,
                              json.dumps(metrics, separators=(",", ":")), s + 1))
        if i % 200 == 0:
            alert_rows.append((f"fp{i}", "2026-12-03T00:00:00Z", "firing", "GRPOKLHigh", run_id,
                               json.dumps({"alertname": "GRPOKLHigh", "run_id": run_id}), "{}", None, None, now))
    return run_rows, step_rows, alert_rows


_RUNS_SQL = ("INSERT INTO runs (run_id, service_name, model, host, first_seen, last_update, first_step, last_step, "
             "sample_count, step_version, step_epoch) VALUES ({})")
_STEPS_COLUMNS = "run_id, step, start_time, end_time, updated_at, metrics, version"
_ALERTS_SQL = ("INSERT INTO alerts (fingerprint, starts_at, status, alertname, run_id, labels, annotations, ends_at, "
               "generator_url, received_at) VALUES ({})")


def _fill(db: str, runs: int, steps: int, now: float) -> None:
    run_rows, step_rows, alert_rows = _rows(runs, steps, now)
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db) as conn:
            with conn.cursor() as cur:
                cur.executemany(_RUNS_SQL.format(", ".join(["%s"] * 11)), run_rows)
                with cur.copy(f"COPY steps ({_STEPS_COLUMNS}) FROM STDIN") as copy:
                    for row in step_rows:
                        copy.write_row(row)
                cur.executemany(_ALERTS_SQL.format(", ".join(["%s"] * 10)), alert_rows)
            conn.execute("ANALYZE")
        return
    import sqlite3

    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(_RUNS_SQL.format(", ".join("?" * 11)), run_rows)
        conn.executemany(f"INSERT INTO steps ({_STEPS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", step_rows)
        conn.executemany(_ALERTS_SQL.format(", ".join("?" * 10)), alert_rows)
    conn.execute("ANALYZE")
    conn.close()


class Sidecar:
    """A sidecar process of `code` on `db`."""

    def __init__(self, code: Path, db: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "sidecar", "--port", str(self.port),
                                      "--db", db, "--log-level", "error"], cwd=code, env=_env(code))
        deadline = time.monotonic() + 300  # a migration of a large store may take a while
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "the sidecar exited"
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("sidecar did not start")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGKILL)  # a sidecar busy with an abandoned All would not stop soon
        self.proc.wait()


class LatencyProxy(TcpProxy):
    """A TCP proxy on a free loopback port to `target` (host, port) that holds every byte the target sends
    for `delay_s` before passing it on (the client's bytes pass at once): a server that far away, whose
    every answer arrives `delay_s` later, however many are in flight."""

    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target, self.delay_s = target, delay_s
        super().__init__(_free_port(), "latency proxy")

    def upstream(self) -> tuple[str, int]:
        return self.target

    def pipes(self, reader, writer, up_reader, up_writer):
        return pipe(reader, up_writer), pipe(up_reader, writer, self.delay_s)


def _time(client: httpx.Client, requests: list[tuple[str, dict]], n: int, timeout: float) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, bytes of the last answer) of `n` GETs (3 more first, untimed), cycling through
    `requests`; this process collects no garbage while it times."""
    for path, params in requests[:3]:
        client.get(path, params=params, timeout=timeout).raise_for_status()
    times, size = [], 0
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            path, params = requests[i % len(requests)]
            t = time.perf_counter()
            r = client.get(path, params=params, timeout=timeout)
            times.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
            size = len(r.content)
    finally:
        gc.enable()
    times.sort()
    return statistics.median(times), times[min(n - 1, int(n * 0.99))], size


COLD = "All, the sidecar's first request (no run's steps held: each read whole), once"


def _mix(runs: int, now: float, rng: random.Random) -> dict[str, list[tuple[str, dict]]]:
    """The query mix: name -> the requests it cycles through."""
    some = [f"run-{rng.randrange(runs):05d}" for _ in range(50)]
    hour_ago = str(int((now - 3600) * 1000))
    return {
        COLD: [("/api/steps", {"run_id": ".*", "metrics": "grpo.kl"})],
        "/api/runs (first page; before: every run)": [("/api/runs", {})],
        "/api/runs, a page 50 pages in (cursor)": [],  # filled in with a cursor the server gave
        "/api/runs?offset=<half the runs>&limit=100": [("/api/runs", {"offset": runs // 2, "limit": 100})],
        "/api/runs?q=<id substring> (filtered)": [("/api/runs", {"q": r[-4:]}) for r in some],
        "/api/runs?status=active": [("/api/runs", {"status": "active"})],
        "/api/runs?since=<1 h ago, Unix ms>": [("/api/runs", {"since": hour_ago})],
        "/api/runs/{id}": [(f"/api/runs/{r}", {}) for r in some],
        "/api/steps?run_id=<one run>&metrics=grpo.kl": [("/api/steps", {"run_id": r, "metrics": "grpo.kl"}) for r in some],
        "/api/runs/{id}/steps (every column)": [(f"/api/runs/{r}/steps", {}) for r in some],
        "/api/steps?run_id=.*&metrics=grpo.kl (All)": [("/api/steps", {"run_id": ".*", "metrics": "grpo.kl"})],
        "/api/steps, Grafana's All (since, until, max_runs=100, points=1000)": [("/api/steps", {
            "run_id": ".*", "metrics": "grpo.kl", "since": hour_ago, "until": str(int(now * 1000)),
            "max_runs": 100, "points": 1000})],
    }


BEFORE_HAS = {"/api/runs (first page; before: every run)", "/api/runs/{id}",
              "/api/steps?run_id=<one run>&metrics=grpo.kl", "/api/runs/{id}/steps (every column)",
              "/api/steps?run_id=.*&metrics=grpo.kl (All)"}
ALL = "/api/steps?run_id=.*&metrics=grpo.kl (All)"


def _measure(side: str, code: Path, db: str, mix: dict, n: int, all_timeout: float, runs: int,
             paged: bool) -> dict:
    """`paged`: the earlier code has the runs listing (its filters, cursors and a bounded All)."""
    server = Sidecar(code, db)
    out: dict = {}
    try:
        with httpx.Client(base_url=server.url) as client:
            if side == "after" or paged:  # a cursor the server gave, 50 pages in (fewer where there are fewer)
                cursor = None
                for _ in range(max(1, min(50, runs // 100 - 1))):
                    link = client.get("/api/runs", params={"limit": 100, **({"cursor": cursor} if cursor else {})})
                    cursor = link.headers["link"].split("cursor=", 1)[1].split(">", 1)[0]
                mix["/api/runs, a page 50 pages in (cursor)"] = [("/api/runs", {"limit": 100, "cursor": cursor})]
            for name, requests in mix.items():
                if side == "before" and not paged and name not in BEFORE_HAS:
                    continue
                if name == COLD:  # timed first, once: afterwards the runs' steps are held
                    t = time.perf_counter()
                    r = client.get(requests[0][0], params=requests[0][1], timeout=all_timeout)
                    ms = (time.perf_counter() - t) * 1000
                    out[name] = (ms, ms, len(r.raise_for_status().content))
                    continue
                if side == "before" and not paged and name == ALL:
                    t = time.perf_counter()
                    try:
                        r = client.get(requests[0][0], params=requests[0][1], timeout=all_timeout)
                        ms = (time.perf_counter() - t) * 1000
                        out[name] = (ms, ms, len(r.content))
                    except httpx.TimeoutException:
                        out[name] = None  # did not answer within all_timeout
                    break  # the server goes on with it: nothing after this would be timed fairly
                # The earlier code's whole list, and its one run found by reading every run: fewer requests.
                slow = side == "before" and not paged and name in ("/api/runs (first page; before: every run)",
                                                                      "/api/runs/{id}")
                out[name] = _time(client, requests, max(5, n // 5) if slow else n, all_timeout)
        out["rss"] = server.rss_mib()
    finally:
        server.stop()
    return out


def run_backend(name: str, before: Path, tmp: Path, runs: int, steps: int, n: int, all_timeout: float,
                latency_ms: float = 0.0) -> dict:
    server = proxy = None
    if name == "postgresql":
        from tests._support.postgres import PostgresServer, available

        reason = available()
        if reason:
            raise SystemExit(f"postgresql: {reason}")
        server = PostgresServer.start()
    try:
        db = server.new_database() if server else str(tmp / "runs.db")
        _create(before, db)
        now = time.time()
        t = time.perf_counter()
        _fill(db, runs, steps, now)
        fill_s = time.perf_counter() - t
        mix = _mix(runs, now, random.Random(1))
        served = db
        if latency_ms:
            proxy = LatencyProxy(("127.0.0.1", server.port), latency_ms / 1000)
            served = db.replace(f":{server.port}/", f":{proxy.port}/")
        paged = (before / "otel_grpo/sidecar/api/listing.py").exists()
        before_figures = _measure("before", before, served, mix, n, all_timeout, runs, paged)
        after_figures = _measure("after", ROOT, served, mix, n, all_timeout, runs, paged)
    finally:
        if server is not None:
            server.stop()
    return {"fill_s": fill_s, "before": before_figures, "after": after_figures, "mix": list(mix)}


def _cell(figures) -> str:
    if figures is None:
        return ""
    p50, p99, size = figures
    return f"{p50:,.1f} / {p99:,.1f} ({size / 1024:,.0f} KiB)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=100, help="steps per run")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--requests", type=int, default=100, help="timed requests per query (a fifth for the earlier "
                                                                "code's reads of every run: the list, one run)")
    ap.add_argument("--before", default="main", help="the git revision to compare with (default: main)")
    ap.add_argument("--all-timeout", type=float, default=180.0,
                    help="seconds the earlier code's /api/steps?run_id=.* may take")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="PostgreSQL: hold each of the server's answers this long on the way to the sidecars")
    args = ap.parse_args()
    if args.latency_ms and args.backend != "postgresql":
        ap.error("--latency-ms needs --backend postgresql (SQLite is a file: no round trips)")
    names = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.before], check=True,
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    results = {}
    with tempfile.TemporaryDirectory(prefix="otel-grpo-runs-") as d:
        tmp = Path(d)
        before = _checkout(args.before, tmp / "before")
        for name in names:
            results[name] = run_backend(name, before, tmp, args.runs, args.steps, args.requests, args.all_timeout,
                                        args.latency_ms)
    print(f"# runs_scale  {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC  {platform.node()}  {os.cpu_count()} cpus  "
          f"python {platform.python_version()}  load average at the end {os.getloadavg()[0]:.1f}")
    print(f"{args.runs:,} runs x {args.steps} steps ({len(SCALARS)} scalars a step); before = {args.before} "
          f"({rev}), after = {head} (working tree); {args.requests} requests a query after 3 to warm up"
          + (f"; each database answer held {args.latency_ms:g} ms (proxy)" if args.latency_ms else ""))
    for name, r in results.items():
        print(f"\n## {name} (filled in {r['fill_s']:.0f} s): p50 / p99 ms (bytes of an answer)")
        print("| query | before | after |\n| --- | ---: | ---: |")
        for query in r["mix"]:
            b = r["before"].get(query)
            if query == ALL and query in r["before"] and b is None:
                before_cell = f"> {args.all_timeout:.0f} s (no answer)"
            else:
                before_cell = _cell(b) if query in r["before"] else "-"
            print(f"| {query} | {before_cell} | {_cell(r['after'].get(query))} |")
        print(f"\nsidecar RSS after the mix: before {r['before']['rss']:.0f} MiB, after {r['after']['rss']:.0f} MiB")


if __name__ == "__main__":
    main()
