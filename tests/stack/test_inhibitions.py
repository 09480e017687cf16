"""Alertmanager's inhibitions, on the real Alertmanager (built at the pinned version) with compose's file."""

from __future__ import annotations

import time

import httpx
import pytest

from otel_grpo.stack._process import Managed

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def alertmanager(root, tmp_path_factory, free_port_factory, alertmanager_bin):
    d, port = tmp_path_factory.mktemp("am"), free_port_factory()
    am = Managed("alertmanager", [alertmanager_bin, f"--config.file={root / 'alertmanager/alertmanager.yml'}",
                                  f"--storage.path={d}", "--cluster.listen-address=",
                                  f"--web.listen-address=127.0.0.1:{port}"],
                 f"http://127.0.0.1:{port}/-/ready", d / "am.log")
    with am.running(60):
        yield f"http://127.0.0.1:{port}"


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


def test_causes_inhibit_their_symptoms(alertmanager):
    alerts = [
        _alert("GRPOCollectorDown", "critical", instance="otel-collector:8889"),
        _alert("GRPOMetricsAbsent", "warning", run_id="a"),
        _alert("GRPOTrainerStalled", "critical", run_id="b"),
        _alert("GRPONoFirstStep", "critical", run_id="f"),
        _alert("GRPOKLHigh", "critical", run_id="c"),
        _alert("GRPOKLJump", "warning", run_id="c"),
        _alert("GRPOKLJump", "warning", run_id="d"),  # no critical alert for run d
        _alert("GRPONonFiniteValues", "critical", run_id="e", signal="loss"),
        _alert("GRPOStepsSkipped", "warning", run_id="e"),
        _alert("GRPOSidecarDown", "warning", instance="sidecar:8000"),  # no run_id on either side
    ]
    assert httpx.post(f"{alertmanager}/api/v2/alerts", json=alerts, timeout=10).status_code == 200
    state = _inhibited(alertmanager, len(alerts))
    assert state == {
        "GRPOCollectorDown/": False,
        "GRPOMetricsAbsent/a": True,   # collector down: absent runs are its symptom
        "GRPOTrainerStalled/b": True,
        "GRPONoFirstStep/f": True,     # ... so are runs that seem never to have stepped
        "GRPOKLHigh/c": False,
        "GRPOKLJump/c": True,          # critical suppresses warning of the same run
        "GRPOKLJump/d": False,         # ... and only of the same run
        "GRPONonFiniteValues/e": False,
        "GRPOStepsSkipped/e": True,    # non-finite suppresses skipped
        "GRPOSidecarDown/": False,     # the collector's critical alert is of no run: it pairs with none
    }
