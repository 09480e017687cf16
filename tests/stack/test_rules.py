"""Alert and recording rules: promtool (Prometheus 3, built from its module) checks and unit tests.

The scenarios (prometheus/tests/scenarios.yml) cover every alert on realistic time
scales: slow and fast steps, scrape gaps, outages, a clean finish, a crash, beta = 0.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from otel_grpo import catalog
from otel_grpo.stack import RuleSettings, alerts, generated_files
from otel_grpo.generate._checks import allowed_series, metric_names, rule_exprs
from otel_grpo.generate import rule_files
from otel_grpo.generate._configs import RULE_FILES
from otel_grpo.generate._promtool import asserted_alerts, load_scenarios, render_tests, scenario_rules
from otel_grpo.generate._subset import rule_reads
from otel_grpo.generate._rules import FLOORS, THRESHOLDS, seconds

ALERTS = {r["alert"] for r in alerts(RuleSettings())}
ALWAYS_FIRING = {"GRPOWatchdog"}


def run(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    # The longest scenarios replay 13 hours of steps, evaluated every 15 s (benchmarks/promtool_tests.py).
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900)


def test_committed_generated_files_are_current(root):
    stale = [rel for rel, text in generated_files(root).items()
             if not (root / rel).exists() or (root / rel).read_text() != text]
    assert stale == [], f"run `otel-grpo dashboards` to regenerate: {stale}"


def test_promtool_check_rules(root, promtool):
    out = run(promtool, "check", "rules", *sorted(str(p) for p in (root / "prometheus/rules").glob("*.yml")))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_check_compose_config(root, promtool):
    out = run(promtool, "check", "config", "--syntax-only", str(root / "prometheus/prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.timeout(1200)
def test_promtool_unit_tests_pass(root, promtool, tmp_path):
    """The committed test file against the committed rule files, each scenario against the rules it asserts on.

    promtool evaluates every rule of the files it loads at every evaluation, so each scenario runs against
    the committed rules cut to its alerts and the records they read (`scenario_rules`: verbatim, in order),
    which fire as the full files do; each in a promtool of its own, as many at once as there are cores, the
    longest replays first; each promtool's JUnit report shows that its one group ran."""
    scenarios = sorted(load_scenarios(root), key=lambda sc: -seconds(sc.get("length", "0s")))
    committed = (root / "prometheus/tests/grpo_alerts_test.yml").read_text()

    def one(i: int) -> tuple[str, subprocess.CompletedProcess, int]:
        sc, work = scenarios[i], tmp_path / str(i)
        for rel, text in {**scenario_rules(root, sc), "tests/t.yml": committed}.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        report = work / "report.xml"
        out = run(promtool, "test", "rules", "--junit", str(report), "--run", f"^{re.escape(sc['name'])}$",
                  "tests/t.yml", cwd=work)
        ran = sum(int(s.get("tests")) for s in ET.parse(report).getroot().iter("testsuite")) if report.exists() else 0
        return sc["name"], out, ran

    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        results = list(pool.map(one, range(len(scenarios))))
    failed = {name: out.stdout[-3000:] + out.stderr[-1000:] for name, out, ran in results
              if out.returncode != 0 or ran != 1}
    assert failed == {}, "\n\n".join(f"{name}:\n{text}" for name, text in failed.items())


