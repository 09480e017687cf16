"""`promtool test rules` files rendered from compact scenarios, so expectations track the rules.

A scenario (prometheus/tests/scenarios.yml, written by hand) gives input series, or
runs as per-step values that `_replay` turns into the series a scrape sees, and,
per check, the alerts expected as labels plus the value; `never_firing: critical` also asks
that no alert of that severity fired at any evaluation (the ALERTS series over the whole run). promtool compares full
annotations; they are rendered here from the rules' own templates, which use these
forms only: `$labels.<name>` (also `| urlquery`, Go's url.QueryEscape), `$value | printf "%.3g"`,
`$value | humanizePercentage` and `$value | humanizeDuration`.

    >>> render_template('{{ $value | printf "%.3g" }} in run {{ $labels.run_id }}', {"run_id": "a"}, 1.5)
    '1.5 in run a'
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from pathlib import Path

import yaml

from otel_grpo.catalog import CLOCK_OFFSET_ANNOTATION

from ._alerts import alerts
from ._configs import RULE_FILES, dump
from ._replay import Pause, Segment, expand, replay
from ._rules import RuleSettings, seconds
from ._subset import needed_rules

SCENARIOS = "prometheus/tests/scenarios.yml"
TESTS = "prometheus/tests/grpo_alerts_test.yml"
_TEMPLATE = re.compile(r"\{\{\s*(\$labels\.(\w+)(\s*\|\s*urlquery)?|\$value\s*\|\s*printf\s+\"([^\"]+)\""
                       r"|\$value\s*\|\s*(humanizePercentage|humanizeDuration))\s*\}\}")


def _duration(v: float) -> str:
    """Go's humanizeDuration for values of a second and more."""
    if v < 1:
        return "%.4gs" % v
    d, rest = divmod(int(v), 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d}d {h}h {m}m {sec}s"
    if h:
        return f"{h}h {m}m {sec}s"
    return f"{m}m {sec}s" if m else f"{sec}s"


def render_template(text: str, labels: dict[str, str], value: float) -> str:
    """An annotation as Prometheus renders it for an alert with these labels and value."""
    def one(m: re.Match) -> str:
        if m.group(2):
            label = labels.get(m.group(2), "")
            return urllib.parse.quote_plus(label, safe="") if m.group(3) else label  # as Go's url.QueryEscape
        if m.group(4):
            return m.group(4) % value  # Go's and Python's %g agree on the values the rules print
        if m.group(5) == "humanizeDuration":
            return _duration(value)
        pct = value * 100  # humanizePercentage: humanize(v * 100) + "%"
        return ("0" if pct == 0 else "%.4g" % pct) + "%"

    return _TEMPLATE.sub(one, text)


def _rule_for(rules: list[dict], spec: dict) -> dict:
    """The rule an expected alert comes from: the alert's only rule, or (an alert of several rules, one per
    severity: GRPONonFiniteValues) the one of the `severity` the expected alert names."""
    if len(rules) == 1:
        return rules[0]
    found = [r for r in rules if r["labels"]["severity"] == spec.get("severity")]
    if len(found) != 1:
        raise ValueError(f"{rules[0]['alert']} has a rule per severity: an expected alert must name its severity, "
                         f"got {spec}")
    return found[0]


def _expected(rule: dict, spec: dict, replayed: dict[str, float]) -> dict:
    """An expected alert; its clock offset annotation (a query, not rendered here) is the spec's `clock_offset`,
    else for a replayed run the opposite of its `clock_s` (each scrape collects the process's clock: no delivery
    lag), and empty for one of hand-written series (no clock)."""
    labels = {k: str(v) for k, v in spec.items() if k not in ("value", "clock_offset")}
    full = {**rule["labels"], **labels}
    value = float(spec.get("value", 0))
    annotations = {k: render_template(v, full, value) for k, v in rule["annotations"].items()}
    if CLOCK_OFFSET_ANNOTATION in annotations:
        offset = replayed.get(full.get("run_id", ""))
        annotations[CLOCK_OFFSET_ANNOTATION] = str(spec.get("clock_offset", "" if offset is None else f"{offset:.3f}"))
    return {"exp_labels": full, "exp_annotations": annotations}


def _segment(run: dict) -> Segment:
    """A run of a scenario: `step`, `start`, `startup`, `export` (push interval; pull: `expire: 0s`),
    `end_after` and `moved` (when its exports move to another collector replica) are durations; `skipped` the
    steps whose update the loop skipped; `job` and
    `instance` its target's labels; `rank` its rank where every rank exports; `pauses` maps a step index to `[duration, beat every]` (beat `0s`: none);
    `clock_s` its clock minus Prometheus's, in seconds."""
    values = {key: v if isinstance(v, list) else expand(str(v)) for key, v in run["values"].items()}
    pauses = {int(i): Pause(seconds(p[0]), seconds(p[1]) if len(p) > 1 else 0.0)
              for i, p in run.get("pauses", {}).items()}
    end_after, moved = run.get("end_after"), run.get("moved")
    return Segment(run["run_id"], values, seconds(run["step"]), seconds(run.get("start", "0s")),
                   run.get("first_step", 0), run.get("stride", 1), run.get("end", "hang"),
                   expire_s=float(seconds(run.get("expire", "5m"))), export_s=float(seconds(run.get("export", "0s"))),
                   startup_s=float(seconds(run.get("startup", "0s"))),
                   pauses=pauses, end_after_s=None if end_after is None else float(seconds(end_after)),
                   job=run.get("job"), instance=run.get("instance"), clock_s=float(run.get("clock_s", 0)),
                   moved_s=None if moved is None else float(seconds(moved)), skipped=frozenset(run.get("skipped", ())),
                   rank=run.get("rank"))


