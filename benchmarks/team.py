"""A team's load: many trainers through the real collector into two sidecar replicas on one PostgreSQL.

    .venv/bin/python benchmarks/team.py                          # 50 trainers for 10 minutes
    .venv/bin/python benchmarks/team.py --trainers 10 --minutes 2   # a short run while developing
    .venv/bin/python benchmarks/team.py --minutes 40 --last-replica OTEL_GRPO_SIDECAR_HEAP_RELEASE_S=0
                                          # an A/B of a sidecar setting: the replicas share the load

Trainers: the real `Telemetry` (emit_in="thread", the default, so each trainer's spans, metrics
and spill are made on its own threads as in a real training process), configured as compose's
trainer (OTLP/gRPC to the collector with its bearer token, metrics every 5 s). Each runs a step
every 10-30 s (its own period, first step at a random point of it, so the team is staggered),
sleeping through its rollout, reward and update phases; each step records every catalog scalar
(as tests/stack/collector_run.py does, with noisy values), per-sample vectors and 64-256 sample
rows whose prompt and completion hold 0.5-4 KB of text. The usual selection keeps 12 of them
(top, bottom and random 4); about one step in 20 is anomalous (KL beyond the alert threshold) and
keeps every row. The trainers run as `--hosts` processes (5) of several `Telemetry` instances each:
50 Python processes would not fit two cores, while each instance keeps its own exporters, its own
connection to the collector and its own spill, so the collector and the sidecars see 50 clients.
A host's trainers share its GIL, which costs them nothing here: they sleep nearly all the time.
CPU budget: the whole stack must fit beside other work on two shared cores; the run prints the cores
each component used and how many of its threads waited for one (benchmarks/README.md, team, for a
run's figures), so a latency can be told from the machine's load.

The stack: compose's collector/config.yaml in the collector built from collector/builder-config.yaml,
and compose's Prometheus (committed rules) and Alertmanager, on free local ports as
tests/stack/test_collector_e2e.py starts them (its `Stack`); two sidecar processes on one database of
a PostgreSQL server started on a temporary cluster (fsync on) as benchmarks/sidecar.py does (its
`Backend`, `start_sidecar`). The collector exports to one sidecar URL; in front of the replicas sits
a round-robin TCP proxy in this process, as a Kubernetes Service balances connections. Prometheus
scrapes the sidecar through it.

Measured: acknowledged loss (every sample in a trainer's spill whose span the collector answered
OK must be in the database once the collector's queue has drained; the acknowledgements are
recorded by wrapping the trainers' span exporter), ingest p50/p99 (the replicas' own request
duration histograms for POST /v1/traces, interpolated within buckets as histogram_quantile does),
query p50/p99 of a mix run alongside by `--query-clients` clients against the replicas in turn
(a run's latest-step samples, /api/runs, a run's steps), each run's series in Prometheus, errors
(trainers' export failures, the collector's refused or failed spans, the sidecars' non-200s), the
RSS of the collector and each sidecar (with its ingest workers) every 30 s, and the CPU of every
component over the trainers' minutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sidecar as bench  # noqa: E402  (benchmarks/sidecar.py: PostgreSQL, sidecar processes, /proc readings)
from _proxy import TcpProxy, pipe  # noqa: E402  (benchmarks/_proxy.py)

RSS_EVERY_S = 30.0
MiB = 1 << 20
FLAT_MARGIN = 0.10  # "flat": the last minute's largest RSS within 10% of the second minute's
# Healthy values of the scalars that the alerts and the anomaly test judge (catalog.STEP_CHECKS, the
# outlier test's reward): 0.5 would put every step of every run beyond its threshold.
HEALTHY = {"reward": (0.4, 0.6), "mismatch_k3_kl": (0.0002, 0.0008), "rollout_is_eff_sample_size": (0.9, 1.0),
           "mismatch_chi2_token": (0.02, 0.1), "rollout_is_veto_fraction": (0.0, 0.005),
           "rollout_is_catastrophic_token_fraction": (0.0, 0.0005), "clip_ratio_region_mean": (0.01, 0.05),
           "completions_clipped_ratio": (0.01, 0.05), "frac_reward_zero_std": (0.1, 0.3), "grad_norm": (0.5, 2.0)}
QUERY_KINDS = ("samples: a run's latest step", "runs: /api/runs", "steps: a run's steps, every column")


# ---- trainers (one host process runs several) -------------------------------------------------

def host_main(args: argparse.Namespace) -> None:
    """Run this host's trainers (every `--hosts`-th of them) until `--until`, then write what they saw."""
    from otel_grpo.catalog import spans
    from otel_grpo.telemetry import Telemetry, _quiet

    acked: dict[str, set[tuple[int, int]]] = {}
    lock = threading.Lock()
    export = _quiet.QuietSpanExporter.export

    def recording(self, batch):  # what the collector answered OK, per run: (step, sample_index)
        result = export(self, batch)
        if result.name == "SUCCESS":
            with lock:
                for span in batch:
                    if span.name == spans.SAMPLES_SPAN:
                        seen = acked.setdefault(span.attributes[spans.RUN_ID_ATTR], set())
                        step = span.attributes[spans.STEP_ATTR]
                        seen.update((step, e.attributes["sample_index"]) for e in span.events
                                    if e.name == spans.SAMPLE_EVENT)
        return result

    _quiet.QuietSpanExporter.export = recording
    out = Path(args.out)
    mine = [k for k in range(args.trainers) if k % args.hosts == args.host]
    corpus = _corpus(random.Random(args.seed * 1000 + args.host))
    results: dict[str, dict] = {}
    threads = [threading.Thread(target=_trainer, args=(Telemetry, f"team-{k:02d}", out, args, corpus, results))
               for k in mine]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run_id, r in results.items():
        r["acked"] = sorted(acked.get(run_id, ()))
    (out / f"host_{args.host}.json").write_text(json.dumps(results))


