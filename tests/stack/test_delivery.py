"""The grid's judge delivers what fired as Alertmanager does (otel_grpo/generate/_delivery.py): routing, group
timings and the committed inhibit rules, read from the config, on hand-made firing sequences; and the model's
inhibitions agree with a real Alertmanager's on the committed rules and on the semantics' edge cases."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from otel_grpo.generate._delivery import Delivery
from otel_grpo.generate._grid import Case
from otel_grpo.generate._grid_run import judge
from otel_grpo.generate._grid_trace import Firing, firing, of_run
from tests._support.alertmanager import serve_alertmanager


@pytest.fixture(scope="module")
def committed(root) -> dict:
    return yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())


def _a(name: str, severity: str, run: str = "a", **labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"alertname": name, "severity": severity, "run_id": run, **labels}.items()))


def _case(run: str = "a", expect: str | None = None, onset: float | None = None) -> Case:
    return Case("synthetic", run, (), 10.0, 60.0, 0.0, 0.0, 3600.0, expect, onset, 300.0)


NAN, SKIPPED = _a("GRPONonFiniteValues", "critical", signal="loss"), _a("GRPOStepsSkipped", "warning")


def test_a_warning_its_runs_critical_alert_inhibits_reaches_the_owner_after_the_critical_resolves(committed):
    """GRPONonFiniteValues fires with the skip's first evaluation and resolves 9 minutes later: the skip is sent at the
    first flush of its group (every group_interval from its group_wait) after that, not group_wait after it
    fired, as counting its first firing as a notification did."""
    alerts: Firing = ((60.0, frozenset({NAN, SKIPPED})), (600.0, frozenset({SKIPPED})), (900.0, frozenset()))
    (v,) = judge([_case(expect="GRPOStepsSkipped", onset=30.0)], alerts, Delivery.from_config(committed), 3600.0)
    assert [(n.alertname, n.receiver, n.sent_s, n.since_s) for n in v.notified] == [
        ("GRPONonFiniteValues", "page", 70.0, 60.0), ("GRPOStepsSkipped", "notify", 610.0, 600.0)]
    assert v.latency_s == 580.0 and v.severity == "warning" and v.early == () and not v.held  # bound 300 s


def test_a_warning_inhibited_until_it_resolves_reaches_nobody(committed):
    alerts: Firing = ((60.0, frozenset({NAN, SKIPPED})), (300.0, frozenset({NAN})), (900.0, frozenset()))
    (v,) = judge([_case(expect="GRPOStepsSkipped", onset=30.0)], alerts, Delivery.from_config(committed), 3600.0)
    assert [n.alertname for n in v.notified] == ["GRPONonFiniteValues"] and v.latency_s is None and not v.held


def test_another_runs_critical_alert_inhibits_nothing(committed):
    alerts: Firing = ((60.0, frozenset({_a("GRPONonFiniteValues", "critical", "b", signal="loss"), SKIPPED})), (900.0, frozenset()))
    a, b = judge([_case("a", "GRPOStepsSkipped", 30.0), _case("b", "GRPONonFiniteValues", 30.0)], alerts,
                 Delivery.from_config(committed), 3600.0)
    assert (a.latency_s, b.latency_s) == (40.0, 40.0) and a.held and b.held  # group_wait after the evaluation
    assert a.firing == ((60.0, frozenset({SKIPPED})), (900.0, frozenset()))


def test_a_critical_alert_inhibits_only_what_its_cause_explains(committed):
    """A non-finite loss pages and withholds the run's skipped steps, not its IS drift (another cause)."""
    nan, skipped = _a("GRPONonFiniteValues", "critical", signal="loss"), _a("GRPOStepsSkipped", "warning")
    drift = _a("GRPORolloutISDrift", "warning", signal="rollout_is_eff_sample_size")
    alerts: Firing = ((60.0, frozenset({nan, skipped})), (180.0, frozenset({nan, skipped, drift})),
                      (660.0, frozenset({drift})))
    (v,) = judge([_case(expect="GRPORolloutISDrift", onset=30.0)], alerts, Delivery.from_config(committed), 3600.0)
    assert [(n.alertname, n.sent_s) for n in v.notified] == [("GRPONonFiniteValues", 70.0),
                                                              ("GRPORolloutISDrift", 190.0)]
    assert v.latency_s == 160.0 and v.held


def _config(committed: dict, *rules: dict) -> dict:
    return {**committed, "inhibit_rules": list(rules)}


def test_a_healthy_run_whose_only_alert_is_inhibited_notifies_nobody(committed):
    """An inhibited warning is no notification: a healthy run with one holds (the old judge counted it)."""
    config = _config(committed, {"source_matchers": ['alertname="Cause"'], "target_matchers": ['severity="warning"'],
                                 "equal": ["run_id"]})
    alerts: Firing = ((60.0, frozenset({_a("Cause", "info"), _a("Symptom", "warning")})), (900.0, frozenset()))
    (v,) = judge([_case()], alerts, Delivery.from_config(config), 3600.0)
    assert [(n.alertname, n.receiver) for n in v.notified] == [("Cause", "record")]
    assert v.early == () and v.held


