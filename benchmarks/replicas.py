"""One run's exports through two collector replicas, as a user sees them in a real Prometheus.

    .venv/bin/python benchmarks/replicas.py --path alternate            # every export on the other replica
    .venv/bin/python benchmarks/replicas.py --path move                 # replica 0, then replica 1 from --move-at
    .venv/bin/python benchmarks/replicas.py --path move --pod-label --nan --move-at 660 --minutes 13
                                          # the chart's labels: a NaN at 6 s, moved 11 minutes later
    .venv/bin/python benchmarks/replicas.py --path single               # the baseline: replica 0 throughout

Two real collectors (compose's collector/config.yaml, the pinned build) and one real Prometheus with the committed
rules, scraping both replicas' exporters and own metrics as compose's jobs do (`honor_labels`); `--pod-label` gives
each exporter target the `pod` label a ServiceMonitor's scrape adds. Between the trainer and the replicas sits a TCP
proxy, as a Service: `alternate` sends each new connection to the next replica and closes a connection idle for
1 s (an idle timeout), so every OTLP/HTTP export lands on the other one; `move` cuts every connection at
`--move-at` and sends new ones to replica 1 (replica 0 stays up and scraped). The trainer is the real `Telemetry`
(OTLP/HTTP, metrics every 10 s, healthy values, a 2-s step; `--nan`: a NaN loss at its step 3), killed with
SIGKILL after `--minutes`; Prometheus runs 5 more minutes so the crash pages.

Printed: the step index's raw samples that went backwards, holes in the instant view while the run lived
(staleness markers), Prometheus's out-of-order and duplicate-sample counters, the min/max of
rate(grpo_steps_total[1m]) (steady: 0.5/s), the largest `run_id:grpo_process:overdue_seconds` while alive, and
every alert of the run, firing or pending, with its times from the trainer's start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _proxy import TcpProxy, pipe  # noqa: E402  (benchmarks/_proxy.py)

from otel_grpo.stack._process import Managed, find_binary  # noqa: E402
from tests.stack.conftest import free_port  # noqa: E402

TOKEN = "replicas-bench"
EXPORT_MS, STEP_S, AFTER_KILL_S = "10000", 2.0, 300.0


class Service(TcpProxy):
    """Each new connection to a replica as `path` says; `alternate` closes connections idle for a second."""

    def __init__(self, port: int, replicas: list[tuple[str, int]], path: str, move_at_s: float) -> None:
        self.replicas, self.path, self.move_at_s = replicas, path, move_at_s
        self.started, self.count = time.monotonic(), 0
        super().__init__(port, "service")

    def _moved(self, at: float) -> bool:
        return self.path == "move" and at - self.started >= self.move_at_s

    def upstream(self) -> tuple[str, int]:
        self.count += 1
        if self.path == "alternate":
            return self.replicas[self.count % 2]
        return self.replicas[int(self._moved(time.monotonic()))]

    def pipes(self, reader, writer, up_reader, up_writer):
        opened, last = time.monotonic(), [time.monotonic()]

        def seen(_: bytes) -> None:
            last[0] = time.monotonic()

        async def cut() -> None:
            while True:
                await asyncio.sleep(0.2)
                now = time.monotonic()
                idle = self.path == "alternate" and now - last[0] > 1.0
                if idle or (self._moved(now) and not self._moved(opened)):
                    writer.close()
                    up_writer.close()
                    return

        async def to_server() -> None:
            task = asyncio.ensure_future(cut())
            await pipe(reader, up_writer, seen=seen)
            task.cancel()

        return to_server(), pipe(up_reader, writer, seen=seen)


def trainer(run_id: str, out: str, nan: bool) -> None:
    """The trainer process: a healthy step every STEP_S seconds until killed."""
    from otel_grpo.telemetry import Telemetry

    tel = Telemetry.from_env(run_id=run_id, output_dir=out)
    step = 0
    while True:
        with tel.step(step) as s:
            with s.phase("rollout"):
                time.sleep(STEP_S)

            def w(x: float, rel: float = 0.1) -> float:
                return x * (1 + rel * (2 * random.random() - 1))

            s.record({"kl": w(0.02), "reward": w(0.5, 0.05), "entropy": w(1.0, 0.02), "tokens_per_second": w(2000.0),
                      "grad_norm": w(1.0, 0.2), "loss": float("nan") if nan and step == 3 else w(0.1), "beta": 0.04,
                      "tokens": 100.0, "samples": 8.0, "step_time": STEP_S})
        step += 1


def _collector(d: Path, i: int) -> tuple[Managed, dict[str, int]]:
    p = {k: free_port() for k in ("grpc", "http", "exporter", "health", "self")}
    env = {"OTELCOL_BIND": "127.0.0.1", "OTELCOL_HEALTH_PORT": str(p["health"]),
           "OTELCOL_OTLP_GRPC_PORT": str(p["grpc"]), "OTELCOL_OTLP_HTTP_PORT": str(p["http"]),
           "OTELCOL_PROMETHEUS_PORT": str(p["exporter"]), "OTELCOL_METRICS_PORT": str(p["self"]),
           "OTELCOL_STORAGE_DIR": str(d / f"storage{i}"), "OTEL_GRPO_SIDECAR_URL": f"http://127.0.0.1:{free_port()}",
           "OTELCOL_SIDECAR_TOKEN_FILE": str(d / "token"), "OTELCOL_OTLP_TOKEN_FILE": str(d / "token")}
    argv = [find_binary("otelcol", pinned_only=True), f"--config={ROOT}/collector/config.yaml"]
    return Managed(f"collector{i}", argv, f"http://127.0.0.1:{p['health']}/", d / f"logs/collector{i}.log", env=env), p


def _prometheus_config(ports: list[dict[str, int]], pod_label: bool, own: int) -> dict:
    """Compose's prometheus.yml: its collector jobs over both replicas, its own job; no Alertmanager, no sidecar."""
    cfg = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    cfg.pop("alerting")
    targets = {"otel-collector": [{"targets": [f"127.0.0.1:{p['exporter']}"],
                                   **({"labels": {"pod": f"otel-collector-{i}"}} if pod_label else {})}
                                  for i, p in enumerate(ports)],
               "otelcol": [{"targets": [f"127.0.0.1:{p['self']}" for p in ports]}],
               "prometheus": [{"targets": [f"127.0.0.1:{own}"]}]}
    cfg["scrape_configs"] = [{**{k: v for k, v in job.items() if k != "basic_auth"},
                              "static_configs": targets[job["job_name"]]}
                             for job in cfg["scrape_configs"] if job["job_name"] in targets]
    return cfg


