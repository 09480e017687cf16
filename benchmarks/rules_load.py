"""The alert rules under a team's load: one real Prometheus evaluating our rules over N concurrent runs (issue 61).

    .venv/bin/python benchmarks/rules_load.py --runs 300 [--finished 1000] [--evaluation-interval 15s]
                                             [--minutes 7] [--fault-at-s 90]
    .venv/bin/python benchmarks/rules_load.py --history

A platform team's Prometheus: N runs training (10-s steps), each serving the series a TRL run exports (taken
from our own telemetry's Prometheus endpoint at start: a real exposition, run id and labels replaced), plus
`--finished` runs that finished and went stale in the first minute (their series stay in the lookback windows).
The runs are served as the collector's exporter serves them (honor_labels; job and instance from the
service), split across targets of at most 100 runs each, like collector replicas. Prometheus 3.16 (the pinned
build) scrapes every 15 s and evaluates the committed rule files every `--evaluation-interval`.

At `--fault-at-s` three runs among the N fail: one crashes (its series vanish), one hangs (it keeps exporting,
its step stops) and one logs a NaN loss. Printed: each rule group's evaluation duration (last, and the worst
seen), missed iterations, the samples each group's queries touch and the five costliest rules (query stats, a
cost CPU contention does not move), Prometheus's CPU and memory, and each fault's page latency: from the onset to
the alert firing in Prometheus plus Alertmanager's group_wait, against the bound of docs/alerts.md for 10-s steps.
Exit status 1 when a group missed an iteration or a page came late or never. The runs have minutes of history
only; `--history` prints what one run with a day of it costs each evaluation (`history_cost`).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from otel_grpo.generate import RuleSettings, rule_files
from otel_grpo.generate._rules import seconds
from otel_grpo.stack._process import Managed, find_binary

STEP_S = 10.0
"""Every run's step time: the grid's 10-s column, whose bounds are 5 min for a crash, a hang and a NaN loss."""
RUNS_PER_TARGET = 100
GROUP_WAIT_S = 10.0
"""The committed alertmanager.yml's group_wait: a firing alert reaches a person at the group's first flush."""
FAULTS = {"crash": "GRPOMetricsAbsent", "hang": "GRPOTrainerStalled", "nan-loss": "GRPONonFiniteValues"}
BOUND_S = 300.0
_KEYS = {"kl": 0.01, "beta": 0.04, "reward": 0.5, "reward_std": 0.2, "entropy": 1.2, "grad_norm": 0.8, "loss": 0.01,
         "tokens_per_second": 900.0, "step_time": STEP_S, "clip_ratio/region_mean": 0.01, "clip_ratio/low_mean": 0.0,
         "clip_ratio/high_mean": 0.0, "completions/clipped_ratio": 0.1, "frac_reward_zero_std": 0.1,
         "completions/mean_length": 100.0, "learning_rate": 1e-5, "num_tokens": 1000.0}
"""What TRL's GRPOTrainer logs each step, under the names `instrument` maps (healthy values)."""
_DYNAMIC = ("grpo_step_index", "grpo_steps_total", "grpo_step_end_time_seconds", "grpo_process_clock_seconds",
            "grpo_process_alive_until_seconds", "grpo_process_start_time_seconds", "grpo_nonfinite_total",
            "grpo_run_finished", "grpo_log_interval_seconds", "grpo_step_time_seconds")
"""The series whose values the load moves per scrape; every other series keeps the template's value."""


def template(tmp: Path) -> list[tuple[str, str, str]]:
    """(metric name, labels without run_id, value) of every series one real TRL-sized run exports."""
    from otel_grpo.telemetry import Telemetry, TelemetrySettings

    port = 19464
    tel = Telemetry(TelemetrySettings(run_id="RUN", output_dir=str(tmp / "template"), metrics_exporters=["prometheus"],
                                      traces_exporters=["none"], prometheus_port=port))
    for step in range(3):
        with tel.step(step) as s:
            for phase in ("rollout", "reward", "update"):
                with s.phase(phase):
                    pass
            s.record(_KEYS)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    tel.finish()
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if not m or m.group(1) == "target_info":
            continue
        labels = [kv for kv in m.group(2).split(",") if not kv.startswith(("otel_scope_", "run_id="))]
        out.append((m.group(1), ",".join(labels), m.group(3)))
    return out