def test_each_scenario_loads_the_rules_it_asserts_on_and_every_record_they_read(root):
    """The cut the unit tests run on is closed: every record a kept rule may select is kept (a missing one would
    silence an alert, and a silent check would pass); it keeps the asserted alerts and no other, a `never_firing`
    scenario every alert of that severity, and a record of one label value only where only that one is read."""
    full = {rel: yaml.safe_load((root / "prometheus" / rel).read_text()) for rel in RULE_FILES}
    records = [r for doc in full.values() for g in doc["groups"] for r in g["rules"] if "record" in r]
    for sc in load_scenarios(root):
        cut = [yaml.safe_load(text) for text in scenario_rules(root, sc).values()]
        kept = [r for doc in cut for g in doc["groups"] for r in g["rules"]]
        assert {r["alert"] for r in kept if "alert" in r} == asserted_alerts(sc, full), sc["name"]
        # By name and labels: the memory group's expressions are as promtool schedules them (`as_scheduled`).
        names = {(r["record"], str(r.get("labels"))) for r in kept if "record" in r}
        assert all((records[i]["record"], str(records[i].get("labels"))) in names
                   for r in kept for i in rule_reads(r, records)), sc["name"]
    by_name = {sc["name"]: sc for sc in load_scenarios(root)}
    healthy = asserted_alerts(by_name["a healthy TRL run replayed at 10 min per step pages nobody"], full)
    assert {"GRPOMetricsAbsent", "GRPOTrainerStalled", "GRPOKLHigh"} <= healthy and "GRPOKLSpike" not in healthy
    jump = scenario_rules(root, {"checks": [{"alert": "GRPOKLJump"}]})["rules/grpo_alerts.yml"]
    # the KL jump is held back while KL is high (its streak of 3, signal "kl"): that record, no other signal's
    assert "signal: kl_jump" in jump and "reward_collapse" not in jump and 'signal="entropy"' not in jump
    assert set(re.findall(r'signal="(\w+)"', jump)) == {"kl", "kl_jump"}


def test_promtool_catches_a_wrong_expectation(root, promtool, tmp_path):
    """The unit tests can fail: the 10-minute-step KL alert expected 6 minutes early (2 steps of 3) is reported."""
    text = (root / "prometheus/tests/grpo_alerts_test.yml").read_text().replace("eval_time: 91m", "eval_time: 85m")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/t.yml").write_text(text)
    kl_high = next(sc for sc in load_scenarios(root) if sc["name"].startswith("KL high is 3"))
    for rel, rules in scenario_rules(root, kl_high).items():  # as test_promtool_unit_tests_pass runs it
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rules)
    out = run(promtool, "test", "rules", "--run", "^KL high is 3", "tests/t.yml", cwd=tmp_path)
    assert out.returncode != 0 and "GRPOKLHigh" in out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_silent_case(root):
    firing, silent = set(), set()
    for scenario in load_scenarios(root):
        for check in scenario["checks"]:
            (firing if check.get("firing") else silent).add(check["alert"])
    assert ALERTS - firing == set(), "alerts without a firing case"
    assert ALERTS - ALWAYS_FIRING - silent == set(), "alerts without a silent case"


