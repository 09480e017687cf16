"""docs/alerts.md's "Failure modes" table has a row for every alert the rule files define, with each severity it
fires at and the receiver the committed Alertmanager config routes it to; a new alert gets its row by itself."""

from __future__ import annotations

import re

import yaml

from otel_grpo.generate import _alerts_table
from otel_grpo.generate._alerts_md import render_alerts_md

_ROW = re.compile(r"^\| (GRPO\w+) \| (.+?) \| (.+?) \| (.+?) \| (.+?) \|$")


def _table(doc: str) -> dict[str, list[str]]:
    """The "Failure modes" table: alert -> its cells after the name."""
    section = doc.split("\n## Failure modes\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): list(m.groups()[1:]) for line in section.splitlines() if (m := _ROW.match(line))}


def _receiver(route: dict, labels: dict[str, str]) -> str:
    """The receiver Alertmanager picks: the first child route whose `name="value"` matchers all hold (the
    committed tree has no other kind, nor `continue`), else the root's."""
    for child in route.get("routes", []):
        pairs = [re.fullmatch(r'(\w+)="(.*)"', m).groups() for m in child["matchers"]]
        if all(labels.get(k) == v for k, v in pairs):
            return child["receiver"]
    return route["receiver"]


def test_every_alert_of_the_rule_files_has_a_row_with_its_severity_and_receiver(root):
    """The table listed only the alerts a grid failure mode expects: 13 alerts (the clip, IS veto and mismatch
    thresholds, the stack's health, the Watchdog) had no row, so the doc gave them no severity nor receiver."""
    route = yaml.safe_load((root / "alertmanager/alertmanager.yml").read_text())["route"]
    fired: dict[str, dict[str, None]] = {}
    for path in sorted((root / "prometheus/rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    fired.setdefault(rule["alert"], {})[rule["labels"]["severity"]] = None
    assert len(fired) > 20
    for doc in (render_alerts_md(), (root / "docs/alerts.md").read_text()):
        rows = _table(doc)
        assert sorted(set(fired) - set(rows)) == []
        assert sorted(set(rows) - set(fired)) == []
        for name, severities in fired.items():
            modes, classes, evidence, survives = rows[name]
            want = ", ".join(f"{sev} ({_receiver(route, {'alertname': name, 'severity': sev})})" for sev in severities)
            assert classes == want, name
            assert modes and evidence.strip() and survives.strip(), name


def test_an_alert_no_one_described_gets_a_row_by_itself(monkeypatch):
    """A new alert of the rules shows up with its severity, its class and its expression as its evidence, and
    "—" for failure modes no grid mode expects; a new step-check alert names the checks it reads."""
    real = _alerts_table.alerts
    new = [{"alert": "GRPONewThing", "expr": 'up{job=~"a|b"} == 0', "for": "1m", "labels": {"severity": "warning"},
            "annotations": {}},
           {"alert": "GRPONewCheck", "expr": 'run_id_signal_bound:grpo_step_check:beyond{signal="x", streak="5"}',
            "for": "0s", "labels": {"severity": "critical"}, "annotations": {}}]
    monkeypatch.setattr(_alerts_table, "alerts", lambda s: real(s) + new)
    rows = _table(render_alerts_md())
    assert rows["GRPONewThing"] == ["—", "warning (notify)", r'its expression: `up{job=~"a\|b"} == 0`', "—"]
    assert rows["GRPONewCheck"] == ["—", "critical (page)", "step evidence of `x`, 5 consecutive steps",
                                    "as GRPOKLHigh"]
    assert rows["GRPOWatchdog"][1] == "none (deadman)"