def _corpus(rng: random.Random) -> str:
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)]
    return " ".join(rng.choices(words, k=60_000))


def _trainer(telemetry_cls, run_id: str, out: Path, args: argparse.Namespace, corpus: str, results: dict) -> None:
    from tests.stack.collector_run import stats

    rng = random.Random(f"{args.seed}:{run_id}")
    period = rng.uniform(10.0, 30.0)
    tel = telemetry_cls.from_env(run_id=run_id, output_dir=str(out / "runs" / run_id), model_name="team-bench")
    next_at, step, anomalous = args.start + rng.uniform(0.0, period), 0, 0
    try:
        while next_at + period <= args.until:
            time.sleep(max(0.0, next_at - time.time()))
            n = rng.randint(64, 256)
            spike = rng.random() < 0.05
            with tel.step(step) as s:
                for phase, share in (("rollout", 0.6), ("reward", 0.1), ("update", 0.25)):
                    with s.phase(phase):
                        time.sleep(period * share * rng.uniform(0.8, 1.0))
                values = stats(step, 10**9)  # every catalog scalar at 0.5; the checked ones healthy
                values.update({k: rng.uniform(lo, hi) for k, (lo, hi) in HEALTHY.items()},
                              kl=1.5 if spike else rng.uniform(0.01, 0.05), loss=rng.gauss(0.0, 0.1), step_time=period)
                rows = [_row(rng, corpus, i) for i in range(n)]
                values.samples.update(sample_reward=[r["reward"] for r in rows],
                                      sample_advantage=[r["advantage"] for r in rows],
                                      sample_completion_length=[r["completion_length"] for r in rows],
                                      sample_is_ratio=[rng.uniform(0.9, 1.1) for _ in rows])
                s.record(values)
                s.samples(rows)
            anomalous += spike
            step += 1
            next_at += period
    finally:
        tel.finish()
    results[run_id] = {"steps": step, "anomalous_steps": anomalous, "period_s": period,
                       "export_failures": tel.export_health.failures}


def _row(rng: random.Random, corpus: str, i: int) -> dict:
    def text(lo: int, hi: int) -> str:
        n = rng.randint(lo, hi)
        at = rng.randrange(len(corpus) - n)
        return corpus[at:at + n]

    completion = text(300, 3000)
    reward = rng.random()
    return {"prompt": text(200, 1000), "completion": completion, "reward": reward,
            "advantage": rng.gauss(0.0, 1.0), "completion_length": len(completion) / 4, "reward.format": reward > 0.5}


# ---- the stack -----------------------------------------------------------------------------