def test_per_run_overrides_and_disabled_thresholds(tmp_path, promtool):
    """A run with its own KL threshold (2.0) stays silent at 1.5 where the default (1.0) fires, in every
    KL alert and its summary; +Inf disables them for a run; an override of 2.0 fires at 2.5 and says 2.0. Run ids
    with a quote or a backslash (which PromQL strings escape) get theirs too, and the rules still load."""
    lenient, high = 'len"ient', "hi\\gh.v2"
    s = RuleSettings(overrides={lenient: {"kl_threshold": 2.0}, "off": {"kl_threshold": float("inf")},
                                high: {"kl_threshold": 2.0}})
    runs = [{"run_id": r, "step": "1m", "values": {"kl": f"{kl}*120"}}
            for r, kl in (("strict", 1.5), (lenient, 1.5), ("off", 1.5), (high, 2.5), ("hi\\gh2v2", 1.5))]
    firing = [{"run_id": "strict", "signal": "kl", "bound": "1.0", "value": 59},
              {"run_id": high, "signal": "kl", "bound": "2.0", "value": 59},
              {"run_id": "hi\\gh2v2", "signal": "kl", "bound": "1.0", "value": 59}]
    # A spike fires at a run's first step over its bound, before the 3 that make KL high hold it back.
    spiked = [{**run, "value": 1} for run in firing]
    scenario = {"name": "overrides", "interval": "15s", "length": "2h", "runs": runs,
                "checks": [{"at": "1h", "alert": "GRPOKLHigh", "firing": firing},
                           {"at": "2m", "alert": "GRPOKLSpike", "firing": spiked}]}
    for rel, text in rule_files(s).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    doc = render_tests([scenario], s, ["rules/grpo_recording.yml", "rules/grpo_alerts.yml"])
    summaries = [a["exp_annotations"]["summary"] for c in doc["tests"][0]["alert_rule_test"] for a in c["exp_alerts"]]
    assert "KL to the reference above 2.0 for 3+ consecutive steps in run hi\\gh.v2 (step 59)" in summaries
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_per_run_floors_of_the_hang_alerts(tmp_path, promtool):
    """A run whose checkpoints take long gets its own stall floor (45m), one that loads long its own first-step
    floor (3h); the other runs keep the defaults (15m, 1h)."""
    s = RuleSettings(overrides={"slow-saves": {"stall_floor": "45m"}, "slow-load": {"first_step_floor": "3h"}})
    runs = [{"run_id": r, "step": "1m", "values": {"kl": "0.1*30"}} for r in ("hangs", "slow-saves")]
    runs += [{"run_id": r, "step": "10m", "values": {"kl": ""}} for r in ("loads", "slow-load")]
    checks = [{"at": "50m", "alert": "GRPOTrainerStalled", "firing": [{"run_id": "hangs", "value": 29}]},
              {"at": "80m", "alert": "GRPOTrainerStalled",
               "firing": [{"run_id": "hangs", "value": 29}, {"run_id": "slow-saves", "value": 29}]},
              {"at": "2h", "alert": "GRPONoFirstStep", "firing": [{"run_id": "loads", "value": 7200}]}]
    scenario = {"name": "floors", "interval": "15s", "length": "2h", "runs": runs, "checks": checks}
    for rel, text in rule_files(s).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    doc = render_tests([scenario], s, ["rules/grpo_recording.yml", "rules/grpo_alerts.yml"])
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_settings_validate_overrides_and_links():
    with pytest.raises(ValueError, match="not thresholds"):
        RuleSettings(overrides={"r": {"kl_treshold": 1.0}})
    with pytest.raises(ValueError, match="absolute"):
        RuleSettings(runbook_base="docs/operations.md")
    with pytest.raises(ValueError, match="bound of the 'kl' step check"):
        RuleSettings(kl_threshold=0.7)
    with pytest.raises(ValueError, match="bound of the 'rollout_is_eff_sample_size' step check"):
        RuleSettings(overrides={"r": {"ess_min": 0.45}})
    with pytest.raises(ValueError, match="streak lengths"):
        RuleSettings(kl_steps=4)
    with pytest.raises(ValueError, match="at most the trend baselines' gap"):  # a streak must stay out of it
        RuleSettings(drift_steps=10)
    with pytest.raises(ValueError, match="bound of the 'kl_jump' step check"):  # trends are judged by the trainer
        RuleSettings(kl_zscore=3.5)
    with pytest.raises(ValueError, match="bound of the 'grad_norm' step check"):  # judged by the trainer too
        RuleSettings(overrides={"r": {"grad_norm_factor": 7.5}})
    RuleSettings(overrides={"r": {"kl_threshold": float("inf"), "grad_norm_factor": 20.0, "throughput_fraction": 0.25}})
    for floor in ("45", 45, "-5m", "0m", "45 min"):
        with pytest.raises(ValueError, match=r"\['stall_floor'\]: .* is not a duration"):
            RuleSettings(overrides={"r": {"stall_floor": floor}})
    RuleSettings(overrides={"r": {"stall_floor": "45m", "first_step_floor": "3h"}})


