"""docker-compose.yml without an engine: rendered per profile, then run as processes on 127.0.0.1.

What a fresh checkout's `docker compose --profile cpu --profile follow up` would do, from
`docker-compose config`'s output (tests/stack/compose_sandbox.py says exactly what stands in for the engine):
the `init` service fills the secrets volume, then the sidecar, Alertmanager, the collector and
Prometheus start with their rendered commands, environments and mounted files, each as its
image's uid; the follower (the light image: torch unimportable) re-emits a JSONL log whose KL
goes high, and the alert travels follower -> collector -> Prometheus -> Alertmanager -> sidecar;
the CPU trainer's rendered command exports its steps through the collector with its token.
Then the auth rules: nothing answers or stores without its credential.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import stat
import threading
import time
from pathlib import Path

import httpx
import pytest

from otel_grpo.generate._configs import WEB_USER
from tests._support.waiting import wait_for
from tests.stack.compose_sandbox import Sandbox, new_base, render

pytestmark = pytest.mark.integration

RUN_ID = "compose-follow"
FORGED_RUN = "forged-no-token"
STEPS, KL_FROM, STEP_S = 80, 10, 0.5
READABLE_BY = {"sidecar": 10001, "otel-collector": 10001, "alertmanager": 65534, "prometheus": 65534}


def _need_compose() -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose not on PATH (apt-get install docker-compose; `make setup` does)")


def _write_job_log(path: Path, stop: threading.Event) -> None:
    """The followed job: one `{"step": N, ...}` line per STEP_S, KL high from KL_FROM."""
    with path.open("a") as f:
        for step in range(STEPS):
            if stop.is_set():
                return
            kl = 1.5 if step >= KL_FROM else 0.1
            f.write(json.dumps({"step": step, "kl": kl, "reward": 0.5, "loss": 0.1}) + "\n")
            f.flush()
            time.sleep(STEP_S)


@pytest.fixture(scope="module")
def stack(root, free_port_factory, otelcol, prometheus_bin, alertmanager_bin):
    _need_compose()
    base = new_base()
    (base / "joblogs").mkdir()
    os.chmod(base / "joblogs", 0o755)
    rendered = render(root, ("cpu", "follow"), {"FOLLOW_DIR": str(base / "joblogs")})
    sb = Sandbox(rendered, base, {"otelcol": otelcol, "prometheus": prometheus_bin, "alertmanager": alertmanager_bin},
                 free_port_factory,
                 host_env={"OTEL_GRPO_FOLLOW_JSONL": "/follow/job.jsonl", "OTEL_GRPO_FOLLOW_RUN_ID": RUN_ID,
                           "OTEL_GRPO_FOLLOW_FROM_START": "true", "OTEL_GRPO_FOLLOW_POLL": "0.2"})
    (base / "logs").mkdir()
    init = sb.run_once("init")
    assert init.returncode == 0, init.stdout + init.stderr
    secrets = sb.volume("secrets")
    web = httpx.BasicAuth(WEB_USER, (secrets / "web_password").read_text())
    started, stop = [], threading.Event()
    try:
        for name, ready, auth in (("sidecar", sb.url("sidecar", 8000) + "/readyz", None),
                                  ("alertmanager", sb.url("alertmanager", 9093) + "/-/ready", web),
                                  ("otel-collector", sb.url("otel-collector", 13133) + "/", None),
                                  ("prometheus", sb.url("prometheus", 9090) + "/-/ready", web)):
            m = sb.managed(name, ready)
            m.start()
            started.append(m)
            if auth is None:
                m.wait_ready(90)
            else:  # readiness behind basic auth: poll with the credentials
                wait_for(lambda: _ok(m, ready, auth), f"{name} ready", 90, every=0.3)
        writer = threading.Thread(target=_write_job_log, args=(base / "joblogs/job.jsonl", stop), daemon=True)
        writer.start()
        follower = sb.popen("follower")
        yield {"sb": sb, "init": init, "web": web, "follower": follower, "secrets": secrets,
               "tokens": {n: (secrets / n).read_text() for n in ("otlp_token", "sidecar_token", "sidecar_read_token")}}
    finally:
        stop.set()
        for m in reversed(started):
            m.stop()
        if "follower" in locals():
            follower.terminate()
            follower.wait(30)
        shutil.rmtree(base, ignore_errors=True)


def _ok(m, url: str, auth) -> bool:
    if m.proc.poll() is not None:
        raise AssertionError(f"{m.name} exited with {m.proc.returncode}: {m.log_tail()}")
    try:
        return httpx.get(url, auth=auth, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _query(st, q: str) -> list[dict]:
    r = httpx.get(st["sb"].url("prometheus", 9090) + "/api/v1/query", params={"query": q}, auth=st["web"], timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["data"]["result"]


def test_init_creates_every_secret_readable_by_each_service_user(stack):
    secrets = stack["secrets"]
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o755
    names = {p.name for p in secrets.iterdir()}
    assert {"otlp_token", "otlp_headers", "sidecar_token", "sidecar_read_token", "web_password", "web.yml",
            "grafana_admin_password", "postgres_password"} <= names
    for p in secrets.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p.name  # Grafana's 472 and Alertmanager's 65534 too
        assert p.read_text().strip(), p.name  # never a blank token
    assert (secrets / "otlp_headers").read_text() == "authorization=Bearer%20" + (secrets / "otlp_token").read_text()
    if os.geteuid() == 0:  # the collector (10001) owns its queue volume
        assert stack["sb"].volume("otelcol-queue").stat().st_uid == 10001


def test_each_service_runs_as_its_image_user_and_reads_its_files(stack):
    """Alertmanager, Prometheus and the collector started as their uids (setpriv) and serve, so they
    read their secrets; every file a service names in its rendered environment (the *_FILE
    variables), its uid can read, checked as that uid."""
    sb = stack["sb"]
    if os.geteuid() != 0:
        pytest.skip("not root: the services ran as this user")
    assert {s: sb.uid(s) for s in READABLE_BY} == READABLE_BY
    assert all(sb.runs_as_its_user(s) for s in ("alertmanager", "prometheus", "otel-collector"))
    r = httpx.get(sb.url("alertmanager", 9093) + "/api/v2/status", auth=stack["web"], timeout=10)
    assert r.status_code == 200 and "sidecar_token" in r.json()["config"]["original"]
    named = 0
    for service in ("sidecar", "follower", "otel-collector"):
        _, env = sb.command(service)
        for var, path in env.items():
            if var.endswith("_FILE"):
                named += 1
                assert sb.readable_as_user(service, Path(path)), (service, var, path)
    assert named >= 4


def test_the_kl_alert_travels_from_the_follower_to_the_sidecar(stack):
    st, sb = stack, stack["sb"]
    firing = f'ALERTS{{alertname="GRPOKLHigh", alertstate="firing", run_id="{RUN_ID}"}}'
    assert wait_for(lambda: _query(st, firing), "GRPOKLHigh firing in Prometheus", 150, every=1)

    def in_alertmanager():
        r = httpx.get(sb.url("alertmanager", 9093) + "/api/v2/alerts", auth=st["web"], timeout=10)
        return any(a["labels"].get("alertname") == "GRPOKLHigh" for a in r.json())

    assert wait_for(in_alertmanager, "GRPOKLHigh in Alertmanager", 60, every=0.5)
    read = _bearer(st["tokens"]["sidecar_read_token"])

    def in_sidecar():
        r = httpx.get(sb.url("sidecar", 8000) + "/api/alerts", params={"run_id": RUN_ID}, headers=read, timeout=10)
        return r.status_code == 200 and "GRPOKLHigh" in {a["alertname"] for a in r.json()}

    assert wait_for(in_sidecar, "GRPOKLHigh in the sidecar (Alertmanager's webhook with the token)", 90, every=0.5)
    steps = httpx.get(sb.url("sidecar", 8000) + f"/api/runs/{RUN_ID}/steps", headers=read, timeout=10)
    assert steps.status_code == 200 and {row["step"] for row in steps.json()} >= set(range(KL_FROM)), steps.text
    assert stack["follower"].poll() is None, "the follower (no torch) is still following"


def _span_body(run_id: str) -> bytes:
    """An OTLP/JSON step span of `run_id`, as a forger would send it."""
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "grpo.step", "kind": 1,
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "grpo.run_id", "value": {"stringValue": run_id}},
                           {"key": "grpo.step", "value": {"intValue": "0"}}]}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "forger"}}]},
        "scopeSpans": [{"spans": [span]}]}]}).encode()


def test_the_collector_refuses_otlp_without_its_token_and_nothing_reaches_the_sidecar(stack):
    sb, tokens = stack["sb"], stack["tokens"]
    url = sb.url("otel-collector", 4318) + "/v1/traces"
    json_ct = {"Content-Type": "application/json"}
    for headers in ({}, _bearer("wrong"), _bearer(tokens["sidecar_token"])):  # the sidecar's token is not the collector's
        r = httpx.post(url, content=_span_body(FORGED_RUN), headers={**json_ct, **headers}, timeout=10)
        assert r.status_code == 401, (headers, r.status_code, r.text)
    # The token goes in; wait until the collector has passed that on, then look for the forged run.
    ok = httpx.post(url, content=gzip.compress(_span_body("probe-with-token")), timeout=10,
                    headers={**json_ct, "Content-Encoding": "gzip", **_bearer(tokens["otlp_token"])})
    assert ok.status_code == 200, ok.text
    read = _bearer(tokens["sidecar_read_token"])

    def runs() -> set[str]:
        r = httpx.get(sb.url("sidecar", 8000) + "/api/runs", headers=read, timeout=10)
        return {row["run_id"] for row in r.json()}

    assert wait_for(lambda: "probe-with-token" in runs(), "the authenticated probe in the sidecar", 60, every=0.5)
    assert FORGED_RUN not in runs()


def test_the_sidecar_prometheus_and_alertmanager_refuse_requests_without_credentials(stack):
    sb, tokens, web = stack["sb"], stack["tokens"], stack["web"]
    sidecar = sb.url("sidecar", 8000)
    assert httpx.post(sidecar + "/v1/traces", content=_span_body(FORGED_RUN),
                      headers={"Content-Type": "application/json"}, timeout=10).status_code == 401
    assert httpx.get(sidecar + "/api/runs", timeout=10).status_code == 401
    assert httpx.get(sidecar + "/api/runs", headers=_bearer(tokens["sidecar_token"]), timeout=10).status_code == 401
    prom, am = sb.url("prometheus", 9090), sb.url("alertmanager", 9093)
    wrong = httpx.BasicAuth(WEB_USER, "wrong")
    for url, method in ((prom + "/api/v1/query?query=up", "GET"), (prom + "/-/reload", "POST"),
                        (am + "/api/v2/alerts", "GET"), (am + "/api/v2/silences", "GET")):
        for auth in (None, wrong):
            assert httpx.request(method, url, auth=auth, timeout=10).status_code == 401, (method, url, auth)
    assert httpx.post(prom + "/-/reload", auth=web, timeout=30).status_code == 200  # the lifecycle API, authenticated
    # Prometheus reaches Alertmanager and scrapes it, and itself, with the same credentials.
    up = {r["metric"]["job"]: r["value"][1] for r in _query(stack, "up")}
    assert wait_for(lambda: {r["metric"]["job"]: r["value"][1] for r in _query(stack, "up")}.get("alertmanager") == "1",
                    "alertmanager scraped with basic auth", 60, every=1), up
    assert _query(stack, 'up{job="prometheus"} == 1') and _query(stack, 'up{job="sidecar"} == 1')


def test_the_cpu_trainer_runs_its_rendered_command_and_exports_with_the_token(stack):
    """`train --preset demo --run-id ""` (a generated run id) through the image's entry point: its
    steps reach the sidecar and its metrics Prometheus; SIGTERM ends the run on purpose."""
    sb, read = stack["sb"], _bearer(stack["tokens"]["sidecar_read_token"])
    trainer = sb.popen("trainer-cpu")
    try:
        def trainer_run():
            r = httpx.get(sb.url("sidecar", 8000) + "/api/runs", headers=read, timeout=10)
            return next((row["run_id"] for row in r.json()
                         if row["service_name"] == "grpo-trainer" and row["last_step"] is not None), None)

        run_id = wait_for(trainer_run, "a step of the CPU trainer in the sidecar", 180, every=1)
        assert wait_for(lambda: _query(stack, f'grpo_step_index{{run_id="{run_id}"}}'),
                        "the trainer's metrics in Prometheus", 60, every=1)
    finally:
        trainer.send_signal(signal.SIGTERM)
        rc = trainer.wait(150)
    assert rc == 0, (sb.base / "logs/trainer-cpu.log").read_text()[-3000:]