class RoundRobinProxy(TcpProxy):
    """A TCP proxy on 127.0.0.1:`port` handing each new connection to the next of `targets` (host, port),
    as a Kubernetes Service (kube-proxy) balances connections between replicas."""

    def __init__(self, port: int, targets: list[tuple[str, int]]) -> None:
        self.targets = targets
        self.connections = [0] * len(targets)
        self.ingest_ms: list[float] = []
        """Each POST /v1/traces from its first byte in to the first byte of its answer out, as the collector
        waits for it (HTTP/1.1: a connection carries one request at a time)."""
        self.ingest_at: list[float] = []  # when each of them was answered (time.monotonic)
        self._turn = itertools.count()
        super().__init__(port, "proxy")

    def upstream(self) -> tuple[str, int]:
        i = next(self._turn) % len(self.targets)
        self.connections[i] += 1
        return self.targets[i]

    def pipes(self, reader, writer, up_reader, up_writer):
        since: list[float | None] = [None]  # when the request in flight began, if it is an ingest request

        def request(data: bytes) -> None:
            if since[0] is None and data.startswith(b"POST /v1/traces"):
                since[0] = time.perf_counter()

        def answer(data: bytes) -> None:
            if since[0] is not None:
                self.ingest_ms.append((time.perf_counter() - since[0]) * 1000)
                self.ingest_at.append(time.monotonic())
                since[0] = None

        return pipe(reader, up_writer, seen=request), pipe(up_reader, writer, seen=answer)


def start_stack(tmp: Path, replicas: int, last_settings: dict[str, str] | None = None) -> dict:
    """PostgreSQL, the sidecar replicas, the proxy, Alertmanager, the collector and Prometheus: what to stop and
    where each is. `last_settings`: environment variables for the last replica only."""
    from otel_grpo.stack._process import find_binary
    from tests.stack import test_collector_e2e as e2e
    from tests.stack.conftest import free_port

    binaries = {c: find_binary(c, pinned_only=True) for c in ("otelcol", "prometheus", "alertmanager")}
    pg = bench.Backend("postgresql", tmp)
    stack = {"pg": pg, "sidecars": [], "managed": []}
    try:
        db = pg.new_target()
        os.environ["OTEL_GRPO_SIDECAR_TOKEN"] = e2e.TOKEN  # what the collector and Alertmanager send
        for i in range(replicas):
            stack["sidecars"].append(bench.start_sidecar(db, last_settings if i == replicas - 1 else None))
        st = e2e.Stack(ROOT, tmp, free_port, binaries)  # its sidecar port is the proxy's
        stack["proxy"] = RoundRobinProxy(st.ports["sidecar"], [("127.0.0.1", int(url.rsplit(":", 1)[1]))
                                                               for _, url in stack["sidecars"]])
        for make in (st.alertmanager, st.collector, st.prometheus):
            managed = make()
            managed.start()
            stack["managed"].append(managed)
            managed.wait_ready(120)
        stack |= {"st": st, "db": db, "collector": stack["managed"][1].proc.pid,
                  "otlp_token": e2e.OTLP_TOKEN}
        return stack
    except BaseException:
        stop_stack(stack)
        raise


def stop_stack(stack: dict) -> None:
    for managed in reversed(stack["managed"]):
        managed.stop()
    for proc, _ in stack["sidecars"]:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    stack["pg"].close()


def start_hosts(stack: dict, args: argparse.Namespace, out: Path, start: float, until: float) -> list:
    st = stack["st"]
    env = os.environ | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{st.ports['grpc']}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{stack['otlp_token']}",
        "OTEL_GRPO_METRICS_EXPORTERS": "otlp", "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
        "OTEL_METRIC_EXPORT_INTERVAL": "5000", "OTEL_SERVICE_NAME": "grpo-trainer",  # as compose's trainer
        "PYTHONPATH": str(ROOT)}
    return [subprocess.Popen([sys.executable, __file__, "--host", str(h), "--hosts", str(args.hosts),
                              "--trainers", str(args.trainers), "--seed", str(args.seed), "--out", str(out),
                              "--start", repr(start), "--until", repr(until)],
                             env=env, stdout=open(out / f"host_{h}.log", "w"), stderr=subprocess.STDOUT)
            for h in range(args.hosts)]


# ---- measuring ---------------------------------------------------------------------------