def test_alerts_carry_severity_absolute_runbook_and_name_run_and_value():
    s = RuleSettings(runbook_base="https://wiki.example.org/grpo", grafana_url="https://grafana.example.org")
    for rule in alerts(s):
        assert rule["labels"]["severity"] in {"critical", "warning"} | ({"none"} if rule["alert"] in ALWAYS_FIRING else set())
        ann = rule["annotations"]
        assert ann["runbook_url"] == f"https://wiki.example.org/grpo#{rule['alert'].lower()}"
        if "run_id" in rule["expr"]:
            assert "$labels.run_id" in ann["summary"], rule["alert"]
            assert ann["dashboard_url"].startswith("https://grafana.example.org/d/grpo-overview/?viewPanel=panel-")
        if "dashboard_url" in ann:  # it selects the alert's run where it has one; a stack alert's has none
            assert ("var-run_id=" in ann["dashboard_url"]) == ("$labels.run_id" in ann["summary"]), rule["alert"]


def test_runbook_has_a_section_per_alert(root):
    text = (root / "docs/operations.md").read_text()
    missing = [a for a in ALERTS if f"### {a}\n" not in text]
    assert missing == []


def test_no_wall_clock_unless_offset_on_counters():
    """An `unless` may look back (`offset`) only at a remembered series (`_memory.remembered`: its last value within
    the counter lookback, from minutes of samples or the memory group's record), which still finds a counter's
    last value after a scrape gap or an outage; `unless x offset w` would see it as new again."""
    lookback = RuleSettings().counter_lookback
    exprs = dict(rule_exprs())
    for name, expr in exprs.items():
        for clause in expr.split(" unless ")[1:]:
            head = clause.split(")")[0]
            if " offset " in head:
                read = head.split(" offset ")[0].strip("( ").partition("{")[0]
                assert read.endswith(":last") and f"{read}_{lookback}" in exprs[read], (name, expr)


def test_rules_use_only_catalog_metrics():
    allowed = allowed_series()
    for name, expr in rule_exprs():
        assert metric_names(expr) <= allowed, (name, metric_names(expr) - allowed)


@pytest.mark.parametrize("settings", [RuleSettings(), RuleSettings.fast(),
                                      RuleSettings(overrides={"r": {"kl_threshold": 2.0}})],
                         ids=["default", "fast", "overrides"])
def test_rule_expressions_run_on_prometheus(prometheus_api, http, settings):
    for name, expr in rule_exprs(settings):
        r = http.get(f"{prometheus_api}/api/v1/query", params={"query": expr})
        assert r.status_code == 200 and r.json()["status"] == "success", (name, r.text)


_DEFAULTS = RuleSettings()
_EVERY_OVERRIDE = RuleSettings(overrides={
    "own": {name: getattr(_DEFAULTS, name) for name in THRESHOLDS + FLOORS},
    "exp-42": {"kl_threshold": 2.0, "ess_min": float("inf"), "throughput_fraction": 0.25, "stall_floor": "45m"}})


@pytest.mark.parametrize("settings", [_DEFAULTS, RuleSettings.fast(), _EVERY_OVERRIDE],
                         ids=["default", "fast", "overrides"])
def test_alerts_read_small_named_building_blocks(settings):
    """Alerts read named recording rules, one per building block (kubernetes-mixin style), so no alert
    expression is longer than 300 characters, whatever the settings, and no record with the defaults or the fast
    settings either (a threshold's overrides list their runs in its records' selectors)."""
    assert [(a["alert"], len(a["expr"])) for a in alerts(settings) if len(a["expr"]) > 300] == []
    if settings is not _EVERY_OVERRIDE:
        assert [(name, len(expr)) for name, expr in rule_exprs(settings) if len(expr) > 300] == []


def test_fast_rules_pass_promtool(tmp_path, promtool):
    for rel, text in rule_files(RuleSettings.fast()).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = run(promtool, "check", "rules", *sorted(str(p) for p in (tmp_path / "rules").glob("*.yml")))
    assert out.returncode == 0, out.stdout + out.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], capture_output=True, text=True, timeout=120)