def _recorded(path: Path, keys: list[str], steps: int | None) -> dict[str, list[float]]:
    """Per-step values of `keys` from a trainer's metrics.jsonl, the first `steps`: null is a non-finite value,
    an absent key a value not logged at that step (TRL's first step has no throughput)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:steps]
    return {k: [None if k not in r else math.nan if r[k] is None else float(r[k]) for r in rows] for k in keys}


def input_series(scenario: dict) -> list[dict]:
    """A scenario's series: those it lists, and its `runs` (per-step values) replayed as scraped every `interval`."""
    series = list(scenario.get("input_series", []))
    if "runs" in scenario:
        scrape = seconds(scenario["interval"])
        replayed = replay([_segment(r) for r in scenario["runs"]], scrape, seconds(scenario["length"]) // scrape)
        series += [{"series": name, "values": values} for name, values in replayed.items()]
    return series


def render_tests(scenarios: list[dict], settings: RuleSettings, rule_files: list[str],
                 evaluation_interval: str = "15s") -> dict:
    """The promtool test document for these scenarios against `settings`' rules (evaluated as compose does)."""
    by_name: dict[str, list[dict]] = {}
    for r in alerts(settings):
        by_name.setdefault(r["alert"], []).append(r)
    tests = []
    for sc in scenarios:
        checks, replayed = [], {run["run_id"]: 0.0 - run.get("clock_s", 0) for run in sc.get("runs", [])}
        for check in sc["checks"]:
            rules = by_name[check["alert"]]
            checks.append({"eval_time": check["at"], "alertname": check["alert"],
                           "exp_alerts": [_expected(_rule_for(rules, spec), spec, replayed)
                                          for spec in check.get("firing", [])]})
        test = {"name": sc["name"], "interval": sc["interval"], "input_series": input_series(sc),
                "alert_rule_test": checks}
        if "never_firing" in sc:  # no alert of this severity fired at any evaluation of the whole scenario
            test["promql_expr_test"] = [{
                "expr": f'count by (alertname, run_id) (max_over_time(ALERTS{{severity="{sc["never_firing"]}",'
                        f' alertstate="firing"}}[{sc["length"]}]))',
                "eval_time": sc["length"], "exp_samples": []}]
        tests.append(test)
    return {"rule_files": rule_files, "evaluation_interval": evaluation_interval, "tests": tests}


def load_scenarios(root: Path) -> list[dict]:
    """The scenarios; a run's `recorded: {file, keys}` (a file under prometheus/tests/) becomes its values."""
    scenarios = yaml.safe_load((root / SCENARIOS).read_text())["scenarios"]
    for sc in scenarios:
        for run in sc.get("runs", []):
            if "recorded" in run:
                rec = run.pop("recorded")
                recorded = _recorded((root / SCENARIOS).parent / rec["file"], rec["keys"], rec.get("steps"))
                run["values"] = {**recorded, **run.get("values", {})}  # given values win (step_time)
    return scenarios


def asserted_alerts(scenario: dict, rule_docs: dict[str, dict]) -> set[str]:
    """The alerts a scenario asserts on: those its checks name, and every alert of its `never_firing` severity."""
    names = {check["alert"] for check in scenario["checks"]}
    if "never_firing" in scenario:
        names |= {r["alert"] for doc in rule_docs.values() for g in doc["groups"] for r in g["rules"]
                  if r.get("labels", {}).get("severity") == scenario["never_firing"]}
    return names


def as_scheduled(doc: dict, evaluation_interval: str) -> dict:
    """A rule file whose groups write as Prometheus schedules them, for promtool, which evaluates every group at
    every evaluation of a test whatever its `interval`: a group with a longer one (the memory group) writes at
    the multiples of its interval only (one phase of Prometheus's), and nothing between them. Its records are
    read over ranges only (`_memory`), where the staleness marker promtool leaves between two writes is no
    sample, as Prometheus leaves none."""
    every = seconds(evaluation_interval)
    groups = []
    for g in doc["groups"]:
        interval = seconds(g.get("interval", evaluation_interval))
        if interval > every:
            due = f" and on () (vector(time() % {interval}) < {every})"
            g = {**g, "rules": [{**r, "expr": f"({r['expr']}){due}"} for r in g["rules"]]}
        groups.append(g)
    return {**doc, "groups": groups}


def scenario_rules(root: Path, scenario: dict, evaluation_interval: str = "15s") -> dict[str, str]:
    """The committed rule files (RULE_FILES, relative to prometheus/) cut to the rules `scenario` asserts on and
    the records they read (`_subset`): the same verdicts for that scenario, in a fraction of promtool's time;
    each group writing as it would every `evaluation_interval` of Prometheus's (`as_scheduled`)."""
    docs = {rel: yaml.safe_load((root / "prometheus" / rel).read_text()) for rel in RULE_FILES}
    return {rel: dump(as_scheduled(doc, evaluation_interval))
            for rel, doc in needed_rules(docs, asserted_alerts(scenario, docs)).items()}


def promtool_tests(root: Path) -> str:
    """The committed promtool test file, rendered from the scenarios and `RuleSettings()`."""
    doc = render_tests(load_scenarios(root), RuleSettings(), [f"../{p}" for p in RULE_FILES])
    return dump(doc)


__all__ = ["as_scheduled", "asserted_alerts", "load_scenarios", "promtool_tests", "render_template", "render_tests", "scenario_rules"]
