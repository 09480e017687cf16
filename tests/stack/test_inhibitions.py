"""Routing and inhibitions on the real Alertmanager (built at the pinned version).

The inhibitions run on compose's committed file. Delivery runs on the config the same function renders
with webhook destinations on 127.0.0.1 (and one-second grouping): the routing tree and inhibitions are
the committed ones, checked below, and every notification is a real HTTP request that arrives here.
"""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from tests._support.alertmanager import SIDECAR_HOOK, delivering_alertmanager, serve_alertmanager

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def alertmanager(root, tmp_path_factory, free_port_factory, alertmanager_bin):
    d, port = tmp_path_factory.mktemp("am"), free_port_factory()
    with serve_alertmanager(alertmanager_bin, root / "alertmanager/alertmanager.yml", d, port).running(60):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def delivery(root, tmp_path_factory, free_port_factory, alertmanager_bin):
    """An Alertmanager routing to webhook receivers here: (its URL, the receivers, the config it runs)."""
    with delivering_alertmanager(alertmanager_bin, root, tmp_path_factory.mktemp("am-delivery"), free_port_factory(),
                                 group_wait="1s", group_interval="1s") as served:
        yield served


def _alert(name: str, severity: str, **labels: str) -> dict:
    return {"labels": {"alertname": name, "severity": severity, **labels},
            "annotations": {"summary": name}, "startsAt": "2026-01-01T00:00:00Z"}


def _inhibited(url: str, expected: int) -> dict[str, bool]:
    deadline = time.monotonic() + 30
    while True:
        alerts = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
        state = {f'{a["labels"]["alertname"]}/{a["labels"].get("run_id", "")}': bool(a["status"]["inhibitedBy"])
                 for a in alerts}
        # Inhibition is evaluated when alerts are listed; wait until all arrived.
        if len(state) == expected or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def test_causes_inhibit_only_their_own_runs_symptoms(alertmanager):
    alerts = [
        _alert("GRPOCollectorDown", "critical", instance="otel-collector:8889"),
        _alert("GRPOSidecarDown", "warning", instance="sidecar:8000"),
        _alert("GRPOMetricsAbsent", "critical", run_id="a"),
        _alert("GRPOTrainerStalled", "critical", run_id="b"),
        _alert("GRPONoFirstStep", "critical", run_id="f"),
        _alert("GRPORunPreempted", "warning", run_id="g"),
        _alert("GRPOKLHigh", "critical", run_id="c"),
        _alert("GRPOKLJump", "warning", run_id="c"),
        _alert("GRPOKLSpike", "warning", run_id="c"),
        _alert("GRPOEntropyCollapse", "warning", run_id="c"),
        _alert("GRPOKLJump", "warning", run_id="d"),  # no critical alert for run d
        _alert("GRPONonFiniteValues", "critical", run_id="e", signal="loss"),
        _alert("GRPOStepsSkipped", "warning", run_id="e"),
        _alert("GRPORolloutISDrift", "warning", run_id="e"),
        _alert("GRPORunPreempted", "warning", run_id="a"),
        _alert("GRPONonFiniteValues", "warning", run_id="h", signal="sample_reward"),
        _alert("GRPOStepsSkipped", "warning", run_id="h"),
    ]
    assert httpx.post(f"{alertmanager}/api/v2/alerts", json=alerts, timeout=10).status_code == 200
    state = _inhibited(alertmanager, len(alerts))
    assert state == {
        # The stack's alerts inhibit nothing: a collector or sidecar outage never hides a run's alert
        # (the run-end rules themselves hold back while the collector is down), and they pair with no run.
        "GRPOCollectorDown/": False,
        "GRPOSidecarDown/": False,
        "GRPOMetricsAbsent/a": False,
        "GRPOTrainerStalled/b": False,
        "GRPONoFirstStep/f": False,
        "GRPORunPreempted/g": False,
        "GRPOKLHigh/c": False,
        "GRPOKLJump/c": True,          # KL over its threshold explains the jump and the spike of the same run
        "GRPOKLSpike/c": True,
        "GRPOEntropyCollapse/c": False,  # ... not another cause's warning: it reaches the run's owner
        "GRPOKLJump/d": False,         # ... and only of the same run
        "GRPONonFiniteValues/e": False,
        "GRPOStepsSkipped/e": True,    # a non-finite loss explains the skipped steps
        "GRPORolloutISDrift/e": False,  # ... not IS weights that drift
        "GRPORunPreempted/a": False,   # a crash page does not hide a preemption warning either
        "GRPONonFiniteValues/h": False,
        "GRPOStepsSkipped/h": False,   # a NaN reward does not
    }


def test_delivery_runs_the_committed_routing_tree_and_inhibitions(root, delivery):
    _, _, config = delivery
    committed = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    for cfg in (committed, config):
        cfg["route"].pop("group_wait"), cfg["route"].pop("group_interval")
    assert config["route"] == committed["route"] and config["inhibit_rules"] == committed["inhibit_rules"]


def test_each_class_reaches_exactly_its_receiver_and_every_alert_the_sidecar(delivery):
    url, hooks, _ = delivery
    alerts = [
        _alert("GRPOKLHigh", "critical", run_id="p"),
        _alert("GRPOKLJump", "warning", run_id="p"),  # inhibited by p's critical alert: reaches no one
        _alert("GRPOEntropyCollapse", "warning", run_id="n"),
        _alert("GRPOCollectorDown", "critical", instance="otel-collector:8888"),
        _alert("GRPOSidecarDown", "warning", instance="sidecar:8000"),
        _alert("GRPOMetricsAbsent", "critical", run_id="crashed"),  # paged despite the collector being down
        _alert("GRPORunPreempted", "warning", run_id="preempted"),
        _alert("CustomInfo", "info", run_id="r"),
        _alert("GRPOWatchdog", "none"),
    ]
    assert httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=10).status_code == 200
    page = {"GRPOKLHigh/p", "GRPOCollectorDown/", "GRPOMetricsAbsent/crashed"}
    notify = {"GRPOEntropyCollapse/n", "GRPOSidecarDown/", "GRPORunPreempted/preempted"}
    expected = {"/page": page, "/notify": notify, "/deadman": {"GRPOWatchdog/"},
                SIDECAR_HOOK: page | notify | {"CustomInfo/r", "GRPOWatchdog/"}}
    assert hooks.delivered(expected) == expected
    with hooks.lock:  # the sidecar's copy says which class each notification was for
        receivers = {(b["receiver"], a["labels"]["alertname"]) for b in hooks.received[SIDECAR_HOOK]
                     for a in b["alerts"]}
    assert ("record", "CustomInfo") in receivers and ("page", "GRPOMetricsAbsent") in receivers
    assert ("notify", "GRPORunPreempted") in receivers and ("deadman", "GRPOWatchdog") in receivers