def test_dashboards_command_renders_thresholds_from_a_settings_file(tmp_path, promtool):
    (tmp_path / "rules.yml").write_text("kl_threshold: 2.0\noverrides:\n  exp-42: {kl_threshold: 5.0}\n")
    settings_file, tmp_path = tmp_path / "rules.yml", tmp_path / "out"
    tmp_path.mkdir()  # an empty directory: how the files are generated outside a checkout
    out = _cli("dashboards", "--root", str(tmp_path), "--rule-settings", str(settings_file))
    assert out.returncode == 0, out.stderr
    alerts_yml = (tmp_path / "prometheus/rules/grpo_alerts.yml").read_text()
    assert 'grpo_step_beyond_total{signal="kl", bound="2.0", run_id!~"exp-42", streak="3"}' in alerts_yml
    assert 'grpo_step_beyond_total{signal="kl", run_id="exp-42", bound="5.0", streak="3"}' in alerts_yml
    recording = yaml.safe_load((tmp_path / "prometheus/rules/grpo_recording.yml").read_text())
    assert {"record": "run_id:grpo_threshold:kl_threshold", "expr": "vector(5)", "labels": {"run_id": "exp-42"}} \
        in recording["groups"][0]["rules"]
    dashboard = (tmp_path / "grafana/dashboards/grpo-overview.json").read_text()
    assert '"value": 2.0' in dashboard
    check = run(promtool, "check", "rules", str(tmp_path / "prometheus/rules/grpo_alerts.yml"),
                str(tmp_path / "prometheus/rules/grpo_recording.yml"))
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_bad_settings_file_is_one_readable_line(tmp_path):
    (tmp_path / "rules.yml").write_text("kl_treshold: 2.5\n")
    out = _cli("dashboards", "--root", str(tmp_path), "--rule-settings", str(tmp_path / "rules.yml"))
    assert out.returncode != 0 and "kl_treshold" in out.stderr
    assert not (tmp_path / "prometheus").exists()


@pytest.mark.parametrize("text, names", [
    ("stall_factor: abc\n", "stall_factor: 'abc' is not a positive number"),  # was a TypeError traceback
    ("stall_factor: -1\n", "stall_factor: -1 is not a positive number"),  # was written into the rules
    ("counter_window: abc\n", "counter_window: 'abc' is not a duration"),  # was a ValueError traceback
    ("counter_window: -5m\n", "counter_window: '-5m' is not a duration"),  # promtool refused the written rules
    ("overrides: [1]\n", "overrides: [1] is not a mapping"),  # was an AttributeError traceback
    ("overrides: {r: [1]}\n", "overrides['r']: [1] is not a mapping"),
    ("overrides: {r: {kl_threshold: abc}}\n", "overrides['r']['kl_threshold']: 'abc' must be +inf"),
    ("runbook_base: 5\n", "runbook_base: 5 is not an absolute http(s) URL"),
    ("kl_steps: 3.0\n", "kl_steps: 3.0: kl_steps and drift_steps must be streak lengths"),  # streak="3.0": no series
])
def test_a_settings_file_of_bad_values_is_one_line_naming_the_field_and_writes_nothing(tmp_path, text, names):
    (tmp_path / "rules.yml").write_text(text)
    out = _cli("dashboards", "--root", str(tmp_path), "--rule-settings", str(tmp_path / "rules.yml"))
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1 and names in lines[0], out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules.yml"]


def test_every_setting_is_checked_for_its_type_and_range():
    """No field takes a value of the wrong type or out of range: each is a ValueError naming the field, not a
    TypeError or AttributeError later, nor rules that Prometheus refuses."""
    for f in dataclasses.fields(RuleSettings):
        for value in (-1, 0, math.nan, math.inf, "abc", "-5m", None, True, [1]):
            try:
                RuleSettings(**{f.name: value})
            except ValueError as e:
                assert str(e).startswith(f.name), (f.name, value, str(e))
            else:
                pytest.fail(f"{f.name}={value!r} accepted")


