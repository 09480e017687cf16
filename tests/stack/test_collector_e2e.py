"""Compose's main path with the real OpenTelemetry Collector, on 127.0.0.1.

trainer (Telemetry, OTLP) -> collector (compose's exact collector/config.yaml, the
collector built from collector/builder-config.yaml) -> Prometheus (compose's
prometheus.yml, its addresses replaced by `retarget`, the committed rules) ->
Alertmanager -> sidecar, with the collector's OTLP token (the trainer sends it) and the sidecar's
ingest token (the collector and Alertmanager send it) set end to end.

Mid-run the sidecar stops, then the collector is killed (SIGKILL) and restarted,
then the sidecar comes back: the trainer finishes every step, and the spans the
collector had queued on disk (file_storage) reach the sidecar.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from otel_grpo.catalog import SIGNALS, Kind
from otel_grpo.generate._configs import COMPOSE, SECRETS, alertmanager_config, dump, retarget
from otel_grpo.stack._process import Managed
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration

RUN_ID = "e2e-collector"
STEPS, KL_FROM, STEP_S = 150, 20, 0.4
SIDECAR_DOWN_AT, COLLECTOR_KILL_AT = 30, 45
TOKEN = "e2e-secret-token"
OTLP_TOKEN = "e2e-otlp-token"
HERE = Path(__file__).resolve().parent


class Stack:
    def __init__(self, root: Path, d: Path, port, binaries: dict[str, str]) -> None:
        self.d, self.binaries = d, binaries
        self.ports = {k: port() for k in ("sidecar", "prometheus", "alertmanager", "grpc", "http", "exporter",
                                          "health", "self")}
        p = self.ports
        self.url = {k: f"http://127.0.0.1:{p[k]}" for k in ("sidecar", "prometheus", "alertmanager")}
        (d / "prom/rules").mkdir(parents=True)
        for rule in (root / "prometheus/rules").glob("*.yml"):
            shutil.copy(rule, d / "prom/rules" / rule.name)
        text = retarget((root / "prometheus/prometheus.yml").read_text(), {
            COMPOSE.metrics: f"127.0.0.1:{p['exporter']}", COMPOSE.sidecar: f"127.0.0.1:{p['sidecar']}",
            COMPOSE.alertmanager: f"127.0.0.1:{p['alertmanager']}", COMPOSE.prometheus: f"127.0.0.1:{p['prometheus']}",
            COMPOSE.collector_self: f"127.0.0.1:{p['self']}"})
        # Prometheus sends compose's basic auth to Alertmanager and itself; these two run without a
        # web config and ignore it (test_compose_stack.py runs them with it), but the file must exist.
        (d / "secrets").mkdir()
        (d / "secrets/web_password").write_text("unused-here")
        (d / "prom/prometheus.yml").write_text(text.replace(f"{SECRETS}/", f"{d}/secrets/"))
        (d / "token").write_text(TOKEN)
        (d / "otlp_token").write_text(OTLP_TOKEN)
        (d / "alertmanager.yml").write_text(dump(alertmanager_config(
            self.url["sidecar"], group_wait="1s", group_interval="5s", token_file=str(d / "token"))))
        self.collector_config = root / "collector/config.yaml"

    def sidecar(self) -> Managed:
        return Managed("sidecar", [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--host", "127.0.0.1",
                                   "--port", str(self.ports["sidecar"]), "--db", str(self.d / "sidecar.db")],
                       self.url["sidecar"] + "/readyz", self.d / "logs/sidecar.log",
                       env={"OTEL_GRPO_SIDECAR_TOKEN": TOKEN})

    def collector(self) -> Managed:
        p = self.ports
        env = {"OTELCOL_BIND": "127.0.0.1", "OTELCOL_HEALTH_PORT": str(p["health"]),
               "OTELCOL_OTLP_GRPC_PORT": str(p["grpc"]), "OTELCOL_OTLP_HTTP_PORT": str(p["http"]),
               "OTELCOL_PROMETHEUS_PORT": str(p["exporter"]), "OTELCOL_METRICS_PORT": str(p["self"]),
               "OTELCOL_STORAGE_DIR": str(self.d / "otelcol-storage"),
               "OTEL_GRPO_SIDECAR_URL": self.url["sidecar"], "OTELCOL_SIDECAR_TOKEN_FILE": str(self.d / "token"),
               "OTELCOL_OTLP_TOKEN_FILE": str(self.d / "otlp_token")}
        return Managed("collector", [self.binaries["otelcol"], f"--config={self.collector_config}"],
                       f"http://127.0.0.1:{p['health']}/", self.d / "logs/collector.log", env=env)

    def alertmanager(self) -> Managed:
        return Managed("alertmanager", [self.binaries["alertmanager"], f"--config.file={self.d / 'alertmanager.yml'}",
                                        f"--storage.path={self.d / 'am'}", "--cluster.listen-address=",
                                        f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}"],
                       self.url["alertmanager"] + "/-/ready", self.d / "logs/alertmanager.log")

    def prometheus(self) -> Managed:
        return Managed("prometheus", [self.binaries["prometheus"], f"--config.file={self.d / 'prom/prometheus.yml'}",
                                      f"--storage.tsdb.path={self.d / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}"],
                       self.url["prometheus"] + "/-/ready", self.d / "logs/prometheus.log")

    def trainer(self) -> subprocess.Popen:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.ports['grpc']}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_GRPO_METRICS_EXPORTERS": "otlp",
               "OTEL_GRPO_TRACES_EXPORTERS": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "1000",
               "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{OTLP_TOKEN}",
               "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": "grpo-trainer"}
        return subprocess.Popen([sys.executable, str(HERE / "collector_run.py"), RUN_ID, str(self.d / "run"),
                                 str(STEPS), str(KL_FROM), str(STEP_S)],
                                stdout=subprocess.PIPE, stderr=open(self.d / "logs/trainer.log", "w"), text=True,
                                env={**os.environ, **env})


def _read_until(proc: subprocess.Popen, line: str) -> None:
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise AssertionError(f"the trainer ended before printing {line!r}")


@pytest.fixture(scope="module")
def run(root, tmp_path_factory, free_port_factory, otelcol, prometheus_bin, alertmanager_bin):
    binaries = {"otelcol": otelcol, "prometheus": prometheus_bin, "alertmanager": alertmanager_bin}
    st = Stack(root, tmp_path_factory.mktemp("collector-e2e"), free_port_factory, binaries)
    sidecar, collector, am, prom = st.sidecar(), st.collector(), st.alertmanager(), st.prometheus()
    started = []
    try:
        for c in (sidecar, am, collector, prom):
            c.start()
            started.append(c)
            c.wait_ready(60)
        trainer = st.trainer()
        _read_until(trainer, f"step {SIDECAR_DOWN_AT}")
        sidecar.stop()
        _read_until(trainer, f"step {COLLECTOR_KILL_AT}")
        time.sleep(4)  # the trainer's span batch (0.2 s) and the collector's (1 s) reach the queue
        collector.proc.kill()
        collector.proc.wait()
        restarted = st.collector()
        restarted.start()
        started.append(restarted)
        restarted.wait_ready(60)
        sidecar = st.sidecar()
        sidecar.start()
        started.append(sidecar)
        sidecar.wait_ready(60)
        rest = trainer.stdout.read()
        trainer.wait(300)
        yield {"stack": st, "trainer_rc": trainer.returncode, "trainer_out": rest}
    finally:
        for c in reversed(started):
            c.stop()


def _query(st: Stack, q: str) -> list[dict]:
    r = httpx.get(f"{st.url['prometheus']}/api/v1/query", params={"query": q}, timeout=10).json()
    assert r["status"] == "success", (q, r)
    return r["data"]["result"]


def test_training_finishes_every_step_despite_the_outages(run):
    assert run["trainer_rc"] == 0, (run["stack"].d / "logs/trainer.log").read_text()[-3000:]
    assert run["trainer_out"].strip().splitlines()[-1] == "finished"


def test_every_catalog_metric_arrives_under_its_rule_and_dashboard_name(run):
    st = run["stack"]

    wanted = {s.prometheus_name + ("_bucket" if s.kind is Kind.HISTOGRAM else "") for s in SIGNALS}

    def missing() -> set[str]:
        found = {r["metric"]["__name__"] for r in _query(st, f'last_over_time({{run_id="{RUN_ID}"}}[10m])')}
        return wanted - found

    deadline = time.monotonic() + 60
    while missing() and time.monotonic() < deadline:
        time.sleep(1)
    assert missing() == set(), "catalog metrics missing in Prometheus under their catalog names"


def test_resource_attributes_reach_target_info_keyed_by_the_run(run):
    info = _query(run["stack"], f'last_over_time(target_info{{instance="{RUN_ID}"}}[10m])')
    assert info, "no target_info for the run's service.instance.id"
    labels = info[0]["metric"]
    assert labels["job"] == "grpo-trainer" and labels["grpo_run_id"] == RUN_ID
    assert "host_name" in labels and "grpo_rank" in labels


def test_the_finished_run_is_seen_finished(run):
    finished = f'max_over_time(grpo_run_finished{{run_id="{RUN_ID}"}}[10m]) == 1'
    assert wait_for(lambda: _query(run["stack"], finished), "grpo_run_finished = 1", 30, every=0.5)


def test_the_kl_alert_fires_and_reaches_alertmanager_and_the_sidecar(run):
    st = run["stack"]
    firing = f'ALERTS{{alertname="GRPOKLHigh", alertstate="firing", run_id="{RUN_ID}"}}[30m]'
    assert wait_for(lambda: _query(st, firing), "GRPOKLHigh firing in Prometheus", 90, every=0.5)
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def in_sidecar():
        r = httpx.get(f"{st.url['sidecar']}/api/alerts", params={"run_id": RUN_ID}, headers=headers, timeout=10)
        return "GRPOKLHigh" in {a["alertname"] for a in r.json()}

    assert wait_for(in_sidecar, "GRPOKLHigh in the sidecar (Alertmanager's webhook, with the token)", 60, every=0.5)


def test_spans_queued_on_disk_reach_the_sidecar_after_the_collector_restart(run):
    st = run["stack"]
    queued = set(range(SIDECAR_DOWN_AT + 1, COLLECTOR_KILL_AT + 1))

    def steps():
        r = httpx.get(f"{st.url['sidecar']}/api/runs/{RUN_ID}/steps", timeout=10)
        return {row["step"] for row in r.json()} if r.status_code == 200 else set()

    wait_for(lambda: queued <= steps(), "the steps queued while the sidecar was down", 90, every=0.5)
    samples = httpx.get(f"{st.url['sidecar']}/api/runs/{RUN_ID}/sample-steps", timeout=10).json()
    assert queued <= set(samples)


def test_the_collectors_own_metrics_are_scraped(run):
    st = run["stack"]
    assert _query(st, 'up{job="otelcol"} == 1')
    assert _query(st, 'otelcol_exporter_queue_capacity{exporter="otlp_http/sidecar"}')
    # Retried sends are not failures; what the sidecar finally took is counted as sent.
    assert _query(st, 'otelcol_exporter_sent_spans_total{exporter="otlp_http/sidecar"} > 0')
    # GRPOCollectorDown and GRPOSidecarDown know these targets by what they serve, not by job name.
    for component, job in (("collector", "otelcol"), ("sidecar", "sidecar")):
        seen = f'job_instance:{component}:seen{{job="{job}"}}'
        assert wait_for(lambda: _query(st, seen), seen, 60, every=0.5)
