"""The alert model as a property over a grid of runs (otel_grpo/generate/_grid.py, docs/alerts.md).

Every case runs through the committed rules in promtool (Prometheus 3.16), and what fires through the
committed Alertmanager config's routing, grouping and inhibitions (`_delivery`): a healthy run notifies
nobody at any evaluation; a failing one notifies nobody before its onset and its failure mode's alert
reaches a person within the mode's bound. The alerts that fire reach their class's receiver on the real
Alertmanager's routing tree (`amtool config routes test` on the committed config), and a sample of runs,
one of every mode, is replayed through a real Alertmanager as promtool fired it: it sends what the judge
says it sends, inhibited alerts included.
"""

from __future__ import annotations

import collections
import subprocess
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest
import yaml
from otel_grpo.generate import RuleSettings, class_of, rule_files
from otel_grpo.generate._grid import MODES, Case, grid
from otel_grpo.generate._grid_run import PERSONS, Verdict, run
from otel_grpo.generate._grid_trace import Change, Labels, changes, schedule
from tests._support.alertmanager import SIDECAR_HOOK, delivering_alertmanager

pytestmark = pytest.mark.integration

GROUP_WAIT, GROUP_INTERVAL = "250ms", "500ms"
SLOT_S = 1.5
"""Compressed time: one slot per evaluation at which a run's alerts changed, long enough for Alertmanager to send
what the change makes it send (after group_wait, or at the group's next group_interval), as it does in the
10 s and 1 minute after an evaluation at the committed timings, before the next change (60 s later at least)."""


def _sample(verdicts: list[Verdict]) -> list[Verdict]:
    """One run of every mode (the healthy variants too), its step time, scrape interval and path varying with the
    mode: the runs replayed through Alertmanager."""
    by_mode: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_mode.setdefault(v.case.mode, []).append(v)
    return [runs[i % len(runs)] for i, runs in enumerate(by_mode.values())]


@pytest.fixture(scope="module")
def verdicts(promtool, root, tmp_path_factory):
    alertmanager = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())
    return run(grid(), promtool, rule_files(RuleSettings()), alertmanager, tmp_path_factory.mktemp("grid"))


def _describe(case: Case) -> str:
    return (f"{case.run_id}: {case.step_s:g} s steps, {case.scrape_s:g} s scrapes, {case.path}, "
            f"start-up {case.startup_s:g} s")


@pytest.mark.timeout(1500)
def test_the_grid_covers_every_failure_mode_and_enough_runs(verdicts):
    assert len(verdicts) >= 500
    modes = collections.Counter(v.case.mode for v in verdicts)
    assert set(modes) == {m.name for m in MODES}
    steps = {v.case.step_s for v in verdicts}
    assert min(steps) <= 2 and max(steps) >= 1800


def test_healthy_runs_notify_nobody(verdicts):
    noisy = [f"{_describe(v.case)} notified {v.early}" for v in verdicts if v.case.expect is None and v.early]
    assert noisy == []


def test_failing_runs_notify_nobody_before_their_onset(verdicts):
    early = [f"{v.case.mode} {_describe(v.case)} notified {v.early} before {v.case.onset_s:g} s"
             for v in verdicts if v.case.expect is not None and v.early]
    assert early == []


def test_each_failure_reaches_its_alert_within_its_bound(verdicts):
    late = [f"{v.case.mode} {_describe(v.case)}: {v.case.expect} after "
            f"{'never' if v.latency_s is None else f'{v.latency_s:g} s'} (bound {v.case.bound_s:g} s)"
            for v in verdicts if v.case.expect is not None
            and (v.latency_s is None or v.latency_s > (v.case.bound_s or 0))]
    assert late == []


def test_a_failure_pages_once_while_it_lasts(verdicts):
    """Every failure of the grid lasts to its case's end: its alert, once sent, is not resolved and sent again (a
    collector outage after a crash, a hang or a preemption paged hid the run, and the page resolved with the
    outage's first failed scrape, then paged again after it: the `*-then-outage` modes)."""
    again = [f"{v.case.mode} {_describe(v.case)}: {v.case.expect} sent again at {v.repaged}"
             for v in verdicts if v.repaged]
    assert again == []