def test_an_unknown_setting_in_the_file_is_named(tmp_path):
    (tmp_path / "rules.yml").write_text("bogus: 1\n")
    with pytest.raises(ValueError, match=r"unknown settings \['bogus'\]"):
        RuleSettings.from_yaml(tmp_path / "rules.yml")


def test_every_alert_of_a_run_and_no_other_says_its_runs_clock_offset():
    """The sidecar places a run's alert at its step by the run's clock offset: every alert that carries run_id
    (its summary names the run) has the annotation; the stack's alerts, of no run, do not."""
    for rule in alerts(RuleSettings()):
        of_a_run = "$labels.run_id" in rule["annotations"]["summary"]
        assert (catalog.CLOCK_OFFSET_ANNOTATION in rule["annotations"]) == of_a_run, rule["alert"]


@pytest.mark.parametrize("clock_s", [600, -600])
def test_a_run_alert_says_the_clock_offset_of_a_trainer_clock_10_minutes_off(tmp_path, promtool, clock_s):
    """promtool renders the annotation from the rules' own offset estimate: a KL alert of a run whose clock is
    10 minutes ahead (behind) of Prometheus's says -600.000 (600.000): Prometheus's clock minus the run's."""
    s = RuleSettings()
    skewed = {"run_id": "skewed", "step": "1m", "clock_s": clock_s, "values": {"kl": "1.5*120"}}
    firing = [{"run_id": "skewed", "signal": "kl", "bound": "1.0", "value": 59}]
    scenario = {"name": "skewed", "interval": "15s", "length": "2h", "runs": [skewed],
                "checks": [{"at": "1h", "alert": "GRPOKLHigh", "firing": firing}]}
    for rel, text in rule_files(s).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    doc = render_tests([scenario], s, ["rules/grpo_recording.yml", "rules/grpo_alerts.yml"])
    (expected,) = doc["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    assert expected["exp_annotations"][catalog.CLOCK_OFFSET_ANNOTATION] == f"{-clock_s:.3f}"
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_step_checks_no_alert_reads_add_no_recorded_series(tmp_path, promtool):
    """A trainer exports every step check at every bound and streak, several times the ones the alerts read;
    a team's Prometheus evaluates the rules over hundreds of runs, so what the rules write per run must not grow
    with those (benchmarks/rules_load.py). Two runs, one exporting every check, one only the checks the alerts
    read (the counters of `run_id_signal_bound:grpo_step_beyond:rose`): the rules write as many series of each."""
    from otel_grpo.generate._replay import Segment, replay

    s = RuleSettings()
    rules = yaml.safe_load(rule_files(s)["rules/grpo_alerts.yml"])["groups"][0]["rules"]
    read = {m for r in rules if r.get("record") == "run_id_signal_bound:grpo_step_beyond:rose"
            for m in re.findall(r'signal="(\w+)", bound="([^"]+)", streak="(\d+)"', r["expr"])}
    series = replay([Segment(run, {"kl": [0.1] * 40}, step_s=10) for run in ("all", "read")], scrape_s=15, scrapes=40)
    inputs = [{"series": name, "values": values} for name, values in series.items()
              if 'run_id="read"' not in name or not name.startswith("grpo_step_beyond_total")
              or tuple(re.search(rf'{k}="([^"]+)"', name).group(1) for k in ("signal", "bound", "streak")) in read]
    assert len(inputs) < len(series), "the trainer exports checks the alerts do not read"
    recorded = 'count({{__name__=~".+:.+", run_id="{}"}})'
    doc = {"rule_files": ["rules/grpo_recording.yml", "rules/grpo_alerts.yml"], "evaluation_interval": "15s",
           "tests": [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
               {"expr": f"{recorded.format('all')} - {recorded.format('read')}", "eval_time": "8m",
                "exp_samples": [{"labels": "{}", "value": 0}]}]}]}
    for rel, text in rule_files(s).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
