"""End to end: `otel-grpo demo --exit --fault kl-spike@N` against the real local stack.

The demo runs to completion and stops the stack. The stack is then started again on
the same data directory, so the assertions read what Prometheus stored (its TSDB)
and what the sidecar stored (its database), from the real processes:

- Prometheus holds a series for every dashboard query, at the run's last sample;
- the KL alert fired in Prometheus, reached Alertmanager (recorded by the demo's
  watcher while the run was live: Alertmanager forgets resolved alerts) and the sidecar;
- the sidecar holds samples for every step the trainer logged.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from otel_grpo import catalog
from otel_grpo.catalog._table import FOLLOW_ONLY, TRL_ONLY
from otel_grpo.stack import LocalStack, StackSettings
from otel_grpo.generate._checks import concrete, dashboard_exprs, metric_names
from otel_grpo.generate.dashboards import dashboards

pytestmark = pytest.mark.integration

RUN_ID = "e2e-kl-spike"
# 40 steps of >= 0.5 s: the local baseline window ends 10 s back and needs samples in it
STEPS, SPIKE_AT, NAN_AT = 40, 8, 4
KL_ALERT = "GRPOKLHigh"


def _trainer_cli_exists() -> bool:
    out = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "train", "--help"], capture_output=True, timeout=120)
    return out.returncode == 0


@pytest.fixture(scope="module")
def demo(tmp_path_factory, free_port_factory):
    if not _trainer_cli_exists():
        pytest.skip("`otel-grpo train` is not available yet (trainer issue not landed)")
    d = tmp_path_factory.mktemp("e2e")
    ports = {k: free_port_factory() for k in ("sidecar-port", "prometheus-port", "alertmanager-port",
                                              "trainer-metrics-port")}
    argv = [sys.executable, "-m", "otel_grpo.cli", "demo", "--exit", "--dir", str(d), "--run-id", RUN_ID,
            "--steps", str(STEPS), "--fault", f"kl-spike@{SPIKE_AT}", "--fault", f"nan@{NAN_AT}",
            "--trainer-log", str(d / "logs-of-the-trainer" / "trainer.log"),  # a folder not there yet: made
            # Rollout IS correction is off by default; on (mask mode, so the masked
            # fractions exist too), every rollout-IS panel has data.
            "--trainer-arg=--set", "--trainer-arg=rollout_correction.enabled=true",
            "--trainer-arg=--set", "--trainer-arg=rollout_correction.mode=mask"]
    for flag, port in ports.items():
        argv += [f"--{flag}", str(port)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    log = d / "logs-of-the-trainer" / "trainer.log"
    trainer_log = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + trainer_log
    summary = json.loads((d / "runs" / RUN_ID / "summary.json").read_text())
    settings = StackSettings(dir=d, **{k.replace("-", "_"): v for k, v in ports.items()})
    with LocalStack(settings) as stack:  # again, on the data the demo left
        yield {"dir": d, "summary": summary, "stdout": out.stdout, "stack": stack}


def test_demo_prints_a_summary(demo):
    s = demo["summary"]
    assert s["trainer_exit_code"] == 0 and s["steps"] == STEPS
    assert s["reward_first"] is not None and s["reward_last"] is not None
    assert f"run {RUN_ID}" in demo["stdout"] and "reward (mean):" in demo["stdout"]
    after = demo["stdout"].split("reward (mean):", 1)[1]
    assert "http://" not in after  # --exit: no URL that is dead by the time it is read
    assert s["sidecar_db"] in after and s["samples_spill"] in after
    # the trainer's output went to a file: progress lines, not a bar that draws nothing there
    assert f"grpo {STEPS}/{STEPS} steps  reward " in (demo["dir"] / "logs-of-the-trainer" / "trainer.log").read_text()


def test_the_runs_pages_show_it_and_its_alerts_after_it_ended(demo):
    """The pages the demo prints after its summary (without --exit, while it serves them), on the stack
    started again: the run explorer, the alerts the sidecar received (Alertmanager has forgotten them by
    then) and Prometheus's history of the run's alerts."""
    pages = demo["summary"]["urls"]
    with httpx.Client(timeout=10) as http:
        assert "run explorer" in http.get(pages["run explorer"]).text
        assert KL_ALERT in {a["alertname"] for a in http.get(pages["alerts received"]).json()}
        history = http.get(pages["alert history"]).json()["data"]["result"]
        assert KL_ALERT in {series["metric"]["alertname"] for series in history}
        assert {series["metric"]["run_id"] for series in history} == {RUN_ID}
        assert http.get(pages["samples"]).json()


def test_kl_alert_fired_and_reached_alertmanager_and_sidecar(demo):
    s = demo["summary"]
    assert KL_ALERT in s["alerts_fired"]
    assert KL_ALERT in s["alerts_in_alertmanager"]
    assert KL_ALERT in s["alerts_in_sidecar"]
    settings = demo["stack"].settings
    with httpx.Client(timeout=10) as http:
        stored = http.get(f"{settings.sidecar_url}/api/alerts", params={"run_id": RUN_ID}).json()
        assert KL_ALERT in {a["alertname"] for a in stored}
        q = f'ALERTS{{alertname="{KL_ALERT}", alertstate="firing", run_id="{RUN_ID}"}}[1h]'
        history = http.get(f"{settings.prometheus_url}/api/v1/query", params={"query": q}).json()["data"]["result"]
        assert history, "Prometheus stored no firing samples of the KL alert"


def _run_span(http: httpx.Client, prometheus: str) -> tuple[float, float]:
    """The first and last scrape times of the run's step index."""
    q = f'grpo_step_index{{run_id="{RUN_ID}"}}[1h]'
    result = http.get(f"{prometheus}/api/v1/query", params={"query": q}).json()["data"]["result"]
    assert result, "no grpo_step_index series for the run"
    times = [float(t) for series in result for t, _ in series["values"]]
    return min(times), max(times)