def test_an_alert_matching_both_sides_does_not_inhibit_itself_nor_its_peers(committed):
    """Source X|Y, target Y|Z: Y alone fires; with Z, Y (a source) mutes Z; with X, X (a source only) mutes Y."""
    config = _config(committed, {"source_matchers": ['alertname=~"X|Y"'], "target_matchers": ['alertname=~"Y|Z"'],
                                 "equal": ["run_id"]})
    delivery = Delivery.from_config(config)
    x, y, z = (dict(_a(n, "warning")) for n in "XYZ")
    assert delivery.muted([y]) == set() and delivery.muted([y, z]) == {1} and delivery.muted([x, y]) == {1}
    assert delivery.muted([y, dict(_a("Y", "warning", "b"))]) == set()  # two-sided, one per run


def test_group_timings_come_from_the_config(committed):
    config = {**committed, "route": {**committed["route"], "group_wait": "30s", "group_interval": "5m"}}
    alerts: Firing = ((60.0, frozenset({NAN, SKIPPED})), (600.0, frozenset({SKIPPED})), (1200.0, frozenset()))
    sent = Delivery.from_config(config).notifications(alerts, 3600.0)
    assert [(n.alertname, n.sent_s) for n in sent] == [("GRPONonFiniteValues", 90.0), ("GRPOStepsSkipped", 690.0)]


def test_an_alert_resolved_and_firing_again_is_notified_again_only_in_a_new_group(committed):
    """Resolved at a flush, its group ends; firing again it is new. Firing again before the flush: the same."""
    delivery = Delivery.from_config(committed)
    again: Firing = ((60.0, frozenset({SKIPPED})), (120.0, frozenset()), (240.0, frozenset({SKIPPED})))
    assert [n.sent_s for n in delivery.notifications(again, 3600.0)] == [70.0, 250.0]
    flap: Firing = ((60.0, frozenset({SKIPPED})), (75.0, frozenset()), (90.0, frozenset({SKIPPED})))
    assert [n.sent_s for n in delivery.notifications(flap, 3600.0)] == [70.0]


def test_a_config_the_model_does_not_reproduce_is_refused(committed):
    nested = {**committed, "route": {**committed["route"], "routes": [{"receiver": "page", "routes": []}]}}
    with pytest.raises(ValueError, match="route"):
        Delivery.from_config(nested)
    with pytest.raises(ValueError, match="matcher"):
        Delivery.from_config(_config(committed, {"source_matchers": ["severity=critical"]}))


def _got(*alerts: tuple[str, str, str]) -> str:
    return ", ".join(f'{{__name__="ALERTS", alertname="{name}", alertstate="firing", change="{change}", '
                     f'run_id="{run}"}} 1E+00' for name, change, run in alerts)


def test_promtools_changes_read_back_as_the_alerts_firing_from_each_evaluation():
    query = 'expr: "label_replace(ALERTS{alertstate=\\"firing\\"} unless ...)"'
    out = (f"    {query}, time: 1m,\n        exp: nil\n        got: {_got(('X', 'fired', 'a'), ('Y', 'fired', 'b'))}\n"
           f"    {query}, time: 3m,\n        exp: nil\n        got: {_got(('X', 'resolved', 'a'))}\n")
    x, y = (("alertname", "X"), ("run_id", "a")), (("alertname", "Y"), ("run_id", "b"))
    assert firing(out) == ((60.0, frozenset({x, y})), (180.0, frozenset({y})))
    assert of_run(firing(out), "a") == ((60.0, frozenset({x})), (180.0, frozenset()))


@pytest.mark.integration
def test_the_models_inhibitions_are_a_real_alertmanagers(committed, tmp_path, free_port_factory, alertmanager_bin):
    """The committed rules and the edge cases' rule (two-sided; `equal` on a label one side lacks) on the real
    Alertmanager: every alert's `inhibitedBy` is what `Delivery.muted` says."""
    config = _config(committed, *committed["inhibit_rules"],
                     {"source_matchers": ['alertname=~"X|Y"'], "target_matchers": ['alertname=~"Y|Z"'],
                      "equal": ["run_id", "shard"]})
    alerts = [_a("GRPOKLHigh", "critical", "c"), _a("GRPOKLJump", "warning", "c"), _a("GRPOKLJump", "warning", "d"),
              _a("GRPOEntropyCollapse", "warning", "c"), _a("GRPONonFiniteValues", "critical", "e", signal="loss"),
              _a("GRPOStepsSkipped", "warning", "e"), _a("GRPORolloutISDrift", "warning", "e"),
              _a("GRPONonFiniteValues", "warning", "h", signal="sample_reward"), _a("GRPOStepsSkipped", "warning", "h"),
              _a("Y", "warning", "x"), _a("Z", "warning", "x"), _a("Y", "warning", "y"), _a("X", "warning", "z"),
              _a("Z", "warning", "z", shard="1")]
    model = Delivery.from_config(config).muted([dict(a) for a in alerts])
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port_factory()
    with serve_alertmanager(alertmanager_bin, path, tmp_path, port).running(60):
        url = f"http://127.0.0.1:{port}"
        posted = [{"labels": dict(a), "startsAt": "2026-01-01T00:00:00Z"} for a in alerts]
        assert httpx.post(f"{url}/api/v2/alerts", json=posted, timeout=10).status_code == 200
        deadline = time.monotonic() + 30
        while True:  # inhibition is evaluated when alerts are listed; wait until all arrived
            listed = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
            if len(listed) == len(alerts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    real = {tuple(sorted(a["labels"].items())) for a in listed if a["status"]["inhibitedBy"]}
    assert real == {alerts[i] for i in model}
    assert {dict(a)["alertname"] + "/" + dict(a)["run_id"] for a in real} == {
        "GRPOStepsSkipped/e", "Z/x"}  # GRPOKLJump/c: held back in its rule while KL is high, not here
