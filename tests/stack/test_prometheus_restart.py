"""A real trainer process while the local stack's real Prometheus restarts with its storage kept.

In Kubernetes Prometheus restarts often (a node drain, an upgrade, out of memory). With its storage kept it neither
scrapes nor evaluates while it is down, and its first evaluation back comes before its first scrape (service
discovery's first update): every run looks overdue until then, with the promise it made before the pause. A
healthy run must notify nobody (docs/alerts.md), and a crash after the restart still pages. A restart that loses
the storage is the grid's (`*-after-lost-storage`: promtool starts from nothing) and prometheus/tests/scenarios.yml's.
"""

from __future__ import annotations

import time

import httpx
import pytest

from otel_grpo.generate._memory import fresh_window
from otel_grpo.generate._rules import seconds
from tests._support.waiting import wait_for
from tests.stack.conftest import scraped_process

pytestmark = pytest.mark.integration

TRAINER = """
import threading
from otel_grpo.telemetry import Telemetry
tel = Telemetry.from_env(run_id={run_id!r})
for step in range(100000):
    with tel.step(step) as s:
        threading.Event().wait(0.5)
        s.record({{"kl": 0.01, "step_time": 0.5}})
"""


def _query(stack, query: str) -> list[dict]:
    return httpx.get(stack.settings.prometheus_url + "/api/v1/query", params={"query": query},
                     timeout=5).json()["data"]["result"]


def _run_alerts(stack, run_id: str) -> set[str]:
    """The run's alerts Prometheus has pending or firing now."""
    alerts = httpx.get(stack.settings.prometheus_url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {f'{a["labels"]["alertname"]} {a["state"]}' for a in alerts if a["labels"].get("run_id") == run_id}


def _scraped(stack, run_id: str) -> bool:
    return bool(_query(stack, f'grpo_process_alive_until_seconds{{run_id="{run_id}"}}'))


def _scraped_since(stack, since: float) -> bool:
    """Whether Prometheus has scraped the trainer's target since `since` (the wall clock)."""
    return any(float(r["value"][1]) > since for r in _query(stack, 'timestamp(up{job="trainer"})'))


def _restart(stack, prometheus, down_s: float, while_down=lambda: None) -> float:
    """Stop Prometheus for `down_s` (calling `while_down` once it is stopped) and start it again; when it was
    ready (the wall clock)."""
    prometheus.stop()
    while_down()
    time.sleep(down_s)
    prometheus.start()
    prometheus.wait_ready(60)
    return time.time()


def _nothing_fires(stack, run_id: str) -> None:
    """No alert of the run fires for `path_settle` and `for_fast`, and a scrape or two more."""
    rules = stack.settings.rules
    fired: set[str] = set()
    deadline = time.monotonic() + seconds(rules.path_settle) + seconds(rules.for_fast) + 5
    while time.monotonic() < deadline:
        fired |= {a for a in _run_alerts(stack, run_id) if a.endswith("firing")}
        time.sleep(0.2)
    assert fired == set()


def _crash_pages(stack, trainer, run_id: str) -> None:
    rules = stack.settings.rules
    trainer.kill()
    wait_for(lambda: "GRPOMetricsAbsent firing" in _run_alerts(stack, run_id), "the crash paged",
             seconds(rules.path_settle) + seconds(rules.liveness_slack) + seconds(rules.for_fast) + 10)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("down", ["overdue", "forgotten"])
def test_a_restart_that_keeps_the_storage_notifies_nothing_and_a_crash_after_it_pages(stack, tmp_path, down):
    """`overdue`: down long enough that the run's promise is overdue by more than the slack; `forgotten`: longer
    than the alert group reads a series and the memory group's records back (`_memory.fresh_window`), so that
    until the memory group's first evaluation nothing is remembered of the run. Watched from the moment it is
    ready, past the first scrape (which waits for service discovery, seconds after the first evaluation),
    `path_settle` and `for_fast`. A run id of each case's own: nothing judged of it before."""
    rules = stack.settings.rules
    run_id = f"prometheus-restart-{down}"
    prometheus = next(c for c in stack.components if c.name == "prometheus")
    trainer = scraped_process(TRAINER.format(run_id=run_id), stack.settings, tmp_path)
    try:
        wait_for(lambda: _scraped(stack, run_id), "the run scraped", 30)
        _restart(stack, prometheus, 2 * seconds(rules.liveness_slack) + 1 if down == "overdue"
                 else seconds(fresh_window(rules)) + 5)
        _nothing_fires(stack, run_id)
        _crash_pages(stack, trainer, run_id)
    finally:
        trainer.kill()
        trainer.wait(10)


@pytest.mark.timeout(150)
def test_a_crash_judged_before_a_restart_is_no_page_for_the_process_relaunched_meanwhile(stack, tmp_path):
    """The run crashes and pages; Prometheus stops, and the job is relaunched under the same run id while it is
    down. Until Prometheus has scraped again it knows of no relaunch: the crash's page stands (held through the
    restart as through a collector outage, Alertmanager's alert the same). Once it has, nothing fires for the
    relaunch, and its own crash pages. (A judgement left from before the restart that the rules no longer write,
    which Prometheus does not mark stale, is prometheus/tests/scenarios.yml's: it comes of a race with the
    restart's last evaluation that no test here can set up.)"""
    rules = stack.settings.rules
    run_id = "prometheus-restart-relaunched"
    prometheus = next(c for c in stack.components if c.name == "prometheus")
    first = scraped_process(TRAINER.format(run_id=run_id), stack.settings, tmp_path / "first")
    relaunched: list = []
    try:
        wait_for(lambda: _scraped(stack, run_id), "the run scraped", 30)
        _crash_pages(stack, first, run_id)
        relaunch = lambda: relaunched.append(  # noqa: E731
            scraped_process(TRAINER.format(run_id=run_id), stack.settings, tmp_path / "relaunched"))
        ready = _restart(stack, prometheus, 2 * seconds(rules.liveness_slack) + 1, relaunch)
        wait_for(lambda: _scraped_since(stack, ready), "the first scrape after the restart", 30)
        time.sleep(2 * seconds(stack.settings.evaluation_interval))  # the rules have read it
        _nothing_fires(stack, run_id)
        _crash_pages(stack, relaunched[0], run_id)
    finally:
        for trainer in (first, *relaunched):
            trainer.kill()
            trainer.wait(10)