@dataclass(slots=True)
class Run:
    run_id: str
    start_s: float
    fault: str | None = None
    ends_s: float = float("inf")
    """When it stops being served: a crash, or a finished run's end (it then lingers one more scrape)."""
    static: bytes = b""

    def dynamic(self, now: float, fault_at: float) -> str:
        steps = int((now - self.start_s) // STEP_S)
        if self.fault == "hang" and now >= fault_at:
            steps = int((fault_at - self.start_s) // STEP_S)
        nan = 1 if self.fault == "nan-loss" and now >= fault_at else 0
        finished = 1 if now >= self.ends_s - 30 else 0
        lab = f'job="grpo-trainer",instance="{self.run_id}",run_id="{self.run_id}"'
        pro = f'{lab},process="{int(self.start_s)}"'
        return "".join((
            f"grpo_step_index{{{lab}}} {steps - 1}\n", f"grpo_steps_total{{{lab}}} {steps}\n",
            f"grpo_step_end_time_seconds{{{lab}}} {self.start_s + steps * STEP_S}\n",
            f"grpo_process_clock_seconds{{{lab}}} {now}\n", f"grpo_process_alive_until_seconds{{{lab}}} {now + 10}\n",
            f"grpo_process_start_time_seconds{{{lab}}} {self.start_s}\n", f"grpo_run_finished{{{lab}}} {finished}\n",
            f"grpo_log_interval_seconds{{{lab}}} {STEP_S}\n", f"grpo_step_time_seconds{{{lab}}} {STEP_S}\n",
            f'grpo_nonfinite_total{{{pro},signal="loss"}} {nan}\n',
            f'grpo_nonfinite_total{{{pro},signal="grad_norm"}} 0\n'))


def static_block(run: Run, series: list[tuple[str, str, str]]) -> bytes:
    lab = f'job="grpo-trainer",instance="{run.run_id}",run_id="{run.run_id}"'
    lines = []
    for name, labels, value in series:
        if name in _DYNAMIC:
            continue
        labels = re.sub(r'process="\d+"', f'process="{int(run.start_s)}"', labels)
        lines.append(f"{name}{{{lab}{',' if labels else ''}{labels}}} {value}\n")
    return "".join(lines).encode()


class Load:
    """The runs, split into targets; each target answers /metrics with its runs' exposition at that moment."""

    def __init__(self, runs: list[Run], fault_at: float) -> None:
        self.targets = [runs[i:i + RUNS_PER_TARGET] for i in range(0, len(runs), RUNS_PER_TARGET)]
        self.fault_at = fault_at
        self.servers: list[ThreadingHTTPServer] = []

    def body(self, target: int) -> bytes:
        now = time.time()
        parts = [b"otelcol_process_uptime_seconds_total 1\n"] if target == 0 else []
        for run in self.targets[target]:
            if now >= run.ends_s or (run.fault == "crash" and now >= self.fault_at):
                continue
            parts += [run.static, run.dynamic(now, self.fault_at).encode()]
        return b"".join(parts)

    def serve(self) -> list[str]:
        load = self
        for i in range(len(self.targets)):
            class Handler(BaseHTTPRequestHandler):
                target = i

                def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                    data = load.body(self.target)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

                def log_message(self, *args) -> None:
                    pass

            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        return [f"127.0.0.1:{s.server_address[1]}" for s in self.servers]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _metrics(url: str) -> dict[str, float]:
    """Prometheus's own metrics we report: {name{labels}: value}."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    want = ("prometheus_rule_group_last_duration_seconds", "prometheus_rule_group_iterations_missed_total",
            "prometheus_rule_group_iterations_total", "process_cpu_seconds_total", "process_resident_memory_bytes",
            "prometheus_tsdb_head_series", "prometheus_rule_evaluation_failures_total")
    out = {}
    for line in text.splitlines():
        if line.startswith(want):
            key, _, value = line.rpartition(" ")
            out[re.sub(r'rule_group="[^"]*;', 'rule_group="', key)] = float(value)
    return out


def _samples(url: str, query: str) -> int:
    """The samples one evaluation of `query` touches now: a cost figure that CPU contention does not move."""
    found = _get(f"{url}/api/v1/query?stats=all&query={urllib.parse.quote(query)}")["data"]
    return int(found["stats"]["samples"]["totalQueryableSamples"])


def history_cost(url_port: int, series: list[tuple[str, str, str]], tmp: Path) -> None:
    """What one run costs each evaluation once Prometheus holds a day of it: the rules' windows (up to 1d) read
    every sample in them. A day of one run at 15-s scrapes (its exports, and the records the rules read over a
    window) is backfilled with promtool into a fresh Prometheus, which evaluates nothing; each rule's expression
    is queried once at the day's end, and its samples and time summed per group."""
    now = int(time.time()) // 60 * 60
    start = now - 86400
    lab = 'job="grpo-trainer",instance="r0",run_id="r0"'
    pro = f'{lab},process="{start}"'
    values = {"grpo_process_start_time_seconds": lambda t: start, "grpo_process_clock_seconds": lambda t: t,
              "grpo_process_alive_until_seconds": lambda t: t + 10, "grpo_step_end_time_seconds": lambda t: t,
              "grpo_step_index": lambda t: (t - start) // STEP_S, "grpo_steps_total": lambda t: (t - start) // STEP_S}
    rows = [(n, lab + ("," + re.sub(r'process="\d+"', f'process="{start}"', l) if l else "")) for n, l, _ in series]
    rules = yaml.safe_load(rule_files(RuleSettings())["rules/grpo_alerts.yml"])["groups"][0]["rules"]
    read = {m for r in rules if r.get("record") == "run_id_signal_bound:grpo_step_beyond:rose"
            for m in re.findall(r'signal="(\w+)", bound="([^"]+)", streak="(\d+)"', r["expr"])}
    rows += [("process:grpo_step_beyond_total", f'{pro},signal="{s}",bound="{b}",streak="{k}"') for s, b, k in read]
    rows += [("process:grpo_nonfinite_total", f'{pro},signal="{s}"') for s in ("loss", "grad_norm")]
    rows += [("process:grpo_skipped_steps_total", pro), ("run_id_job_instance:grpo_process:clock_offset_seconds", lab),
             ("run_id:grpo_process:clock_offset_seconds", 'run_id="r0"')]
    # The memory group's records of those, written every memory_interval (the alert group reads minutes of them).
    memory = yaml.safe_load(rule_files(RuleSettings())["rules/grpo_alerts.yml"])["groups"][1]
    remembered = {re.fullmatch(r"last_over_time\((.+)\[\w+\]\)", r["expr"]).group(1): r["record"] for r in memory["rules"]}
    every = seconds(memory["interval"])
    with open(tmp / "day.om", "w") as out:
        for name, labels in sorted(rows):
            value = values.get(name, lambda t: 0)
            out.writelines(f"{name}{{{labels}}} {value(t)} {t}\n" for t in range(start, now - 60, 15))
        for name, labels in sorted(rows):
            if name in remembered:
                value = values.get(name, lambda t: 0)
                out.writelines(f"{remembered[name]}{{{labels}}} {value(t)} {t}\n" for t in range(start, now - 60, every))
        out.write("# EOF\n")
    promtool = find_binary("promtool", pinned_only=True)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "day.om"), str(tmp / "day")],
                   check=True, capture_output=True)
    url = f"http://127.0.0.1:{url_port}"
    (tmp / "empty.yml").write_text("{}\n")
    prom = Managed("prometheus", [find_binary("prometheus", pinned_only=True), f"--config.file={tmp / 'empty.yml'}",
                                  f"--storage.tsdb.path={tmp / 'day'}", f"--web.listen-address=127.0.0.1:{url_port}"],
                   url + "/-/ready", tmp / "day.log")
    with prom.running(60):
        for rel, text in rule_files(RuleSettings()).items():
            for group in yaml.safe_load(text)["groups"]:
                cost = []
                for r in group["rules"]:
                    q = f"{url}/api/v1/query?stats=all&time={now}&query={urllib.parse.quote(r['expr'])}"
                    found = _get(q)["data"]["stats"]
                    cost.append((int(found["samples"]["totalQueryableSamples"]), found["timings"]["execTotalTime"],
                                 r.get("record") or r.get("alert")))
                print(f"group {group['name']}: one run with a day of history costs {sum(c[0] for c in cost):,} samples "
                      f"and {sum(c[1] for c in cost) * 1000:.1f} ms of queries per evaluation"
                      + (f" (every {group['interval']})" if "interval" in group else ""))
                for n, took, name in sorted(cost, reverse=True)[:5]:
                    print(f"  {n:>8,} samples {took * 1000:6.2f} ms  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--finished", type=int, default=1000, help="runs that finished in the first minute")
    parser.add_argument("--evaluation-interval", default="15s")
    parser.add_argument("--minutes", type=float, default=7.0)
    parser.add_argument("--fault-at-s", type=float, default=90.0)
    parser.add_argument("--port", type=int, default=19090)
    parser.add_argument("--history", action="store_true",
                        help="instead: the samples one run with a day of history costs each evaluation")
    args = parser.parse_args()
    if args.history:
        with tempfile.TemporaryDirectory() as tmp_name:
            history_cost(args.port, template(Path(tmp_name)), Path(tmp_name))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop Prometheus on the way out
    if args.runs < 3:
        parser.error("--runs: at least 3 (the three faults)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        series = template(tmp)
        t0 = time.time()
        fault_at = t0 + args.fault_at_s
        runs = [Run(f"load-{i:05d}", t0 - 600 - (i % 50) * 7) for i in range(args.runs)]
        for run, fault in zip(runs, FAULTS):
            run.fault = fault
        runs += [Run(f"done-{i:05d}", t0 - 3600, ends_s=t0 + 45) for i in range(args.finished)]
        for run in runs:
            run.static = static_block(run, series)
        load = Load(runs, fault_at)
        targets = load.serve()
        (tmp / "rules").mkdir()
        for rel, text in rule_files(RuleSettings()).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        config = {"global": {"scrape_interval": "15s", "scrape_timeout": "14s",
                             "evaluation_interval": args.evaluation_interval},
                  "rule_files": sorted(str(tmp / rel) for rel in rule_files(RuleSettings())),
                  "scrape_configs": [{"job_name": "otel-collector", "honor_labels": True,
                                      "static_configs": [{"targets": targets}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        url = f"http://127.0.0.1:{args.port}"
        prom = Managed("prometheus", [find_binary("prometheus", pinned_only=True),
                                      f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{args.port}"], url + "/-/ready",
                       tmp / "prometheus.log")
        per_run = sum(1 for name, *_ in series if name not in _DYNAMIC) + 11
        print(f"{args.runs} runs ({per_run} series each) + {args.finished} finished in {len(targets)} targets; "
              f"scrapes 15s, rules every {args.evaluation_interval}; faults at +{args.fault_at_s:.0f} s", flush=True)
        paged: dict[str, float] = {}
        worst: dict[str, float] = {}
        samples = []
        with prom.running(60):
            started_cpu = None
            while time.time() < t0 + args.minutes * 60:
                time.sleep(5)
                m = _metrics(url)
                started_cpu = m["process_cpu_seconds_total"] if started_cpu is None else started_cpu
                samples.append((time.time() - t0, m))
                for key, value in m.items():
                    if key.startswith("prometheus_rule_group_last_duration_seconds"):
                        worst[key] = max(worst.get(key, 0.0), value)
                firing = _get(url + "/api/v1/alerts")["data"]["alerts"]
                for fault, run in zip(FAULTS, runs):
                    for a in firing:
                        if (a["state"] == "firing" and a["labels"].get("run_id") == run.run_id
                                and a["labels"]["alertname"] == FAULTS[fault] and fault not in paged):
                            paged[fault] = time.time() - fault_at + GROUP_WAIT_S
                others = {(a["labels"]["alertname"], a["labels"].get("run_id")) for a in firing
                          if a["state"] == "firing" and a["labels"].get("run_id", "").startswith(("load", "done"))
                          and a["labels"].get("run_id") not in {r.run_id for r in runs[:3]}}
                print(f"+{time.time() - t0:4.0f} s  " + "  ".join(
                    f"{k.split('rule_group=')[1][1:-2]} {v:.2f}s" for k, v in m.items()
                    if k.startswith("prometheus_rule_group_last_duration_seconds"))
                    + f"  rss {m['process_resident_memory_bytes'] / 2**30:.2f} GiB  series "
                      f"{m['prometheus_tsdb_head_series']:.0f}  paged {sorted(paged)}  others {len(others)}",
                    flush=True)
            rules = _get(url + "/api/v1/rules")["data"]["groups"]
            touched = {(g["name"], r["name"], r["query"]): _samples(url, r["query"]) for g in rules for r in g["rules"]}
        end = samples[-1][1]
        span = samples[-1][0] - samples[0][0]
        print(f"\nPrometheus CPU {(end['process_cpu_seconds_total'] - started_cpu) / span:.2f} cores (mean over "
              f"{span:.0f} s), RSS {max(s['process_resident_memory_bytes'] for _, s in samples) / 2**30:.2f} GiB max, "
              f"head series {end['prometheus_tsdb_head_series']:.0f}")
        ok = True
        for key, value in end.items():
            if key.startswith("prometheus_rule_group_last_duration_seconds"):
                group = key.split("rule_group=")[1][1:-2]
                missed = end[f'prometheus_rule_group_iterations_missed_total{{rule_group="{group}"}}']
                total = end[f'prometheus_rule_group_iterations_total{{rule_group="{group}"}}']
                print(f"group {group}: last {value:.2f} s, worst {worst[key]:.2f} s, missed {missed:.0f} of "
                      f"{total:.0f} iterations")
                ok &= missed == 0
        for group in dict.fromkeys(g for g, _, _ in touched):
            print(f"group {group}: {sum(n for (g, _, _), n in touched.items() if g == group):,} samples touched "
                  "per evaluation (query stats, now)")
        for (group, name, query), n in sorted(touched.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {n:>10,} samples  {name}: {query[:90]}")
        for fault, alert in FAULTS.items():
            latency = paged.get(fault)
            held = latency is not None and latency <= BOUND_S
            ok &= held
            print(f"{fault} -> {alert}: " + (f"{latency:.0f} s" if latency is not None else "never")
                  + f" (bound {BOUND_S:.0f} s){'' if held else '  NOT HELD'}")
        print(f"healthy runs notified: {len(others)} ({sorted(others)[:5]})")
        ok &= not others
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
