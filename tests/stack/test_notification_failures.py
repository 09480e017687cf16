"""When the notification path itself fails: the local stack's real Prometheus and Alertmanager, webhook receivers here.

A page receiver that answers 500 loses nothing for good (Alertmanager tries again at every group interval), but
until it answers nobody would know: the page does not arrive, and the Watchdog kept pinging the dead man's switch
as if all were well. Now the failure notifies (GRPOAlertDeliveryFailing, a warning: the `notify` receiver) and the
Watchdog stops, so the dead man's switch pages whoever watches it (docs/operations.md, GRPOAlertDeliveryFailing).
"""

from __future__ import annotations

import threading

import httpx
import pytest

from otel_grpo.generate import Destination, Routing
from otel_grpo.stack import LocalStack, StackSettings
from tests._support.alertmanager import Hooks
from tests._support.waiting import wait_for

pytestmark = pytest.mark.integration

RECEIVERS = ("page", "notify", "deadman")


@pytest.fixture
def routed_stack(tmp_path, free_port_factory):
    """`otel-grpo up`'s stack (local-mode rules and grouping) with every class routed to a webhook here."""
    hooks = Hooks()
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    for name in RECEIVERS:
        (tmp_path / f"{name}_url").write_text(f"{hooks.url}/{name}")
    routing = Routing(**{n: Destination(kind="webhook", url_file=f"{n}_url") for n in RECEIVERS})
    ports = {k: free_port_factory() for k in ("sidecar_port", "prometheus_port", "alertmanager_port",
                                              "trainer_metrics_port")}
    settings = StackSettings(dir=tmp_path / "stack", routing=routing, secrets_dir=tmp_path, **ports)
    try:
        with LocalStack(settings) as stack:
            yield stack, hooks
    finally:
        hooks.shutdown()


def _firing(stack) -> set[str]:
    alerts = httpx.get(stack.settings.prometheus_url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


@pytest.mark.timeout(120)
def test_a_failing_page_receiver_notifies_stops_the_watchdog_and_the_page_arrives_when_it_answers(routed_stack):
    stack, hooks = routed_stack
    wait_for(lambda: "GRPOWatchdog/" in hooks.firing().get("/deadman", set()), "the Watchdog's first ping", 30)
    hooks.failing.add("/page")
    crash = {"labels": {"alertname": "GRPOMetricsAbsent", "severity": "critical", "run_id": "r"},
             "annotations": {"summary": "run r stopped"}}
    assert httpx.post(stack.settings.alertmanager_url + "/api/v2/alerts", json=[crash], timeout=5).status_code == 200

    wait_for(lambda: "GRPOAlertDeliveryFailing/" in hooks.firing().get("/notify", set()),
             "the failed page notified (GRPOAlertDeliveryFailing to the notify receiver)", 60, every=0.2)
    firing = _firing(stack)
    assert "GRPOAlertDeliveryFailing" in firing and "GRPOWatchdog" not in firing  # the switch's pings stop
    assert "GRPOMetricsAbsent/r" not in hooks.firing().get("/page", set())

    hooks.failing.clear()  # the receiver answers again: Alertmanager's next try delivers the page
    wait_for(lambda: "GRPOMetricsAbsent/r" in hooks.firing().get("/page", set()), "the page after the outage", 30)
