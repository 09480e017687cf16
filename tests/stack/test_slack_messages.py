"""What a Slack destination shows, on the real Alertmanager posting to a receiver here: the state leads the title
(a resolved crash page does not read as a second crash page), and a group with some alerts resolved lists them
apart, not as firing."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import httpx
import pytest

from otel_grpo.generate import Destination, alertmanager_config, dump
from otel_grpo.generate._routing import load_routing
from tests._support.alertmanager import Hooks, serve_alertmanager

pytestmark = pytest.mark.integration


def _post(url: str, instances: list[str], *, resolved: bool = False) -> None:
    ends = {"endsAt": "2026-01-01T00:00:01Z"} if resolved else {}
    alerts = [{"labels": {"alertname": "GRPOCollectorDown", "severity": "critical", "instance": i},
               "annotations": {"summary": f"The OpenTelemetry Collector is not scraped ({i})"},
               "startsAt": "2026-01-01T00:00:00Z", **ends} for i in instances]
    assert httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=10).status_code == 200


def _message(hooks: Hooks, title: str, needs: str = "") -> dict:
    """The latest message on /page once one has `title` and `needs` in its text (a group's messages come as its
    alerts do: the first may hold one of two posted together)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with hooks.lock:
            titled = [m["attachments"][0] for m in hooks.received["/page"]
                      if m["attachments"][0]["title"] == title and needs in m["attachments"][0]["text"]]
        if titled:
            return titled[-1]
        time.sleep(0.1)
    raise AssertionError(f"no message titled {title!r}: {hooks.received['/page']}")


def test_a_slack_page_says_firing_or_resolved_and_lists_resolved_alerts_apart(root, tmp_path, free_port_factory,
                                                                              alertmanager_bin):
    hooks = Hooks()
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    (tmp_path / "page_url").write_text(f"{hooks.url}/page")
    routing = replace(load_routing(root), page=Destination(kind="slack", url_file="page_url"))
    config = alertmanager_config(f"{hooks.url}/sidecar", routing, secrets_dir=str(tmp_path), group_wait="1s",
                                 group_interval="2s")
    (tmp_path / "alertmanager.yml").write_text(dump(config))
    port = free_port_factory()
    try:
        with serve_alertmanager(alertmanager_bin, tmp_path / "alertmanager.yml", tmp_path, port).running(60):
            url = f"http://127.0.0.1:{port}"
            _post(url, ["c1:8888", "c2:8888"])
            first = _message(hooks, "[FIRING:2] critical: GRPOCollectorDown ")
            assert "(c1:8888)" in first["text"] and "(c2:8888)" in first["text"] and "resolved" not in first["text"]
            _post(url, ["c1:8888"], resolved=True)
            second = _message(hooks, "[FIRING:1] critical: GRPOCollectorDown ", "resolved: ")
            assert second["text"].startswith("The OpenTelemetry Collector is not scraped (c2:8888)\n")
            assert "resolved: The OpenTelemetry Collector is not scraped (c1:8888)\n" in second["text"]
            _post(url, ["c2:8888"], resolved=True)
            third = _message(hooks, "[RESOLVED] critical: GRPOCollectorDown ")
            assert third["text"] == "resolved: The OpenTelemetry Collector is not scraped (c2:8888)\n"
    finally:
        hooks.shutdown()