class Sampler:
    """RSS of the collector and each sidecar (with its workers) every `RSS_EVERY_S`, and the CPU of every
    component between `begin()` and `end()`."""

    def __init__(self, stack: dict, hosts: list[subprocess.Popen]) -> None:
        self.rss_pids = {"collector": stack["collector"]} | {
            f"sidecar {i + 1}": proc.pid for i, (proc, _) in enumerate(stack["sidecars"])}
        managed = {m.name: m.proc.pid for m in stack["managed"]}
        self.cpu_pids = {"trainers (hosts)": [h.pid for h in hosts], "collector": [stack["collector"]],
                         "sidecars (with workers)": [p.pid for p, _ in stack["sidecars"]],
                         "PostgreSQL": [bench._postmaster(stack["pg"])], "Prometheus": [managed["prometheus"]],
                         "Alertmanager": [managed["alertmanager"]]}
        self.rss: dict[str, list[tuple[float, float]]] = {name: [] for name in self.rss_pids}
        self.cache_urls = {f"sidecar {i + 1}": url for i, (_, url) in enumerate(stack["sidecars"])}
        self.cached: dict[str, list[tuple[float, float]]] = {name: [] for name in self.cache_urls}
        """Each sidecar's step cache (MiB, its own gauge) at each RSS sample: what of its RSS is the runs' step
        histories it holds, which grow with the steps written, up to `step_cache_mb`."""
        self._stop = threading.Event()

    def begin(self) -> None:
        self.t0 = time.monotonic()
        self.cpu0 = {name: sum(map(bench.cpu_s, pids)) for name, pids in self.cpu_pids.items()}
        self.cpu0["this process (proxy, queries)"] = time.process_time()
        self.wait0 = {name: sum(map(run_delay_s, pids)) for name, pids in self.cpu_pids.items()}
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            at = time.monotonic() - self.t0
            for name, pid in self.rss_pids.items():
                self.rss[name].append((at, bench.rss_mib(pid)))
            for name, url in self.cache_urls.items():
                self.cached[name].append((at, step_cache_mib(url)))
            if self._stop.wait(RSS_EVERY_S):
                return

    def end(self) -> tuple[dict[str, float], dict[str, float]]:
        """Cores used by each component since `begin()` (the hosts' CPU is read before they exit), and how many
        of its threads waited for a core on average (runnable, not running: the machine's load)."""
        wall = time.monotonic() - self.t0
        now = {name: sum(map(bench.cpu_s, pids)) for name, pids in self.cpu_pids.items()}
        now["this process (proxy, queries)"] = time.process_time()
        waited = {name: (sum(map(run_delay_s, pids)) - self.wait0[name]) / wall for name, pids in self.cpu_pids.items()}
        self._stop.set()
        self._thread.join()
        return {name: (now[name] - self.cpu0[name]) / wall for name in now}, waited


def run_delay_s(pid: int) -> float:
    """Seconds the threads of `pid` and its live descendants spent runnable but waiting for a CPU
    (/proc/<pid>/task/<tid>/schedstat, second field)."""
    total = 0
    for p in bench.tree(pid):
        for stat in Path(f"/proc/{p}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


def run_queries(urls: list[str], runs: list[str], stop: threading.Event, every_s: float, client: int,
                out: dict[str, list[float]], errors: list[str]) -> None:
    """One client: a query of the mix every `every_s` against the replicas in turn, timed from here."""
    rng = random.Random(client)
    sessions = [httpx.Client(base_url=url, timeout=30) for url in urls]
    kinds = itertools.cycle(QUERY_KINDS[client % 3:] + QUERY_KINDS[:client % 3])
    try:
        for i in itertools.count():
            if stop.wait(every_s * rng.uniform(0.5, 1.5)):
                return
            kind, run = next(kinds), rng.choice(runs)
            path, params = {QUERY_KINDS[0]: (f"/api/runs/{run}/samples", {}), QUERY_KINDS[1]: ("/api/runs", {}),
                            QUERY_KINDS[2]: (f"/api/runs/{run}/steps", {})}[kind]
            t = time.perf_counter()
            try:
                r = sessions[(client + i) % len(sessions)].get(path, params=params)
            except httpx.HTTPError as exc:
                errors.append(f"{kind}: {exc!r}")
                continue
            if r.status_code == 200:
                out[kind].append((time.perf_counter() - t) * 1000)
            elif r.status_code != 404:  # a run with no step stored yet
                errors.append(f"{kind}: {r.status_code}")
    finally:
        for s in sessions:
            s.close()


def scrape(url: str) -> list:
    return list(text_string_to_metric_families(httpx.get(url, timeout=10).text))


def sample(families: list, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def ingest_quantiles(urls: list[str]) -> tuple[float, float, int, dict[str, int]]:
    """p50, p99 (ms) of POST /v1/traces answered 200 over every replica (bucket-interpolated), their count, and
    the count of each other status."""
    buckets: dict[float, float] = {}
    others: dict[str, int] = {}
    for url in urls:
        for family in scrape(url + "/metrics"):
            if family.name != "otel_grpo_sidecar_request_duration_seconds":
                continue
            for s in family.samples:
                if s.labels.get("route") != "/v1/traces" or s.labels.get("method") != "POST":
                    continue
                if s.labels["status"] != "200":
                    if s.name.endswith("_count"):
                        others[s.labels["status"]] = others.get(s.labels["status"], 0) + int(s.value)
                elif s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0) + s.value
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0

    def quantile(q: float) -> float:
        rank, lower, below = q * total, 0.0, 0.0
        for le in bounds:
            if buckets[le] >= rank:
                if le == float("inf"):
                    return lower * 1000
                return (lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-9)) * 1000
            lower, below = le, buckets[le]
        return float("nan")

    return quantile(0.5), quantile(0.99), int(total), others


