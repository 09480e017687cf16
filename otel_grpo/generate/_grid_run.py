"""The grid's cases through promtool and Alertmanager: what reaches a person, and when (the verdicts).

    verdicts = run(grid(), promtool, rule_files(RuleSettings()), alertmanager_yml_as_dict, workdir)

`promtool_groups` packs the cases into promtool test groups (runs of one scrape interval and outage side
by side, one query at every evaluation for the alerts that changed: `_grid_trace`). Each group is a
Prometheus of its own and so an Alertmanager of its own: `judge` delivers what it fired through the
committed config's routing, grouping and inhibitions (`_delivery`). A case's alert reaches a person at
the flush that finds it firing and not inhibited, by a `page` or `notify` receiver (`PERSONS`). Each
verdict keeps its run's firing alerts at every change, which tests/stack/test_alert_grid.py sends a
real Alertmanager for a sample.
"""

from __future__ import annotations

import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import yaml

from ._configs import dump
from ._delivery import Delivery, Notification
from ._grid import Case
from ._grid_trace import CHANGES, Firing, firing, of_run
from ._promtool import as_scheduled
from ._replay import replay
from ._routing import CLASSES
from ._rules import duration, seconds

UNIT_S = 1800.0
"""A group's length is whole half hours: its longest case's, rounded up."""


def _units(length_s: float) -> int:
    """A length in UNIT_S, rounded up: runs of one such length share a group."""
    return math.ceil(length_s / UNIT_S)


def promtool_groups(cases: Sequence[Case], max_runs: int = 40) -> list[list[Case]]:
    """Cases packed into promtool test groups: one scrape interval and one collector outage each, the longest
    cases together, `max_runs` at a time (a group is as long as its longest case)."""
    buckets: dict[tuple, list[Case]] = {}
    for c in sorted(cases, key=lambda c: (-c.length_s, c.run_id)):
        buckets.setdefault((c.scrape_s, c.outages), []).append(c)
    groups: list[list[Case]] = []
    for members in buckets.values():
        # A new group when full, or when this case is shorter (in UNIT_S) than the group: promtool's time
        # grows with a group's length squared (every evaluation reads each series back to its start), so
        # padding a case to a longer group costs more than another group does.
        for c in members:
            if not groups or groups[-1][0].scrape_s != c.scrape_s or groups[-1][0].outages != c.outages \
                    or len(groups[-1]) == max_runs or _units(c.length_s) < _units(groups[-1][0].length_s):
                groups.append([])
            groups[-1].append(c)
    return sorted(groups, key=lambda g: -g[0].length_s)


def group_length_s(cases: Sequence[Case]) -> float:
    """How long a promtool group of `cases` runs: whole UNIT_S, its longest case's length rounded up."""
    return _units(max(c.length_s for c in cases)) * UNIT_S