def report(url: str, run_id: str, t0: float, killed: float, end: float) -> None:
    def query(expr: str, **params) -> list[dict]:
        r = httpx.get(f"{url}/api/v1/query{'_range' if 'step' in params else ''}",
                      params={"query": expr, **params}, timeout=30).json()
        assert r["status"] == "success", r
        return r["data"]["result"]

    span = f"{int(end - t0) + 60}s"
    index = query(f'grpo_step_index{{run_id="{run_id}"}}[{span}]', time=end)[0]["values"]
    raw = [(float(t), float(v)) for t, v in index]
    back = [(round(t - t0), a, b) for (_, a), (t, b) in zip(raw, raw[1:]) if b < a]
    print(f"step index: {len(raw)} raw samples, {len(back)} went backwards (s, from, to): {back[:5]}")
    alive = query(f'max(grpo_step_index{{run_id="{run_id}"}})', start=raw[0][0], end=killed, step=1)[0]["values"]
    times = [float(t) for t, _ in alive]
    holes = [(round(a - t0), round(b - a)) for a, b in zip(times, times[1:]) if b - a > 1.5]
    print("holes while alive (s, length):", holes)
    for name in ("prometheus_target_scrapes_sample_out_of_order_total",
                 "prometheus_target_scrapes_sample_duplicate_timestamp_total"):
        print(name, query(f"sum({name})", time=end)[0]["value"][1])
    rates = [float(v) for _, v in query(f'sum(rate(grpo_steps_total{{run_id="{run_id}"}}[1m]))',
                                        start=t0 + 90, end=killed - 5, step=15)[0]["values"]]
    print(f"rate(grpo_steps_total[1m]): {min(rates):.2f} to {max(rates):.2f} per s (steady: {1 / STEP_S:.2f})")
    overdue = query(f'run_id:grpo_process:overdue_seconds{{run_id="{run_id}"}}', start=t0 + 30, end=killed, step=15)
    largest = max(float(v) for _, v in overdue[0]["values"])
    print(f"largest overdue while alive: {largest:.1f} s (pages past 90 s, for 1m)")
    for state in ("firing", "pending"):
        for a in query(f'ALERTS{{run_id="{run_id}", alertstate="{state}"}}[{span}]', time=end):
            ts = [float(t) - t0 for t, _ in a["values"]]
            spans = [[ts[0], ts[0]]]
            for t in ts[1:]:
                if t - spans[-1][1] > 20:
                    spans.append([t, t])
                spans[-1][1] = t
            print(f"{state} {a['metric']['alertname']} {a['metric'].get('signal', '')}: "
                  f"{[(round(x), round(y)) for x, y in spans]} s (killed at {round(killed - t0)} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("single", "alternate", "move"), default="alternate")
    parser.add_argument("--move-at", type=float, default=90.0, help="seconds after the start (--path move)")
    parser.add_argument("--minutes", type=float, default=5.0, help="how long the trainer runs before its kill")
    parser.add_argument("--pod-label", action="store_true",
                        help="each replica's target labelled as a ServiceMonitor does")
    parser.add_argument("--nan", action="store_true", help="a NaN loss at step 3")
    parser.add_argument("--trainer", nargs=2, metavar=("RUN_ID", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trainer:
        return trainer(*args.trainer, args.nan)
    d = Path(tempfile.mkdtemp(prefix="replicas-"))
    (d / "token").write_text(TOKEN)
    replicas = [_collector(d, i) for i in range(2)]
    own = free_port()
    (d / "rules").mkdir()
    for rule in (ROOT / "prometheus/rules").glob("*.yml"):
        (d / "rules" / rule.name).write_text(rule.read_text())
    config = _prometheus_config([p for _, p in replicas], args.pod_label, own)
    (d / "prometheus.yml").write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{own}"
    prom = Managed("prometheus", [find_binary("prometheus", pinned_only=True), f"--config.file={d / 'prometheus.yml'}",
                                  f"--storage.tsdb.path={d / 'tsdb'}", f"--web.listen-address=127.0.0.1:{own}"],
                   f"{url}/-/ready", d / "logs/prometheus.log")
    started = []
    try:
        for m in [m for m, _ in replicas] + [prom]:
            m.start()
            started.append(m)
            m.wait_ready(60)
        port = free_port()
        Service(port, [("127.0.0.1", p["http"]) for _, p in replicas], args.path, args.move_at)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                   OTEL_GRPO_METRICS_EXPORTERS="otlp", OTEL_GRPO_TRACES_EXPORTERS="none",
                   OTEL_METRIC_EXPORT_INTERVAL=EXPORT_MS, OTEL_SERVICE_NAME="grpo-trainer",
                   OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer%20{TOKEN}", PYTHONPATH=str(ROOT))
        run_id = f"replicas-{args.path}"
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, __file__, "--trainer", run_id, str(d / "run"),
                                 *(["--nan"] if args.nan else [])], env=env)
        time.sleep(args.minutes * 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.time()
        time.sleep(AFTER_KILL_S)
        print(f"path {args.path}, pod label {args.pod_label}, NaN {args.nan}, move at {args.move_at:g} s ({d})")
        report(url, run_id, t0, killed, time.time())
    finally:
        for m in reversed(started):
            m.stop()


if __name__ == "__main__":
    main()