def drain(stack: dict, timeout_s: float = 600.0) -> float:
    """Wait until the collector's sidecar queue is empty and the database's sample count has stood still for
    10 s; the seconds it took."""
    import psycopg

    st, t0, last, still = stack["st"], time.monotonic(), -1, 0.0
    collector = f"http://127.0.0.1:{st.ports['self']}/metrics"
    while time.monotonic() - t0 < timeout_s:
        queued = sample(scrape(collector), "otelcol_exporter_queue_size", exporter="otlp_http/sidecar")
        with psycopg.connect(stack["db"]) as conn:
            count = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        still = still + 2.0 if count == last and queued == 0 else 0.0
        if still >= 10.0:
            break
        last = count
        time.sleep(2.0)
    return time.monotonic() - t0


def loss(stack: dict, out: Path, hosts: int) -> dict:
    """Spilled, acknowledged and stored samples per run; what was acknowledged but is not stored."""
    import psycopg

    from otel_grpo.telemetry._spill import SpillReader

    results: dict[str, dict] = {}
    for h in range(hosts):
        results |= json.loads((out / f"host_{h}.json").read_text())
    with psycopg.connect(stack["db"]) as conn:
        stored: set[tuple[str, int, int]] = set(conn.execute("SELECT run_id, step, sample_index FROM samples"))
        steps_stored = dict(conn.execute("SELECT run_id, count(*) FROM steps GROUP BY run_id"))
    totals = dict.fromkeys(("spilled", "kept whole", "acknowledged", "stored", "missing", "spilled, not acknowledged",
                            "stored, not spilled", "export failures", "steps", "steps missing"), 0)
    missing_runs = {}
    spilled_all = set()
    for run_id, r in results.items():
        reader = SpillReader(out / "runs" / run_id)
        spilled = {(row["step"], row["sample_index"]) for step in reader.steps for row in reader.samples(step)}
        whole = sum(row.get("selection") == "all" for step in reader.steps for row in reader.samples(step))
        acked = {tuple(x) for x in r["acked"]}
        mine = {(s, i) for run, s, i in stored if run == run_id}
        gone = (spilled & acked) - mine
        if gone:
            missing_runs[run_id] = len(gone)
        spilled_all |= {(run_id, s, i) for s, i in spilled}
        for key, n in (("spilled", len(spilled)), ("kept whole", whole), ("acknowledged", len(acked)),
                       ("stored", len(mine)), ("missing", len(gone)), ("spilled, not acknowledged", len(spilled - acked)),
                       ("export failures", r["export_failures"]), ("steps", r["steps"]),
                       ("steps missing", r["steps"] - steps_stored.get(run_id, 0))):
            totals[key] += n
    totals["stored, not spilled"] = len(stored - spilled_all)
    return {"totals": totals, "missing_runs": missing_runs, "results": results}