def test_each_expected_alert_routes_to_its_class(verdicts, root, amtool):
    """A critical alert pages, a warning notifies the run's owner: each failure mode's alert, at the severity it
    fired with, through the committed routing tree as Alertmanager reads it."""
    wanted = {"critical": "page", "warning": "notify"}
    fired = {(v.case.mode, v.case.expect, v.severity) for v in verdicts if v.severity is not None}
    assert {mode for mode, _, _ in fired} == {m.name for m in MODES if m.expect is not None}
    for mode, alert, severity in sorted(fired):
        out = subprocess.run([amtool, "config", "routes", "test", f"--config.file={root / 'alertmanager/alertmanager.yml'}",
                              f"alertname={alert}", f"severity={severity}", "run_id=r"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [wanted[severity]], (mode, alert, out.stdout)


def _first(v: Verdict, changed: list[Change]) -> int | None:
    """The change at which a failing run's alert first fired at or after its onset."""
    return next((i for i, c in enumerate(changed) if c.at_s >= (v.case.onset_s or 0)
                 and any(dict(labels)["alertname"] == v.case.expect for labels in c.fired)), None)


def _replay(url: str, slots: list[dict[str, Change]]) -> None:
    """Each slot's changes sent as Prometheus sends them: alerts that start firing (until an end far ahead, as
    it renews them while they fire), alerts that stopped with their end now."""
    started: dict[Labels, str] = {}
    for slot in slots:
        now = datetime.now(timezone.utc)
        alerts = []
        for change in slot.values():
            for labels in change.fired:
                started[labels] = now.isoformat()
                alerts.append({"labels": dict(labels), "startsAt": started[labels],
                               "endsAt": (now + timedelta(hours=1)).isoformat()})
            alerts += [{"labels": dict(labels), "startsAt": started[labels], "endsAt": now.isoformat()}
                       for labels in change.resolved]
        if alerts:
            assert httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=10).status_code == 200
        time.sleep(SLOT_S)  # pacing, not an assertion: what Alertmanager sent is read once every slot is sent


def _notified(v: Verdict) -> set[tuple[str, str]]:
    """(class, `alertname/run_id`) of the run's alerts that the judge says reached a person."""
    return {(n.receiver, f"{n.alertname}/{v.case.run_id}") for n in v.notified if n.receiver in PERSONS}


@pytest.mark.timeout(300)
def test_sampled_runs_reach_their_receivers_on_the_real_alertmanager(verdicts, root, tmp_path_factory,
                                                                     free_port_factory, alertmanager_bin):
    """A sample of the grid's runs, one of every mode, replayed side by side through a real Alertmanager on the
    committed routing tree and inhibitions: every alert promtool fired for them (those with their run_id: the
    stack's own, GRPOCollectorDown in an outage, pair with no run), in the order it fired them. Alertmanager
    sends exactly what the judge says reaches a person: a healthy run nothing, a failing run's alert to the
    receiver of the class it fired with, and no alert that an alert of its run inhibited while it fired (some
    of the sample's are: a KL spike under GRPOKLHigh, skipped steps under a non-finite loss). Each failure's
    alert arrives in one slot with the other runs' (critical and warning), so an inhibition that paired alerts
    of different runs would silence some of them."""
    traced = _sample(verdicts)
    assert sorted(v.case.mode for v in traced) == sorted(m.name for m in MODES)
    runs = {v.case.run_id: changes(v.firing) for v in traced}
    failing = {v.case.run_id: v for v in traced if v.case.expect is not None}
    align = {run: _first(v, runs[run]) for run, v in failing.items()}
    assert [run for run, i in align.items() if i is None] == []
    slots = schedule(runs, align)
    fired = {(run, dict(labels)["severity"]) for run, c in slots[max(align.values())].items() for labels in c.fired}
    critical, warning = ({run for run, sev in fired if sev == s} for s in ("critical", "warning"))
    assert critical and warning - critical, "each failure's alert arrives with other runs' critical alerts"

    want: dict[str, set[str]] = {"page": set(), "notify": set()}
    for v in traced:
        for cls, alert in _notified(v):
            want[cls].add(alert)
    assert {f"{v.case.expect}/{run}" for run, v in failing.items()} <= want["page"] | want["notify"]
    assert want["page"] and want["notify"]
    heard = {(class_of(dict(labels)), f'{dict(labels)["alertname"]}/{v.case.run_id}')
             for v in traced for _, now in v.firing for labels in now}
    sent = {(cls, a) for cls, alerts in want.items() for a in alerts}
    inhibited = {(cls, a) for cls, a in heard if cls in PERSONS} - sent
    assert inhibited, "the sample holds alerts that fired and, inhibited, reached nobody"
    with delivering_alertmanager(alertmanager_bin, root, tmp_path_factory.mktemp("am-grid"), free_port_factory(),
                                 group_wait=GROUP_WAIT, group_interval=GROUP_INTERVAL) as (url, hooks, _):
        _replay(url, slots)
        got = hooks.delivered({"/page": want["page"], "/notify": want["notify"],
                               SIDECAR_HOOK: want["page"] | want["notify"]})
        with hooks.lock:  # the sidecar's copy names the receiver (the class) of each notification
            classes = {(body["receiver"], f'{a["labels"]["alertname"]}/{a["labels"].get("run_id", "")}')
                       for body in hooks.received[SIDECAR_HOOK] for a in body["alerts"] if a["status"] == "firing"}
    sampled = {v.case.run_id for v in traced}
    ours = {path: {a for a in alerts if a.split("/", 1)[1] in sampled} for path, alerts in got.items()}
    assert {cls: ours.get(f"/{cls}", set()) for cls in want} == want and not ours.get("/deadman")
    assert {(cls, a) for cls, a in classes if cls in PERSONS and a.split("/", 1)[1] in sampled} == sent


def test_a_prometheus_that_lost_its_storage_notifies_no_old_event_and_still_new_ones(verdicts):
    """Prometheus restarted without its storage (kube-prometheus-stack's emptyDir) sees every run mid-flight, 3 hours
    in: the counters of a NaN, a skipped update and a KL streak from an hour before show as series new to it, and
    must not notify again; a new process's first NaN (a new series too) still pages, as a threshold breach or a
    crash after the restart does (the grid's `*-after-lost-storage` modes, every step time and path)."""
    modes = {"lost-storage-after-alerts", "nan-loss", "kl-high-after-lost-storage", "crash-after-lost-storage"}
    ours = [v for v in verdicts if v.case.mode in modes]
    assert {v.case.mode for v in ours} == modes
    assert [f"{_describe(v.case)}: early {v.early}, {v.case.expect} after {v.latency_s}" for v in ours
            if not v.held] == []