_KEYS = {s.prometheus_name: s.key for s in catalog.SIGNALS}


def _rarely_logged(expr: str, logged: dict[int, dict]) -> bool:
    """Whether every signal `expr` reads is absent from the run's own log at most of its steps. A statistic a step
    does not define (no completion ended before the length limit: no terminated length) is not served for it
    ("absent is absent"), and a gauge holds a step's values only until the next step starts, so 15-s scrapes of
    a run of half-second steps can miss the few steps that had it (the kl-spike run's terminated lengths exist
    at steps 0-8 and 11-12 of 40); matching a scrape to the steps it saw is not exact enough to tell."""
    keys = [_KEYS.get(name) for name in metric_names(expr)]
    return all(keys) and all(sum(row.get(key) is not None for row in logged.values()) * 2 < len(logged)
                             for key in keys)


# Heartbeats come from evaluation batches, and the demo trainer does not evaluate (tests/stack/test_local.py
# scrapes them from a process that does)
_BETWEEN_STEPS = frozenset({"activity"})


def _demo_cannot_emit(expr: str) -> bool:
    """Queries of signals only verl's files (`otel-grpo follow`) or a TRL Trainer carry (the tests under
    tests/integrations check those), or work between steps; and the collector's health (local mode runs none:
    tests/stack/test_collector_e2e.py scrapes a real one)."""
    return (any(catalog.get(key).prometheus_name in expr for key in FOLLOW_ONLY | TRL_ONLY | _BETWEEN_STEPS)
            or "otelcol_" in expr or "job_instance:collector:seen" in expr)


def test_prometheus_holds_a_series_for_every_dashboard_query(demo):
    prometheus = demo["stack"].settings.prometheus_url
    # only a MaxEnt-GRPO run logs these (its weighting and controllers): the demo trainer has none
    maxent = {s.prometheus_name for s in catalog.SIGNALS if s.group is catalog.Group.MAXENT}
    empty = []
    with httpx.Client(timeout=30) as http:
        # over the whole run, not at its last step: a statistic absent at the last step (every completion of the
        # spiked model hit the length limit, so no terminated length) is rightly not served as current there
        start, end = _run_span(http, prometheus)
        start = end - 5 * ((end - start) // 5)  # the 5-s grid ends at the last scrape: some recording rules start late
        logged: dict[int, dict] = {}  # the run's own log (metrics.jsonl), a step's lines merged
        for line in (demo["dir"] / "runs" / RUN_ID / "metrics.jsonl").read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                logged.setdefault(row["step"], {}).update(row)
        for d in dashboards().values():
            for title, expr in dashboard_exprs(d):
                if _demo_cannot_emit(expr):
                    continue
                q = concrete(expr, RUN_ID, rate_interval="15s")
                r = http.get(
                    f"{prometheus}/api/v1/query_range", params={"query": q, "start": start, "end": end, "step": "5s"}
                ).json()
                assert r["status"] == "success", (title, q, r)
                if not r["data"]["result"] and not metric_names(expr) <= maxent \
                        and not _rarely_logged(expr, logged):
                    empty.append(f"{title}: {q}")
    assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)


def test_sidecar_holds_samples_for_every_step(demo):
    metrics = demo["dir"] / "runs" / RUN_ID / "metrics.jsonl"
    logged = sorted({json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()})
    assert len(logged) == STEPS
    settings = demo["stack"].settings
    with httpx.Client(timeout=10) as http:
        with_samples = http.get(f"{settings.sidecar_url}/api/runs/{RUN_ID}/sample-steps").json()
        steps = [row["step"] for row in http.get(f"{settings.sidecar_url}/api/runs/{RUN_ID}/steps").json()]
    assert sorted(with_samples) == logged
    assert sorted(steps) == logged


def test_prometheus_saw_the_run_finish_before_its_endpoint_closed(demo):
    """Local mode: the trainer's /metrics lingers after finish(), so GRPOMetricsAbsent can tell."""
    prometheus = demo["stack"].settings.prometheus_url
    q = f'max_over_time(grpo_run_finished{{run_id="{RUN_ID}"}}[1h])'
    with httpx.Client(timeout=10) as http:
        result = http.get(f"{prometheus}/api/v1/query", params={"query": q}).json()["data"]["result"]
    assert [float(r["value"][1]) for r in result] == [1.0]