def prometheus_check(stack: dict, results: dict) -> dict:
    """Each run's series in Prometheus: the runs with any, series per run, and the runs whose `grpo_steps_total`
    reached the trainer's step count (polled for up to a minute: the last export lands within a scrape)."""
    url = stack["st"].url["prometheus"] + "/api/v1/query"

    def query(q: str) -> dict[str, float]:
        data = httpx.get(url, params={"query": q}, timeout=60).json()["data"]["result"]
        return {r["metric"].get("run_id", ""): float(r["value"][1]) for r in data}

    deadline, steps = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        steps = query('max by (run_id) (max_over_time(grpo_steps_total{run_id=~"team-.*"}[2h]))')
        if all(steps.get(run) == r["steps"] for run, r in results.items()):
            break
        time.sleep(5)
    series = query('count by (run_id) (last_over_time({run_id=~"team-.*"}[2h]))')
    finished = query('max by (run_id) (max_over_time(grpo_run_finished{run_id=~"team-.*"}[2h]))')
    counts = sorted(int(series.get(run, 0)) for run in results)
    job = 'job="otel-collector"'  # the collector's exporter: every run's series in one scrape
    scrapes = (query(f"min_over_time(up{{{job}}}[2h])").get("", float("nan")),
               query(f"max_over_time(scrape_duration_seconds{{{job}}}[2h])").get("", float("nan")))
    return {"runs with series": sum(run in series for run in results), "series per run": counts,
            "exporter scrapes": scrapes,
            "steps counted": sum(steps.get(run) == r["steps"] for run, r in results.items()),
            "finished": sum(finished.get(run) == 1 for run in results)}


def errors(stack: dict) -> dict[str, float]:
    families = scrape(f"http://127.0.0.1:{stack['st'].ports['self']}/metrics")
    out = {name: sample(families, name) for name in (
        "otelcol_receiver_refused_spans_total", "otelcol_receiver_refused_metric_points_total",
        "otelcol_exporter_send_failed_spans_total", "otelcol_exporter_enqueue_failed_spans_total",
        "otelcol_exporter_send_failed_metric_points_total")}
    out["otelcol_exporter_sent_spans_total (sidecar)"] = sample(families, "otelcol_exporter_sent_spans_total",
                                                                  exporter="otlp_http/sidecar")
    for i, (_, url) in enumerate(stack["sidecars"]):
        for f in scrape(url + "/metrics"):
            if f.name == "otel_grpo_sidecar_requests_rejected":
                for s in f.samples:
                    if s.name.endswith("_total") and s.value:
                        out[f"sidecar {i + 1} rejected ({s.labels['reason']})"] = s.value
    return out


def log_errors(stack: dict) -> dict[str, list[str]]:
    """Lines at warning level or above that the Go components logged (their log formats: `\terror\t` for the
    collector, `level=WARN` / `level=ERROR` for the others), a shutdown's notice aside."""
    out = {}
    for managed in stack["managed"]:
        lines = managed.log_path.read_text(errors="replace").splitlines() if managed.log_path.exists() else []
        out[managed.name] = [line for line in lines if any(m in line for m in ("\terror\t", "\twarn\t", "level=WARN",
                                                                            "level=ERROR"))
                             and "Received an OS signal" not in line]
    return out