def promtool_group(cases: Sequence[Case], name: str, evaluation_interval: str = "60s") -> dict:
    """One promtool test group of `cases` (one scrape interval and outage): their series, and at every
    evaluation one query of the alerts that changed (`_grid_trace.CHANGES`; expected: none, so promtool
    prints them all)."""
    scrape_s, outages = cases[0].scrape_s, cases[0].outages
    length = group_length_s(cases)
    scrapes = int(length // scrape_s)
    series: dict[str, str] = {}
    for c in cases:
        series.update(replay(c.segments, scrape_s, scrapes, outages))
    every = seconds(evaluation_interval)
    expr = CHANGES.format(every=evaluation_interval)
    queries = [{"expr": expr, "eval_time": duration(int(k * every)), "exp_samples": []}
               for k in range(int(length // every) + 1)]
    return {"name": name, "interval": f"{scrape_s:g}s",
            "input_series": [{"series": k, "values": v} for k, v in series.items()], "promql_expr_test": queries}


PERSONS = frozenset(CLASSES.values())
"""The receivers a person reads (page, notify); the others (record, deadman) reach the sidecar or a switch."""


@dataclass(frozen=True, slots=True)
class Verdict:
    case: Case
    latency_s: float | None
    """From the onset to the expected alert's first notification of a person; None: never."""
    severity: str | None
    """The expected alert's severity when it was notified (its class: who receives it)."""
    early: tuple[str, ...]
    """Alerts of the run that notified a person about what they saw before the onset (a healthy run: at all)."""
    firing: Firing = ()
    """The run's firing alerts at each evaluation that changed them (`_grid_trace`)."""
    notified: tuple[Notification, ...] = ()
    """Every first notification of the run's alerts, to any receiver (`_delivery`)."""
    repaged: tuple[float, ...] = ()
    """When the expected alert (its labels) reached a person again, having resolved meanwhile, while its failure
    lasted (to the case's end, or its `ends_s`): a "resolved" and a second page about one failure."""

    @property
    def held(self) -> bool:
        if self.early or self.repaged:
            return False
        if self.case.expect is None:
            return True
        return self.latency_s is not None and self.latency_s <= (self.case.bound_s or 0)


def judge(cases: Iterable[Case], alerts: Firing, delivery: Delivery, end_s: float) -> list[Verdict]:
    """The verdicts of `cases` whose alerts (and any other's: the stack's, other runs') fired as `alerts` until
    `end_s`, delivered as `delivery` (the Alertmanager config) sends them: what reached a person, and when."""
    by_run: dict[str, list[Notification]] = {}
    for n in delivery.notifications(alerts, end_s):
        by_run.setdefault(dict(n.labels).get("run_id", ""), []).append(n)
    verdicts = []
    for c in cases:
        sent = by_run.get(c.run_id, [])
        person = [n for n in sent if n.receiver in PERSONS]
        onset = math.inf if c.onset_s is None else c.onset_s
        early = tuple(sorted(n.alertname for n in person if n.since_s < onset))
        first = next((n for n in person if n.alertname == c.expect and n.since_s >= onset), None)
        latency = None if first is None else first.sent_s - onset
        severity = None if first is None else dict(first.labels).get("severity")
        lasts = math.inf if c.ends_s is None else c.ends_s
        again = () if first is None else tuple(n.sent_s for n in person if n.labels == first.labels
                                               and first.since_s < n.since_s < lasts)
        verdicts.append(Verdict(c, latency, severity, early, of_run(alerts, c.run_id), tuple(sent), again))
    return verdicts


def run(cases: Sequence[Case], promtool: str, rule_files: dict[str, str], alertmanager: Mapping, workdir: Path,
        workers: int = 2, evaluation_interval: str = "60s") -> list[Verdict]:
    """Every case through `promtool test rules` against `rule_files` (relative path -> text), one promtool per
    group, `workers` at a time, and what fired through the Alertmanager config `alertmanager` (a dict: the
    committed alertmanager/alertmanager.yml); their verdicts, in the order of `cases`.

    The rules are evaluated every 60 s by default, a quarter of compose's evaluations (15 s): the grid's
    hundreds of run-hours fit the test budget, a latency is measured up to 45 s late (crash-in-outage's up to
    45 s early: the collector's last evaluation seen down is earlier), and a condition must hold at an
    evaluation to count (the scenarios of prometheus/tests/scenarios.yml run at 15 s)."""
    delivery = Delivery.from_config(alertmanager)
    for rel, text in rule_files.items():  # each group writing as Prometheus schedules it (`as_scheduled`)
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (workdir / rel).write_text(dump(as_scheduled(yaml.safe_load(text), evaluation_interval)))
    groups = promtool_groups(cases)

    def one(i: int) -> str:
        group = promtool_group(groups[i], f"grid {i}: " + " ".join(c.run_id for c in groups[i]), evaluation_interval)
        doc = {"rule_files": list(rule_files), "evaluation_interval": evaluation_interval, "tests": [group]}
        path = workdir / f"grid_{i}.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=10_000))
        out = subprocess.run([promtool, "test", "rules", path.name], cwd=workdir, capture_output=True, text=True,
                             timeout=1800)
        text = out.stdout + out.stderr
        if (out.returncode != 0 and "got:" not in text) or ", err: " in text:  # an error, not the report
            raise RuntimeError(f"promtool failed on {path}: {text[-3000:]}")
        return text

    with ThreadPoolExecutor(workers) as pool:
        outputs = list(pool.map(one, range(len(groups))))
    # Each group is a Prometheus of its own, and so an Alertmanager of its own.
    verdicts = {v.case.run_id: v for group, text in zip(groups, outputs)
                for v in judge(group, firing(text), delivery, group_length_s(group))}
    return [verdicts[c.run_id] for c in cases]


__all__ = ["PERSONS", "Verdict", "group_length_s", "judge", "promtool_group", "promtool_groups", "run"]
