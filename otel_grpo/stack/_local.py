"""The local stack without Docker: sidecar, Prometheus and Alertmanager on 127.0.0.1.

    with LocalStack(StackSettings(dir=Path(".demo"))) as stack:
        print(stack.urls)

Configuration is rendered into `dir` from the same code as the compose files,
with one-second scrape and evaluation intervals and `RuleSettings.fast()` windows
so that a demo run of a minute can fire alerts.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

from otel_grpo._stop_request import StopRequest
from otel_grpo.generate import (RuleSettings, Routing, Targets, alertmanager_config, dump, prometheus_config, rule_files,
                                write_files)

from ._process import Backend, Managed, StackError


@dataclass(kw_only=True, slots=True)
class StackSettings:
    """Where the local stack lives and listens."""

    dir: Path = Path(".demo")
    """Generated configs, data (TSDB, Alertmanager state, sidecar database) and logs."""
    host: str = "127.0.0.1"
    """Every component binds here; local mode never listens on all interfaces."""
    sidecar_port: int = 8000
    prometheus_port: int = 9090
    alertmanager_port: int = 9093
    trainer_metrics_port: int = 9464
    """Where the trainer serves /metrics for Prometheus to scrape."""
    scrape_interval: str = "1s"
    evaluation_interval: str = "1s"
    rules: RuleSettings = field(default_factory=RuleSettings.fast)
    routing: Routing = field(default_factory=Routing)
    """Who receives which alerts (`Routing.from_yaml("alertmanager/routing.yml")`, as compose's); the
    defaults send everything to the sidecar only."""
    secrets_dir: Path = Path("secrets")
    """Where the routing's `url_file`s are (made absolute: Alertmanager runs in another directory)."""
    ready_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        self.dir = Path(self.dir)
        self.secrets_dir = Path(self.secrets_dir).resolve()
        ports = [self.sidecar_port, self.prometheus_port, self.alertmanager_port, self.trainer_metrics_port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"ports must differ, got {ports}")
        if any(not 0 < p < 65536 for p in ports):
            raise ValueError(f"ports must be in 1..65535, got {ports}")

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"

    @property
    def sidecar_url(self) -> str:
        return self.url(self.sidecar_port)

    @property
    def prometheus_url(self) -> str:
        return self.url(self.prometheus_port)

    @property
    def alertmanager_url(self) -> str:
        return self.url(self.alertmanager_port)

    def trainer_env(self) -> dict[str, str]:
        """The environment that points a trainer using `Telemetry` at this stack: step history and
        samples to the sidecar over OTLP/HTTP, metrics on a /metrics endpoint Prometheus scrapes."""
        return {
            "OTEL_GRPO_METRICS_EXPORTERS": "prometheus",
            "OTEL_GRPO_PROMETHEUS_HOST": self.host,
            "OTEL_GRPO_PROMETHEUS_PORT": str(self.trainer_metrics_port),
            "OTEL_GRPO_TRACES_EXPORTERS": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{self.sidecar_url}/v1/traces",
            # the steps whose every completion the trainer keeps: those this stack's alerts flag
            "OTEL_GRPO_ANOMALY_THRESHOLDS": (f"kl={self.rules.kl_threshold:g},"
                                             f"mismatch_k3_kl={self.rules.mismatch_kl_threshold:g}"),
        }


# Where a Prometheus shows its alerts, best first: the 3.x UI, 2.x's classic UI (Debian's 2.42
# serves only that), and the JSON API every version answers (a Prometheus built from its Go
# module, as the tests build it, has no web UI at all).
ALERTS_PAGES = ("/alerts", "/classic/alerts", "/api/v1/alerts")
# Prometheus's query page where its web UI is built (3.x, 2.x, 2.x's classic UI: all Debian's 2.42
# serves), else its rules API: the build from Go modules has no UI, and "/" answers 404 or 500 there.
PROMETHEUS_PAGES = ("/query", "/graph", "/classic/graph", "/api/v1/rules")
# Alertmanager's alerts page where its web UI is built (`/#/alerts`: the page is `/`), else its API:
# the build from Go modules has none ("/" answers 404).
ALERTMANAGER_PAGES = ("/#/alerts", "/api/v2/alerts")


def find_alerts_page(url: str, pages: tuple[str, ...] = ALERTS_PAGES) -> str:
    """The first of `pages` the server at `url` answers with 200 (the last, its API, if none does); a
    page's `#fragment` is the browser's, so its path is what is asked for."""
    import httpx

    with httpx.Client(timeout=5) as client:
        for path in pages[:-1]:
            try:
                if client.get(url + (path.partition("#")[0] or "/")).status_code == 200:
                    return path
            except httpx.HTTPError:
                break
    return pages[-1]


def write_local_configs(s: StackSettings) -> dict[str, Path]:
    """Render prometheus.yml, its rules and alertmanager.yml into s.dir; returns their paths."""
    hostport = lambda port: f"{s.host}:{port}"  # noqa: E731
    targets = Targets(
        metrics=hostport(s.trainer_metrics_port), metrics_job="trainer", sidecar=hostport(s.sidecar_port),
        alertmanager=hostport(s.alertmanager_port), prometheus=hostport(s.prometheus_port),
        scrape_interval=s.scrape_interval, evaluation_interval=s.evaluation_interval,
    )
    files = {f"prometheus/{rel}": text for rel, text in rule_files(s.rules).items()}
    files["prometheus/prometheus.yml"] = dump(prometheus_config(targets))
    # Short grouping so the demo's alert reaches the sidecar within seconds.
    files["alertmanager/alertmanager.yml"] = dump(alertmanager_config(
        s.sidecar_url, s.routing, secrets_dir=str(s.secrets_dir), group_wait="1s", group_interval="5s"))
    write_files(s.dir, files)
    return {"prometheus": s.dir / "prometheus/prometheus.yml", "alertmanager": s.dir / "alertmanager/alertmanager.yml"}


class LocalStack:
    """Starts the three components in dependency order and stops them in reverse."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.components: list[Managed] = []
        self.alerts_path = ALERTS_PAGES[-1]
        """The running Prometheus's alerts page (`find_alerts_page`), once started."""
        self.prometheus_path = PROMETHEUS_PAGES[-1]
        """Its query page, or its rules API where it has no web UI."""
        self.alertmanager_path = ALERTMANAGER_PAGES[-1]
        """Alertmanager's alerts page, or its API where it has no web UI."""
        self.backends: dict[str, Backend] = {}
        """The Prometheus and Alertmanager binaries it runs, once planned."""

    @property
    def urls(self) -> dict[str, str]:
        s = self.settings
        return {
            "sidecar": s.sidecar_url + "/",
            "prometheus": s.prometheus_url + self.prometheus_path,
            "alerts": s.prometheus_url + self.alerts_path,
            "alertmanager": s.alertmanager_url + self.alertmanager_path,
            "trainer metrics": s.url(s.trainer_metrics_port) + "/metrics",
        }

    def run_urls(self, run_id: str, started_at: float, finished_at: float) -> dict[str, str]:
        """Pages about one run that still show it after it ended: the run explorer (its plots, its
        alerts on the step axis, its samples), the alerts the sidecar received (Alertmanager forgets
        resolved ones, so none of its pages would), and Prometheus's history of the run's alerts:
        a graph where its web UI is built, else the same series from its API as JSON."""
        s = self.settings
        alerts = f'ALERTS{{run_id="{run_id}", alertstate="firing"}}'
        if self.prometheus_path in PROMETHEUS_PAGES[:-1]:  # a web UI: 3.x's, 2.x's or 2.x's classic one
            tab = "graph" if self.prometheus_path == "/query" else "0"
            history = s.prometheus_url + self.prometheus_path + "?" + urlencode(
                {"g0.expr": alerts, "g0.tab": tab, "g0.range_input": "1h"})
        else:
            span = max(1.0, finished_at - started_at)
            history = s.prometheus_url + "/api/v1/query_range?" + urlencode(
                {"query": alerts, "start": f"{started_at:.0f}", "end": f"{finished_at + 60:.0f}",
                 "step": f"{max(1, round(span / 200))}s"})
        return {
            "run explorer": f"{s.sidecar_url}/#/run/{quote(run_id, safe='')}",
            "alerts received": f"{s.sidecar_url}/api/runs/{quote(run_id, safe='/')}/alerts",
            "alert history": history,
            "samples": f"{s.sidecar_url}/api/runs/{quote(run_id, safe='/')}/samples",
        }

    def backends_line(self) -> str:
        """One line naming the Prometheus and Alertmanager it runs, their versions and where from."""
        return "running " + ", ".join(str(b) for b in self.backends.values())

    @property
    def sidecar_db(self) -> Path:
        return self.settings.dir / "sidecar" / "sidecar.db"

    def _check_ports(self) -> None:
        """StackError naming a port something else holds: a stray Prometheus answering
        /-/ready there would otherwise pass for ours."""
        s = self.settings
        for name, port in (("sidecar", s.sidecar_port), ("prometheus", s.prometheus_port),
                           ("alertmanager", s.alertmanager_port), ("trainer metrics", s.trainer_metrics_port)):
            with socket.socket() as sock:
                # As Go and uvicorn do: connections in TIME_WAIT from a stack that
                # just stopped must not count, only a live listener.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((s.host, port))
                except OSError:
                    raise StackError(f"{name}: port {s.host}:{port} is in use (another `otel-grpo up`?); "
                                     f"pick another with --{name.replace(' ', '-')}-port") from None

    def _plan(self) -> list[Managed]:
        s, d = self.settings, self.settings.dir
        # Binaries and ports first: fail before anything has started.
        self.backends = {name: Backend.find(name) for name in ("prometheus", "alertmanager")}
        prometheus, alertmanager = self.backends["prometheus"].path, self.backends["alertmanager"].path
        self._check_ports()
        configs = write_local_configs(s)
        logs = d / "logs"
        return [
            # The sidecar's log rotates (--log-file): under fd exhaustion or abuse it would otherwise grow
            # next to the database without bound. What it prints before logging starts goes to .out.
            Managed("sidecar", [sys.executable, "-m", "otel_grpo.cli", "sidecar", "--host", s.host,
                                "--port", str(s.sidecar_port), "--db", str(self.sidecar_db),
                                "--log-file", str(logs / "sidecar.log")],
                    s.sidecar_url + "/readyz", logs / "sidecar.out"),
            Managed("alertmanager", [alertmanager, f"--config.file={configs['alertmanager']}",
                                     f"--storage.path={d / 'alertmanager' / 'data'}",
                                     f"--web.listen-address={s.host}:{s.alertmanager_port}",
                                     # No HA gossip: it would listen on 0.0.0.0:9094.
                                     "--cluster.listen-address="],
                    s.alertmanager_url + "/-/ready", logs / "alertmanager.log"),
            Managed("prometheus", [prometheus, f"--config.file={configs['prometheus']}",
                                   f"--storage.tsdb.path={d / 'prometheus' / 'data'}",
                                   f"--web.listen-address={s.host}:{s.prometheus_port}",
                                   # Re-send firing alerts every second so Alertmanager sees
                                   # a short demo's alert before it resolves.
                                   "--rules.alert.resend-delay=1s"],
                    s.prometheus_url + "/-/ready", logs / "prometheus.log"),
        ]

    def start(self, stop: StopRequest | None = None) -> "LocalStack":
        """Start the components in order, each ready before the next; KeyboardInterrupt (Ctrl-C, or `stop`
        requested while a component gets ready) stops those started."""
        plan = self._plan()
        (self.settings.dir / "sidecar").mkdir(parents=True, exist_ok=True)
        # Everything from the first spawn on, the pages' lookup included, is inside the try: an interrupt
        # anywhere in it stops what has started.
        try:
            for component in plan:
                self.components.append(component)  # before the spawn; stop() skips one never started
                component.start()
                component.wait_ready(self.settings.ready_timeout_s, stop)
            self.alerts_path = find_alerts_page(self.settings.prometheus_url)
            self.prometheus_path = find_alerts_page(self.settings.prometheus_url, PROMETHEUS_PAGES)
            self.alertmanager_path = find_alerts_page(self.settings.alertmanager_url, ALERTMANAGER_PAGES)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        while self.components:
            self.components.pop().stop()

    def check_alive(self) -> None:
        """StackError if a component died while we were running."""
        for c in self.components:
            if c.proc is not None and c.proc.poll() is not None:
                raise StackError(f"{c.name} exited with {c.proc.returncode}: {c.log_tail()}")

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