# ---- the run -------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainers", type=int, default=50)
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the trainers train")
    ap.add_argument("--hosts", type=int, default=5, help="processes the trainers run in")
    ap.add_argument("--replicas", type=int, default=2, help="sidecar processes on the one database")
    ap.add_argument("--query-clients", type=int, default=4)
    ap.add_argument("--query-every", type=float, default=1.0, help="seconds between a client's queries (mean)")
    ap.add_argument("--last-replica", action="append", default=[], metavar="VAR=VALUE",
                    help="an environment variable for the last replica only (repeatable): an A/B of a sidecar "
                         "setting in one run, the replicas sharing the load, e.g. OTEL_GRPO_SIDECAR_HEAP_RELEASE_S=0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="keep logs and spills here (default: a temp folder)")
    ap.add_argument("--host", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if any("=" not in v for v in args.last_replica):
        ap.error("--last-replica takes VAR=VALUE")
    if args.host is not None:
        host_main(args)
        return
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        d = Path(tempfile.mkdtemp(prefix="team-", dir=args.keep))
        result = measure(args, d)
        save(result, d)
        report(result, args, d)
        return
    with tempfile.TemporaryDirectory() as d:
        report(measure(args, Path(d)), args, Path(d))


def save(r: dict, tmp: Path) -> None:
    """The series behind the table (RSS samples and the sidecars' step caches beside them, ingest times at the
    proxy in order), for a look at their course."""
    raw = {"rss": r["rss"], "step_cache_mib": r["cached"], "proxy_ingest_ms": r["proxy_ingest_ms"],
           "proxy_ingest_at_s": r["proxy_ingest_at"], "queries_ms": r["queries"]}
    (tmp / "series.json").write_text(json.dumps(raw))


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    stack = start_stack(tmp / "stack", args.replicas, dict(v.split("=", 1) for v in args.last_replica))
    out = tmp / "trainers"
    out.mkdir()
    try:
        start = time.time() + 5.0  # the hosts' imports
        until = start + args.minutes * 60
        hosts = start_hosts(stack, args, out, start, until)
        sampler = Sampler(stack, hosts)
        time.sleep(max(0.0, start - time.time()))
        sampler.begin()
        latencies: dict[str, list[float]] = {k: [] for k in QUERY_KINDS}
        query_errors: list[str] = []
        stop = threading.Event()
        urls = [url for _, url in stack["sidecars"]]
        runs = [f"team-{k:02d}" for k in range(args.trainers)]
        clients = [threading.Thread(target=run_queries, args=(urls, runs, stop, args.query_every, c, latencies,
                                                              query_errors), daemon=True)
                   for c in range(args.query_clients)]
        for c in clients:
            c.start()
        time.sleep(max(0.0, until - time.time()))
        cores, waited = sampler.end()
        stop.set()
        for h in hosts:
            h.wait()
        drained = drain(stack)
        for name, pid in sampler.rss_pids.items():
            sampler.rss[name].append((time.monotonic() - sampler.t0, bench.rss_mib(pid)))
        for name, url in sampler.cache_urls.items():
            sampler.cached[name].append((time.monotonic() - sampler.t0, step_cache_mib(url)))
        lost = loss(stack, out, args.hosts)
        return {"cores": cores, "waited": waited, "rss": sampler.rss, "cached": sampler.cached, "drain_s": drained,
                "loss": lost,
                "ingest": ingest_quantiles(urls), "queries": latencies, "query_errors": query_errors,
                "prometheus": prometheus_check(stack, lost["results"]), "errors": errors(stack),
                "proxy": stack["proxy"].connections, "proxy_ingest_ms": stack["proxy"].ingest_ms,
                "proxy_ingest_at": [t - sampler.t0 for t in stack["proxy"].ingest_at], "host_rc": [h.returncode for h in hosts],
                "load": os.getloadavg(), "log_errors": log_errors(stack)}
    finally:
        stop_stack(stack)


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def step_cache_mib(url: str) -> float:
    """A sidecar's `otel_grpo_sidecar_step_cache_bytes`, in MiB (NaN where it did not answer)."""
    try:
        text = httpx.get(url + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return float("nan")
    line = next((ln for ln in text.splitlines() if ln.startswith("otel_grpo_sidecar_step_cache_bytes ")), None)
    return float("nan") if line is None else float(line.split()[1]) / MiB


def rss_cells(series: list[tuple[float, float]]) -> tuple[str, bool]:
    """first / max / last MiB, the second and the last minute's largest, and whether the last minute's is within
    FLAT_MARGIN of the second minute's."""
    values = [v for _, v in series]
    end = series[-1][0]
    second = max([v for t, v in series if 60 <= t < 120] or values)
    last = max([v for t, v in series if t >= end - 60] or values)
    return (f"{values[0]:.0f} / {max(values):.0f} / {values[-1]:.0f}; minute 2 {second:.0f}, last minute {last:.0f}",
            last <= second * (1 + FLAT_MARGIN))


def report(r: dict, args: argparse.Namespace, tmp: Path) -> None:
    lost, prom, ingest = r["loss"], r["prometheus"], r["ingest"]
    t = lost["totals"]
    print(f"# team benchmark  {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC  {platform.node()}  "
          f"{os.cpu_count()} cpus  python {platform.python_version()}  load average at the end "
          f"{r['load'][0]:.1f} / {r['load'][1]:.1f} / {r['load'][2]:.1f} (shared machine)")
    print(f"\n{args.trainers} trainers in {args.hosts} processes for {args.minutes:g} min, {args.replicas} sidecar "
          f"replicas on one PostgreSQL (proxy connections per replica: {r['proxy']}), {args.query_clients} query "
          f"clients; drained in {r['drain_s']:.0f} s; host exit codes {r['host_rc']}"
          + (f"; the last replica with {' '.join(args.last_replica)}" if args.last_replica else "") + "\n")
    print("| measure | figure |\n| --- | --- |")
    rows = [("steps (stored in the sidecar: all but)", f"{t['steps']:,} ({t['steps missing']} missing)"),
            ("samples spilled (of them in steps kept whole)", f"{t['spilled']:,} ({t['kept whole']:,})"),
            ("acknowledged by the collector / stored", f"{t['acknowledged']:,} / {t['stored']:,}"),
            ("**acknowledged but missing** (runs)", f"**{t['missing']}** ({lost['missing_runs'] or 'none'})"),
            ("spilled, not acknowledged; stored, not spilled", f"{t['spilled, not acknowledged']}; "
                                                              f"{t['stored, not spilled']}"),
            ("trainers' export failures", f"{t['export failures']}"),
            ("ingest p50 / p99 ms (POST /v1/traces, both replicas' histograms)",
             f"{ingest[0]:.1f} / {ingest[1]:.1f} ({ingest[2]:,} requests; other statuses {ingest[3] or 'none'})"),
            ("ingest p50 / p99 ms as the collector waits (timed at the proxy)",
             f"{_q(r['proxy_ingest_ms'], 0.5):.1f} / {_q(r['proxy_ingest_ms'], 0.99):.1f} "
             f"({len(r['proxy_ingest_ms']):,} requests)")]
    for kind, values in r["queries"].items():
        rows.append((f"query p50 / p99 ms: {kind}", f"{_q(values, 0.5):.1f} / {_q(values, 0.99):.1f} "
                                                   f"({len(values)} requests)"))
    rows.append(("query errors", f"{len(r['query_errors'])} {r['query_errors'][:3] or ''}"))
    series = prom["series per run"]
    rows += [("Prometheus: runs with series / steps counter right / finished",
              f"{prom['runs with series']} / {prom['steps counted']} / {prom['finished']} of {len(series)}"),
             ("Prometheus: series per run (min / median / max)",
              f"{series[0]} / {statistics.median(series):.0f} / {series[-1]}" if series else "none"),
             ("Prometheus: the collector exporter's scrapes, lowest `up` / longest duration s",
              "{:g} / {:.2f}".format(*prom["exporter scrapes"]))]
    for name, values in r["rss"].items():
        cells, flat = rss_cells(values)
        rows.append((f"RSS MiB first / max / last: {name}", f"{cells} ({'flat' if flat else 'NOT flat'}, "
                                                          f"{len(values)} samples)"))
        cached = r["cached"].get(name)
        if cached:  # a sidecar: its RSS less the step histories it holds, sample by sample
            cells, flat = rss_cells([(t, v - c) for (t, v), (_, c) in zip(values, cached)])
            rows.append((f"the same less its step cache (last {cached[-1][1]:.0f} MiB)",
                         f"{cells} ({'flat' if flat else 'NOT flat'})"))
    rows.append(("CPU cores over the trainers' minutes", ", ".join(f"{k} {v:.2f}" for k, v in r["cores"].items())
                 + f"; total {sum(r['cores'].values()):.2f}"))
    rows.append(("threads waiting for a core, on average (runnable, not running)",
                 ", ".join(f"{k} {v:.2f}" for k, v in r["waited"].items())))
    rows.append(("warnings and errors in the logs of the collector, Prometheus, Alertmanager (first)",
                 ", ".join(f"{k} {len(v)}" + (f" ({v[0][:160]})" if v else "") for k, v in r["log_errors"].items())))
    rows.append(("collector and sidecar counters", ", ".join(f"{k} {v:g}" for k, v in r["errors"].items())))
    for name, value in rows:
        print(f"| {name} | {value} |")
    print(f"\nflat: the last minute's largest RSS sample at most {FLAT_MARGIN:.0%} above the second minute's; "
          f"logs and spills in {tmp}" + ("" if args.keep else " (deleted)"))


if __name__ == "__main__":
    main()
