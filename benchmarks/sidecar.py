"""Sidecar benchmark: ingest throughput vs raw OTLP decode, query latency at 1M (and 10M) samples,
memory; SQLite and PostgreSQL side by side, one sidecar and two replicas.

    .venv/bin/python benchmarks/sidecar.py                          # full run (1,000,000 stored samples)
    .venv/bin/python benchmarks/sidecar.py --quick                  # smoke run
    .venv/bin/python benchmarks/sidecar.py --backend postgresql     # one backend only
    .venv/bin/python benchmarks/sidecar.py --fill 1000000 10000000  # fill over HTTP; ~30 GB per backend

PostgreSQL: a server of Debian's `postgresql` package started for the run on a temporary
cluster (fsync on, defaults otherwise: commits are flushed before the sidecar answers), as
the tests start it; with `--replicas 2` two sidecar processes share its database and the
clients are split between them.

Ingest: pre-built OTLP/HTTP protobuf requests (64 `grpo.sample` events per `grpo.samples`
span, completions of 1-4 KB) are pre-encoded, then POSTed from `--clients` keep-alive
connections (4, as the shipped collector config's sending queue; stdlib `http.client`) to a
real sidecar process (uvicorn, SQLite WAL, `--synchronous`, NORMAL by default); events/s
counts committed samples, each round into a fresh process and database, medians over
`--rounds`. The ratio's peer is what any consumer of the payloads must do at least:
`ExportTraceServiceRequest.FromString` plus reading every attribute into a Python value, in
this process on one core. Bare `FromString` is reported too: upb parses lazily and builds no
Python objects, so it is a parse-only bound, not a consumer.
Queries: the store is bulk-loaded through `Store.write_batch` to 1,000,000 samples, then
the samples and steps endpoints are timed over HTTP (keep-alive) from this process, which
collects no garbage while it times (as `timeit`); beside p50 / p99, the requests over 50 ms
are counted here and, from the sidecar's own request-duration histogram, inside its handler
(a slow request the sidecar did not time waited in its event loop, the network or this client).
Fill (`--fill`): instead of both, one run per backend is filled over HTTP through the sidecar(s)
as a training run fills it (`Filler`), segment by segment; each segment's ingest rate is timed,
and the query mix at each size. Backends run one after another, each database deleted after use.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import signal
import socket
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from otel_grpo.catalog.spans import (METRIC_PREFIX, PHASE_ATTR, PHASE_PREFIX, RUN_ID_ATTR, SAMPLE_EVENT,  # noqa: E402
                                     SAMPLES_SPAN, STEP_ATTR, STEP_SPAN)
from otel_grpo.sidecar.otlp._extract import Batch, SampleRecord, StepRecord, value_of  # noqa: E402
from otel_grpo.sidecar.store import open_store  # noqa: E402

EVENTS_PER_SPAN = 64
WORDS = ["".join(random.Random(i).choices(string.ascii_lowercase, k=random.Random(i).randint(2, 9))) for i in range(2000)]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _kv(container, key: str, value) -> None:
    v = container.add(key=key).value
    if isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int_value = value
    elif isinstance(value, float):
        v.double_value = value
    else:
        v.string_value = value


def build_request(rng: random.Random, run_id: str, step: int, spans: int, step_span: bool = False,
                  first_index: int = 0) -> ExportTraceServiceRequest:
    """One export: `spans` grpo.samples spans of 64 sample events each (sample_index from
    `first_index`), as the telemetry layer writes them; `step_span`: with the step's grpo.step
    span (62 scalars) and three phase spans first."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for k, v in {"service.name": "trainer", "grpo.run_id": run_id, "grpo.model": "bench", "host.name": "h"}.items():
        _kv(rs.resource.attributes, k, v)
    ss = rs.scope_spans.add()
    ss.scope.name = "otel_grpo.telemetry"
    t0 = time.time_ns()
    trace = rng.randbytes(16)
    if step_span:
        parent = ss.spans.add(name=STEP_SPAN, trace_id=trace, span_id=rng.randbytes(8),
                              start_time_unix_nano=t0, end_time_unix_nano=t0 + 10**9)
        _kv(parent.attributes, RUN_ID_ATTR, run_id)
        _kv(parent.attributes, STEP_ATTR, step)
        metrics = {f"m{k}": rng.random() for k in range(60)} | {"kl": rng.random() * 0.1, "reward": rng.random()}
        for k, v in metrics.items():
            _kv(parent.attributes, METRIC_PREFIX + k, v)
        for phase in ("generate", "reward", "update"):
            child = ss.spans.add(name=PHASE_PREFIX + phase, trace_id=trace, span_id=rng.randbytes(8),
                                 parent_span_id=parent.span_id, start_time_unix_nano=t0,
                                 end_time_unix_nano=t0 + rng.randint(10**7, 10**9))
            _kv(child.attributes, PHASE_ATTR, phase)
    for j in range(spans):
        span = ss.spans.add(name=SAMPLES_SPAN, trace_id=trace, span_id=rng.randbytes(8),
                            parent_span_id=rng.randbytes(8), start_time_unix_nano=t0, end_time_unix_nano=t0 + 1000)
        _kv(span.attributes, RUN_ID_ATTR, run_id)
        _kv(span.attributes, STEP_ATTR, step)
        for i in range(EVENTS_PER_SPAN):
            ev = span.events.add(name=SAMPLE_EVENT, time_unix_nano=t0 + i)
            completion = _text(rng, 1024, 4096)
            for k, v in (("prompt", _text(rng, 100, 400)), ("completion", completion), ("reward", rng.random()),
                         ("reward.format", float(rng.random() > 0.5)), ("reward.accuracy", rng.random()),
                         ("advantage", rng.gauss(0, 1)), ("completion_length", len(completion) // 4),
                         ("sample_index", first_index + j * EVENTS_PER_SPAN + i), ("selection", "random"),
                         ("truncated", rng.random() > 0.9), ("completion_original_length", len(completion))):
                _kv(ev.attributes, k, v)
    return req


class Filler:
    """Bodies for one run of any length: each step is two exports of 8 samples spans (1024 samples),
    the first with the step and phase spans. Eight different templates of each are built and
    encoded once (building one costs ~100x sending it, encoding one ~3 ms of the client's CPU);
    each body is a copy of one with its step and fresh trace and span ids written into the bytes.
    The step goes in as a 5-byte varint (an over-long encoding of small numbers, which protobuf
    decoders accept), so every step fits the template's place for it."""

    SPANS = 8
    PER_STEP = 2 * SPANS * EVENTS_PER_SPAN
    _PLACEHOLDER = 2**28 + 0x2A2A2A  # any number whose varint has 5 bytes

    def __init__(self, rng: random.Random, run_id: str, templates: int = 8) -> None:
        self.rng = rng
        self.first = [self._template(build_request(rng, run_id, 0, self.SPANS, step_span=True))
                      for _ in range(templates)]
        self.second = [self._template(build_request(rng, run_id, 0, self.SPANS, first_index=self.PER_STEP // 2))
                       for _ in range(templates)]

    @classmethod
    def _template(cls, msg: ExportTraceServiceRequest) -> tuple[bytes, list[tuple[int, list[int]]], list[int]]:
        """The encoded request, where each of its ids sits (a phase's parent id is its step span's id),
        and where each step number sits."""
        spans = msg.resource_spans[0].scope_spans[0].spans
        for span in spans:
            if not span.name.startswith(PHASE_PREFIX):
                span.attributes[1].value.int_value = cls._PLACEHOLDER  # grpo.step, after grpo.run_id
        raw = msg.SerializeToString()
        ids = {bytes(spans[0].trace_id)} | {bytes(span.span_id) for span in spans}
        places = [(len(i), _find_all(raw, i)) for i in ids]
        steps = _find_all(raw, _varint5(cls._PLACEHOLDER))
        assert len(steps) == sum(not span.name.startswith(PHASE_PREFIX) for span in spans)
        return raw, places, steps

    def bodies(self, steps: range) -> Iterator[bytes]:
        for step in steps:
            for raw, places, step_places in (self.first[step % len(self.first)], self.second[step % len(self.second)]):
                body = bytearray(raw)
                for size, where in places:
                    new = self.rng.randbytes(size)
                    for at in where:
                        body[at:at + size] = new
                encoded = _varint5(step)
                for at in step_places:
                    body[at:at + 5] = encoded
                yield bytes(body)


def _varint5(n: int) -> bytes:
    return bytes((n >> 7 * i) & 0x7F | (0x80 if i < 4 else 0) for i in range(5))


def _find_all(raw: bytes, needle: bytes) -> list[int]:
    out, at = [], raw.find(needle)
    while at >= 0:
        out.append(at)
        at = raw.find(needle, at + 1)
    return out


def _walk(req) -> int:
    n = 0
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                for ev in span.events:
                    {kv.key: value_of(kv.value) for kv in ev.attributes}
                    n += 1
    return n


def decode_rates(bodies: list[bytes], events: int) -> tuple[float, float]:
    """events/s for FromString alone, and for FromString plus reading every attribute."""
    t = time.perf_counter()
    for b in bodies:
        ExportTraceServiceRequest.FromString(b)
    parse = events / (time.perf_counter() - t)
    t = time.perf_counter()
    for b in bodies:
        _walk(ExportTraceServiceRequest.FromString(b))
    walk = events / (time.perf_counter() - t)
    return parse, walk


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SYNCHRONOUS = "NORMAL"  # --synchronous
WORKERS: int | None = None  # --workers; None: the sidecar's default


class Backend:
    """Where a round's store lives: a fresh SQLite file, or a fresh database on one PostgreSQL server."""

    def __init__(self, name: str, tmp: Path) -> None:
        self.name, self.tmp, self.server = name, tmp, None
        if name == "postgresql":
            from tests._support.postgres import PostgresServer, available

            reason = available()
            if reason:
                raise SystemExit(f"postgresql: {reason}")
            self.server = PostgresServer.start(durable=True)

    def new_target(self) -> Path | str:
        if self.server is not None:
            return self.server.new_database()
        return self.tmp / f"ingest-{time.monotonic_ns()}.db"

    def drop(self, target: Path | str) -> None:
        if self.server is None:
            for suffix in ("", "-wal", "-shm", "-ingest.lock"):
                Path(str(target) + suffix).unlink(missing_ok=True)
        else:  # a 10M-sample database is ~30 GB: gone before the next configuration fills its own
            import psycopg

            with psycopg.connect(self.server.url(), autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {str(target).rsplit('/', 1)[1]} WITH (FORCE)")

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()


def start_sidecar(db: Path | str, settings: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """A sidecar process on `db` and its URL; `settings`: environment variables it gets besides ours."""
    port = free_port()
    env = os.environ | {"OTEL_GRPO_SIDECAR_SYNCHRONOUS": SYNCHRONOUS} | (settings or {})
    if WORKERS is not None:
        env["OTEL_GRPO_SIDECAR_INGEST_WORKERS"] = str(WORKERS)
    proc = subprocess.Popen([sys.executable, "-m", "otel_grpo.cli", "sidecar", "--port", str(port), "--db", str(db),
                             "--log-level", "warning"], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("sidecar did not start")


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (the sidecar's ingest workers sit under its forkserver)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


def rss_mib(pid: int) -> float:
    """Resident memory of the sidecar and its worker processes (shared pages counted in each)."""
    total = 0.0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of a process and its live descendants (from /proc)."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def ingest(urls: list[str], bodies: Iterable[bytes], events: int, clients: int = 4) -> float:
    """POST every body once, from `clients` concurrent keep-alive connections (a collector
    exports with several), each taking the next body when its last one was answered. Bodies are
    encoded beforehand (or patched from templates, `Filler`) and sent with the standard library's
    `http.client`: the real sender is the collector, a Go process, so the client here should
    take as little of the two shared cores as a Python client can (httpx took ~1.7x its CPU)."""
    from concurrent.futures import ThreadPoolExecutor
    from http.client import HTTPConnection
    from urllib.parse import urlsplit

    headers = {"Content-Type": "application/x-protobuf"}
    queue, lock = iter(bodies), threading.Lock()

    def send(client: int) -> None:
        where = urlsplit(urls[client % len(urls)])  # clients are spread over the replicas
        conn = HTTPConnection(where.hostname, where.port, timeout=120)
        try:
            while True:
                with lock:
                    b = next(queue, None)
                if b is None:
                    return
                conn.request("POST", "/v1/traces", body=b, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"ingest answered {response.status}")
        finally:
            conn.close()

    t = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(send, range(clients)))
    return events / (time.perf_counter() - t)


def bulk_load(db: Path | str, target: int, per_step: int, rng: random.Random) -> int:
    """Fill the store to `target` samples through the store API (no HTTP), in step-sized batches."""
    store = open_store(db, "NORMAL")  # loading only: FULL fsyncs would just slow the set-up down
    texts = [_text(rng, 1024, 4096) for _ in range(512)]
    steps = target // per_step
    now = time.time()
    for step in range(steps):
        batch = Batch()
        batch.runs["big"] = {"grpo.model": "bench"}
        metrics = {f"m{k}": rng.random() for k in range(60)} | {"kl": rng.random() * 0.1, "reward": rng.random()}
        batch.steps.append(StepRecord("big", step, rng.randbytes(8), now, now, metrics))
        for i in range(per_step):
            c = texts[(step * per_step + i) % len(texts)]
            batch.samples.append(SampleRecord("big", step, str(i), i, rng.random(), rng.gauss(0, 1), len(c) / 4,
                                              "prompt " + str(i), c, now,
                                              {"reward.format": 1.0, "selection": "random", "truncated": False}))
        store.write_batch(batch, now)
    store.close()
    return steps


def latency(client: httpx.Client, path: str, params: dict, n: int, before=None) -> tuple[float, float, int, int]:
    """(p50 ms, p99 ms, requests over 50 ms here, of them over 50 ms inside the sidecar) of `n` GETs;
    `before()`, untimed, ahead of each. The sidecar's own count is the change of its request-duration
    histogram (`/metrics`) over the loop: a slow request it did not time waited outside the handler
    (the event loop, the network, this client). As `timeit`, this process collects no garbage meanwhile."""
    route = "/api/runs/{run_id:path}/" + path.rsplit("/", 1)[1]  # the route's template, as the sidecar labels it
    server0 = _slow_in_server(client, route)
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(n):
            if before is not None:
                before()
            t = time.perf_counter()
            client.get(path, params=params).raise_for_status()
            times.append((time.perf_counter() - t) * 1000)
    finally:
        gc.enable()
    server = _slow_in_server(client, route) - server0
    times.sort()
    slow = sum(t > SLOW_MS for t in times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))], slow, server


SLOW_MS = 50.0  # the p99 target; a histogram bucket bound of the sidecar's request durations


def _slow_in_server(client: httpx.Client, route: str) -> int:
    """GETs of `route` the sidecar answered 200 and timed over `SLOW_MS` so far (its histogram's count minus
    its 0.05 s bucket)."""
    total = fast = 0
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name != "otel_grpo_sidecar_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("route") != route or labels.get("method") != "GET" or labels.get("status") != "200":
                continue
            if sample.name.endswith("_count"):
                total = int(sample.value)
            elif sample.name.endswith("_bucket") and float(labels["le"]) == SLOW_MS / 1000:
                fast = int(sample.value)
    return total - fast


def ingest_round(backend: Backend, bodies: list[bytes], events: int, clients: int, replicas: int) -> dict:
    """One timed ingest into fresh sidecar processes and a fresh database, with the servers' and
    this process's CPU time over the same interval (is the figure server-bound or client-bound?).
    The PostgreSQL server's own CPU is counted with the sidecars' (it does the storing)."""
    db = backend.new_target()
    started = [start_sidecar(db) for _ in range(replicas)]
    procs, urls = [p for p, _ in started], [u for _, u in started]
    pids = [p.pid for p in procs] + ([_postmaster(backend)] if backend.server is not None else [])
    try:
        ingest(urls, bodies[:2], len(bodies[:2]) * events // len(bodies))  # warm-up: the same run, idempotent
        out = timed_ingest(pids, urls, bodies, events, clients)
        stored = httpx.get(urls[-1] + "/api/runs").json()[0]["sample_count"]
        out["rss_after_ingest"] = sum(rss_mib(p.pid) for p in procs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
    assert stored == events, (stored, events)
    backend.drop(db)
    return out


def timed_ingest(pids: list[int], urls: list[str], bodies: Iterable[bytes], events: int, clients: int) -> dict:
    """events/s, with the CPU of `pids` (and their children) and of this process over the same interval."""
    server0, client0, t = sum(map(cpu_s, pids)), time.process_time(), time.perf_counter()
    rate = ingest(urls, bodies, events, clients)
    wall = time.perf_counter() - t
    return {"ingest": rate, "server_cores": (sum(map(cpu_s, pids)) - server0) / wall,
            "client_cores": (time.process_time() - client0) / wall}


def _postmaster(backend: Backend) -> int:
    return int((backend.server.data / "postmaster.pid").read_text().split()[0])


def run_ingest(configs: list[tuple[Backend, int]], requests: int, spans: int, rounds: int,
               clients: int) -> list[dict]:
    """`rounds` rounds; each times the two decode peers, then one ingest per (backend, replicas)
    configuration, in turn (the machine is shared: interleaving keeps the sides of a ratio under
    the same load). Per configuration: medians, and each round's figures."""
    rng = random.Random(0)
    bodies = [build_request(rng, "ingest", step, spans).SerializeToString() for step in range(requests)]
    events = requests * spans * EVENTS_PER_SPAN
    per_round: list[list[dict]] = [[] for _ in configs]
    for _ in range(rounds):
        parse, walk = decode_rates(bodies, events)
        first = None
        for i, (backend, replicas) in enumerate(configs):
            r = ingest_round(backend, bodies, events, clients, replicas) | {"parse": parse, "walk": walk}
            r["ratio_walk"], r["ratio_parse"] = r["ingest"] / walk, r["ingest"] / parse
            first = first or r["ingest"]
            r["ratio_first"] = r["ingest"] / first  # to the first configuration (SQLite) of the same round
            per_round[i].append(r)
    out = []
    for rounds_of in per_round:
        med = {k: statistics.median(r[k] for r in rounds_of) for k in rounds_of[0]}
        out.append(med | {"events": events, "mb": sum(map(len, bodies)) / 2**20, "rounds": rounds_of})
    return out


def run_queries(db: Path | str, samples: int, per_step: int, n: int) -> dict:
    t = time.perf_counter()
    if isinstance(db, Path) and db.exists():  # --query-db: a store loaded by an earlier run (minutes to load)
        store = open_store(db)
        steps = len(store.steps("big", ["kl"]))
        assert store.runs()[0]["sample_count"] >= samples, "the kept store has fewer samples than asked"
        store.close()
    else:
        steps = bulk_load(db, samples, per_step, random.Random(1))
    load_s = time.perf_counter() - t
    store = open_store(db)
    size = store.size_bytes()
    store.close()
    proc, url = start_sidecar(db)
    out = {"samples": samples, "steps": steps, "load_s": load_s, "db_mib": size / 2**20}
    try:
        out |= query_mix(url, steps, n)
        out["rss_after_queries"] = rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    return out


def query_mix(url: str, steps: int, n: int) -> dict[str, tuple[float, float]]:
    """(p50, p99) ms of each query of the mix, `n` requests each after 5 to warm up, over HTTP keep-alive."""
    out = {}
    mid = steps // 2
    cases = {
        "samples: latest step (default), 100 rows": ("/api/runs/big/samples", {}),
        "samples: one step, order_by=reward desc": ("/api/runs/big/samples", {"step": mid, "order_by": "reward", "desc": "true"}),
        "samples: one step, order_by=<dynamic JSON column>": ("/api/runs/big/samples", {"step": mid, "order_by": "reward.format"}),
        "samples: whole run, order_by=reward desc, 100 rows": ("/api/runs/big/samples", {"step_min": 0, "order_by": "reward", "desc": "true"}),
        "samples: step range of 10, reward range": ("/api/runs/big/samples", {"step_min": mid, "step_max": mid + 9, "reward_min": 0.5}),
        "steps: every step of the run, metrics=kl,reward": ("/api/runs/big/steps", {"metrics": "kl,reward"}),
        "steps: 100-step range, all 62 columns": ("/api/runs/big/steps", {"step_min": mid, "step_max": mid + 99}),
        # What a chart of the whole run asks: downsampled to 1,000 rows (M4), spikes kept.
        "steps: every step downsampled, metrics=kl,reward&points=1000": ("/api/runs/big/steps", {"metrics": "kl,reward", "points": 1000}),
        "steps: every step downsampled, all 62 columns, points=1000": ("/api/runs/big/steps", {"points": 1000}),
    }
    whole = cases["steps: every step of the run, metrics=kl,reward"]
    with httpx.Client(base_url=url, timeout=60) as client:
        # The sidecar holds a run's steps once it has read them (sidecar/store/_step_series.py):
        # the first read after a start reads them all. One request, so p50 = p99 = that one.
        out["steps: first read after the sidecar started, metrics=kl,reward"] = latency(client, *whole, 1)
        for name, (path, params) in cases.items():
            latency(client, path, params, 5)  # warm the page cache and connection
            out[name] = latency(client, path, params, n)
        # A live run: a new step (its step span and phases, no samples) is stored before each
        # read, so each read brings the held steps up to date first.
        # The steps after the run's last: a fill that goes on stores its own over them.
        rng = random.Random(3)
        news = (build_request(rng, "big", steps + i, 0, step_span=True).SerializeToString() for i in range(n))
        out["steps: every step of the run, metrics=kl,reward, a new step stored before each read"] = latency(
            client, *whole, n, before=lambda: client.post("/v1/traces", content=next(news),
                                                          headers={"Content-Type": "application/x-protobuf"}).raise_for_status())
    return out


def run_fill(backend: Backend, plan: list[tuple[int, int]], n: int, clients: int) -> list[dict]:
    """One run filled over HTTP the way a long training run fills it, segment by segment: each
    (replicas, samples) of `plan` ingests through that many sidecars until the run holds that many
    samples (sidecars are restarted where the count changes), then times the query mix through the
    first. Per segment: the ingest rate, CPU, load average, store size and the queries."""
    db = backend.new_target()
    procs: list[subprocess.Popen] = []
    filler, done, out = Filler(random.Random(2), "big"), 0, []
    try:
        for replicas, size in plan:
            if len(procs) != replicas:
                _stop(procs)
                started = [start_sidecar(db) for _ in range(replicas)]
                procs, urls = [p for p, _ in started], [u for _, u in started]
                pids = [p.pid for p in procs] + ([_postmaster(backend)] if backend.server is not None else [])
            steps = -(-size // Filler.PER_STEP)
            events = (steps - done) * Filler.PER_STEP
            load = os.getloadavg()[0]
            segment = timed_ingest(pids, urls, filler.bodies(range(done, steps)), events, clients)
            segment |= {"name": f"{backend.name} x{replicas}", "from": done * Filler.PER_STEP,
                        "samples": steps * Filler.PER_STEP, "steps": steps, "load": (load, os.getloadavg()[0])}
            stored = httpx.get(urls[0] + "/api/runs").json()[0]["sample_count"]
            assert stored == segment["samples"], (stored, segment["samples"])
            done = steps
            store = open_store(db)
            segment["db_mib"] = store.size_bytes() / 2**20
            store.close()
            segment["queries"] = query_mix(urls[0], steps, n)
            segment["load_after_queries"] = os.getloadavg()[0]
            out.append(segment)
            print(f"# {segment['name']} at {segment['samples']:,}: {segment}", flush=True)
    finally:
        _stop(procs)
        backend.drop(db)
    return out


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="where the databases go (default: a temp folder)")
    ap.add_argument("--rounds", type=int, default=5, help="ingest rounds (medians are reported)")
    ap.add_argument("--clients", type=int, default=4,
                    help="concurrent HTTP connections for ingest (collector/config.yaml's num_consumers: 4)")
    ap.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL", help="the sidecar's setting (SQLite)")
    ap.add_argument("--workers", type=int, default=None,
                    help="the sidecar's ingest_workers (default: its own default; 0: in process)")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2],
                    help="sidecar processes sharing the database during ingest (more than 1: PostgreSQL only)")
    ap.add_argument("--ingest-only", action="store_true", help="skip the 1M-sample query part")
    ap.add_argument("--query-db", type=Path, default=None,
                    help="keep the SQLite query store here and reuse it if it exists (skips the bulk load)")
    ap.add_argument("--fill", type=int, nargs="+", default=None, metavar="SAMPLES",
                    help="instead: fill one run per backend over HTTP to each size in turn (e.g. 1000000 "
                         "10000000), timing ingest per segment and the query mix at each size; on PostgreSQL "
                         "with the first of --replicas, then --fill-more samples more with each further count")
    ap.add_argument("--requests", type=int, default=400, metavar="N",
                    help="requests per query of the mix (after 5 to warm up); p99 is the N*0.99-th")
    ap.add_argument("--fill-more", type=int, default=500_000, metavar="SAMPLES",
                    help="with --fill: samples ingested through each further replica count (default 500000)")
    args = ap.parse_args()
    global SYNCHRONOUS, WORKERS
    SYNCHRONOUS, WORKERS = args.synchronous, args.workers
    requests, spans, samples, n = (4, 4, 20_000, 50) if args.quick else (40, 8, args.samples, args.requests)
    names = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        tmp = Path(d)
        backends = [Backend(name, tmp) for name in names]
        try:
            configs = [(b, r) for b in backends for r in (args.replicas if b.name == "postgresql" else [1])]
            if args.fill:
                fills = []
                for b in backends:
                    counts = args.replicas if b.name == "postgresql" else [1]
                    last = max(args.fill)
                    plan = [(counts[0], size) for size in sorted(args.fill)]
                    plan += [(r, last + k * args.fill_more) for k, r in enumerate(counts[1:], 1)]
                    fills += run_fill(b, plan, n, args.clients)
                _print_header()
                _print_fills(fills, args, n)
                return
            ingests = run_ingest(configs, requests, spans, 2 if args.quick else args.rounds, args.clients)
            queries = []
            if not args.ingest_only:
                for b in backends:
                    target = (args.query_db or tmp / "query.db") if b.name == "sqlite" else b.server.new_database()
                    queries.append((b.name, run_queries(target, samples, 1000, n)))
        finally:
            for b in backends:
                b.close()
    _print_header()
    for (b, replicas), ing in zip(configs, ingests):
        _print_ingest(b.name, replicas, ing, args, requests, spans)
    for (b, replicas), ing in list(zip(configs, ingests))[1:]:
        print(f"\ningest ratio {b.name} x{replicas} / {configs[0][0].name}: median of per-round ratios "
              f"{ing['ratio_first']:.2f} (rounds: {', '.join(format(r['ratio_first'], '.2f') for r in ing['rounds'])})")
    for name, q in queries:
        _print_queries(name, q, n)


def _print_header() -> None:
    print(f"# sidecar benchmark  {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC  {platform.node()}  "
          f"{os.cpu_count()} cpus  python {platform.python_version()}  "
          f"load average at the end {os.getloadavg()[0]:.1f} (shared machine)")


def _print_fills(segments: list[dict], args, n: int) -> None:
    print(f"\n## fill over HTTP, one run per backend ({Filler.PER_STEP} samples per step in exports of "
          f"{Filler.SPANS} spans x 64 events, {args.clients} clients, synchronous={args.synchronous}, "
          f"ingest_workers={'default' if args.workers is None else args.workers}), backends one after another")
    print("| configuration | samples | ingest events/s over the segment | ratio to SQLite's same segment | "
          "CPU cores (servers, workers, PostgreSQL) | load average start-end | store MiB |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    sqlite = {seg["from"]: seg["ingest"] for seg in segments if seg["name"].startswith("sqlite")}
    for seg in segments:
        ratio = f"{seg['ingest'] / sqlite[seg['from']]:.2f}" if seg["from"] in sqlite else "-"
        print(f"| {seg['name']} | {seg['from']:,}-{seg['samples']:,} | {seg['ingest']:,.0f} | {ratio} | "
              f"{seg['server_cores']:.2f} | {seg['load'][0]:.1f}-{seg['load'][1]:.1f} | {seg['db_mib']:,.0f} |")
    heads = [f"{seg['name']} at {seg['samples']:,} ({seg['steps']:,} steps)" for seg in segments]
    print(f"\nqueries, {n} requests each: p50 / p99 ms [requests over {SLOW_MS:.0f} ms: here, of them timed so "
          f"by the sidecar]; load average after each column: "
          f"{', '.join(format(seg['load_after_queries'], '.1f') for seg in segments)}")
    print("| query | " + " | ".join(heads) + " |\n| --- |" + " ---: |" * len(heads))
    for query in segments[0]["queries"]:
        cells = (_cell(seg["queries"][query]) for seg in segments)
        print(f"| {query} | " + " | ".join(cells) + " |")


def _cell(figures: tuple[float, float, int, int]) -> str:
    p50, p99, slow, in_server = figures
    return f"{p50:.1f} / {p99:.1f}" + (f" [{slow}, {in_server}]" if slow or in_server else "")


def _print_ingest(name: str, replicas: int, ing: dict, args, requests: int, spans: int) -> None:
    print(f"\n## {name}, {replicas} sidecar(s): ingest: {ing['events']} events in {requests} requests of {spans} "
          f"spans x 64 events ({ing['mb']:.1f} MiB), {args.clients} clients, synchronous={args.synchronous}, "
          f"ingest_workers={'default' if args.workers is None else args.workers}; medians of {len(ing['rounds'])} rounds")
    print("| measure | events/s |\n| --- | ---: |")
    print(f"| sidecar ingest over HTTP (decode + extract + commit) | {ing['ingest']:,.0f} |")
    print(f"| peer: `FromString` + reading every attribute into Python values | {ing['walk']:,.0f} |")
    print(f"| bare `FromString` (lazy upb parse, no Python objects) | {ing['parse']:,.0f} |")
    print(f"\nratio ingest / peer (parse + read attributes): {ing['ratio_walk']:.2f} "
          f"(per round: {', '.join(format(r['ratio_walk'], '.2f') for r in ing['rounds'])}); "
          f"ingest / bare FromString: {ing['ratio_parse']:.3f}")
    print(f"per round ingest events/s: {', '.join(format(r['ingest'], ',.0f') for r in ing['rounds'])}")
    print(f"CPU during ingest: sidecar(s) with workers{' and the PostgreSQL server' if name == 'postgresql' else ''} "
          f"{ing['server_cores']:.2f} cores, benchmark client {ing['client_cores']:.2f} cores")
    print(f"sidecar RSS after ingest (servers + workers): {ing['rss_after_ingest']:.0f} MiB")


def _print_queries(name: str, q: dict, n: int) -> None:
    print(f"\n## {name}: queries: {q['samples']:,} samples over {q['steps']} steps, db {q['db_mib']:,.0f} MiB "
          f"(bulk load {q['load_s']:.0f} s); {n} requests each, HTTP keep-alive")
    print(f"| query | p50 ms / p99 ms [over {SLOW_MS:.0f} ms: here, in the sidecar] |\n| --- | ---: |")
    for key, value in q.items():
        if isinstance(value, tuple):
            print(f"| {key} | {_cell(value)} |")
    print(f"\nsidecar RSS after queries on the {q['samples']:,}-sample store: {q['rss_after_queries']:.0f} MiB")


if __name__ == "__main__":
    main()
