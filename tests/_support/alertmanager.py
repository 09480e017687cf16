"""A real Alertmanager for the tests, and webhook receivers that record what it delivers."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx

from otel_grpo.generate import Destination, alertmanager_config, dump
from otel_grpo.generate._routing import load_routing
from otel_grpo.stack._process import Managed


def serve_alertmanager(binary: str, config: Path, d: Path, port: int) -> Managed:
    """A real Alertmanager on 127.0.0.1:`port` (no cluster), running `config` with its state under `d`."""
    return Managed("alertmanager", [binary, f"--config.file={config}", f"--storage.path={d}", "--cluster.listen-address=",
                                    f"--web.listen-address=127.0.0.1:{port}"],
                   f"http://127.0.0.1:{port}/-/ready", d / "am.log")


class Hooks(ThreadingHTTPServer):
    """Webhook receivers on one port, one path each: what Alertmanager delivered, by path. A path in `failing`
    answers 500 (a receiver that is down) and records nothing."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict]] = defaultdict(list)
        self.failing: set[str] = set()
        self.lock = threading.Lock()
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with hooks.lock:
                    failing = self.path in hooks.failing
                    if not failing:
                        hooks.received[self.path].append(body)
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")  # what Slack's webhook answers (Alertmanager's Slack notifier reads it)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def firing(self) -> dict[str, set[str]]:
        """path -> `alertname/run_id` of every firing alert delivered there."""
        with self.lock:
            return {path: {f'{a["labels"]["alertname"]}/{a["labels"].get("run_id", "")}'
                           for body in bodies for a in body["alerts"] if a["status"] == "firing"}
                    for path, bodies in self.received.items()}

    def delivered(self, expected: dict[str, set[str]], settle_s: float = 3.0) -> dict[str, set[str]]:
        """What arrived once `expected` has (or after 30 s), and `settle_s` more for anything extra."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(not want <= self.firing().get(p, set()) for p, want in expected.items()):
            time.sleep(0.2)
        time.sleep(settle_s)
        return self.firing()


SIDECAR_HOOK = "/sidecar/api/alerts"
"""Where every receiver of a `delivering_alertmanager` posts first (the sidecar's copy, naming the receiver)."""


@contextmanager
def delivering_alertmanager(binary: str, root: Path, d: Path, port: int, *, group_wait: str,
                            group_interval: str) -> Iterator[tuple[str, Hooks, dict]]:
    """An Alertmanager routing to webhook receivers here (`/page`, `/notify`, `/deadman`, and every receiver to
    `SIDECAR_HOOK`): (its URL, the receivers, the config it runs). The config renders from the function and the
    routing compose's does: the committed routing tree and inhibitions (test_inhibitions.py compares them); only
    destinations and the grouping timings differ, so a notification arrives within `group_wait`."""
    hooks = Hooks()
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    for name in ("page", "notify", "deadman"):
        (d / f"{name}_url").write_text(f"{hooks.url}/{name}")
    committed = load_routing(root)
    routing = replace(committed, **{n: Destination(kind="webhook", url_file=f"{n}_url") for n in ("page", "notify", "deadman")})
    config = alertmanager_config(f"{hooks.url}/sidecar", routing, secrets_dir=str(d), group_wait=group_wait,
                                 group_interval=group_interval)
    (d / "alertmanager.yml").write_text(dump(config))
    try:
        with serve_alertmanager(binary, d / "alertmanager.yml", d, port).running(60):
            yield f"http://127.0.0.1:{port}", hooks, config
    finally:
        hooks.shutdown()


def alert(name: str, severity: str, **labels: str) -> dict:
    """An alert as Prometheus posts it to Alertmanager's API."""
    return {"labels": {"alertname": name, "severity": severity, **labels},
            "annotations": {"summary": name}, "startsAt": "2026-01-01T00:00:00Z"}


INHIBITION_CASES = {
    # The stack's alerts inhibit nothing: a collector or sidecar outage never hides a run's alert
    # (the run-end rules themselves hold back while the collector is down), and they pair with no run.
    ("GRPOCollectorDown", "critical", (("instance", "otel-collector:8889"),)): False,
    ("GRPOSidecarDown", "warning", (("instance", "sidecar:8000"),)): False,
    ("GRPOMetricsAbsent", "critical", (("run_id", "a"),)): False,
    ("GRPOTrainerStalled", "critical", (("run_id", "b"),)): False,
    ("GRPONoFirstStep", "critical", (("run_id", "f"),)): False,
    ("GRPORunPreempted", "warning", (("run_id", "g"),)): False,
    ("GRPOKLHigh", "critical", (("run_id", "c"),)): False,
    # KL over its threshold explains the jump and the spike of the same run, but only while its condition holds:
    # their rules hold them back then (`_alerts.WITHHELD`). The page keeps firing an hour after; no inhibition.
    ("GRPOKLJump", "warning", (("run_id", "c"),)): False,
    ("GRPOKLSpike", "warning", (("run_id", "c"),)): False,
    ("GRPOEntropyCollapse", "warning", (("run_id", "c"),)): False,  # ... not another cause's warning
    ("GRPOKLJump", "warning", (("run_id", "d"),)): False,  # ... and only of the same run
    ("GRPONonFiniteValues", "critical", (("run_id", "e"), ("signal", "loss"))): False,
    ("GRPOStepsSkipped", "warning", (("run_id", "e"),)): True,  # a non-finite loss explains the skipped steps
    ("GRPORolloutISDrift", "warning", (("run_id", "e"),)): False,  # ... not IS weights that drift
    ("GRPORunPreempted", "warning", (("run_id", "a"),)): False,  # a crash page does not hide a preemption
    # another run's warning of the critical alert's name: run e's non-finite loss hides nothing of run h
    ("GRPONonFiniteValues", "warning", (("run_id", "h"), ("signal", "sample_reward"))): False,
    ("GRPOStepsSkipped", "warning", (("run_id", "h"),)): False,  # a NaN reward does not explain skipped steps
}
"""GRPO alerts of several runs at once (name, severity, other labels) -> whether Alertmanager holds each back:
what compose's inhibitions do, and what every configuration the docs give must do."""


def inhibited(url: str, cases: dict[tuple, bool]) -> dict[tuple, bool]:
    """Post the alerts of `cases` to the Alertmanager at `url`; each one's key -> whether it is inhibited."""
    alerts = {key: alert(key[0], key[1], **dict(key[2])) for key in cases}
    assert httpx.post(f"{url}/api/v2/alerts", json=list(alerts.values()), timeout=10).status_code == 200
    by_labels = {tuple(sorted(a["labels"].items())): key for key, a in alerts.items()}
    deadline = time.monotonic() + 30
    while True:  # inhibition is evaluated when alerts are listed: wait until all arrived
        listed = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
        state = {by_labels[k]: bool(a["status"]["inhibitedBy"]) for a in listed
                 if (k := tuple(sorted(a["labels"].items()))) in by_labels}
        if len(state) == len(cases) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)

