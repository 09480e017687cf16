"""The alert model as a property over a grid of runs (otel_grpo/generate/_grid.py, docs/alerts.md).

Every case runs through the committed rules in promtool (Prometheus 3.16): a healthy run notifies
nobody at any evaluation; a failing one notifies nobody before its onset and fires the alert its
failure mode names within the mode's bound. The alerts that fire reach their class's receiver on
the real Alertmanager's routing tree (`amtool config routes test` on the committed config).
"""

from __future__ import annotations

import collections
import subprocess

import pytest
from otel_grpo.generate import RuleSettings, rule_files
from otel_grpo.generate._grid import MODES, Case, grid, run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def verdicts(promtool, tmp_path_factory):
    cases = grid()
    return run(cases, promtool, rule_files(RuleSettings()), tmp_path_factory.mktemp("grid"))


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
            for v in verdicts if v.case.expect is not None and not v.held]
    assert late == []


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
