"""What the grid's promtool runs report: every alert's changes at every evaluation, as Alertmanager gets them.

    >>> out = '''    expr: "label_replace(ALERTS...)", time: 1h2m,
    ...         exp: nil
    ...         got: {__name__="ALERTS", alertname="X", alertstate="firing", change="fired", run_id="a"} 1E+00'''
    >>> [(expr[:14], t, samples[0][0]["alertname"]) for expr, t, samples in report(out)]
    [('label_replace(', 3720.0, 'X')]
    >>> firing(out)
    ((3720.0, frozenset({(('alertname', 'X'), ('run_id', 'a'))})),)

Each promtool group gets one query (`CHANGES`) at every evaluation: the alerts that started firing then, and
those that stopped; promtool reports each evaluation at which some alert changed. `firing` turns them into
the group's `Firing`: at each change, the alerts (label sets, as Prometheus sends them) firing from then on,
of every run and of the stack. `_delivery` replays it through Alertmanager's routing and inhibitions; `of_run`,
`changes` and `schedule` replay a run to a real Alertmanager (tests/stack/test_alert_grid.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

Labels = tuple[tuple[str, str], ...]
"""An alert's label set, sorted: what Prometheus sends Alertmanager (ALERTS without `__name__`, `alertstate`)."""
Firing = tuple[tuple[float, frozenset[Labels]], ...]
"""(evaluation time in seconds, the alerts firing from then on), at each change, the first included."""

_NOW = 'ALERTS{{alertstate="firing"}}'
CHANGES = (f'label_replace({_NOW} unless {_NOW} offset {{every}}, "change", "fired", "", "")'
           f' or label_replace({_NOW} offset {{every}} unless {_NOW}, "change", "resolved", "", "")')
"""The alerts that started firing at an evaluation (change="fired") and those that stopped (change="resolved"),
against the evaluation `every` earlier: Prometheus writes a staleness marker for a series an evaluation drops."""
_BLOCK = re.compile(r'^expr: "(.*)", time: (\S+),$')
_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_SAMPLE = re.compile(r"\{([^{}]*)\} (\S+?)(?:,|$)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_NOT_SENT = ("__name__", "alertstate", "change")


def duration_s(duration: str) -> float:
    """A Go duration as Prometheus, promtool and Alertmanager write it ("1d2h30m", "45s") in seconds."""
    if not re.fullmatch(r"(\d+(ms|y|w|d|h|m|s))+", duration):
        raise ValueError(f"duration {duration!r}: expected e.g. 1m30s")
    return float(sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(duration)))


def report(promtool_output: str) -> Iterator[tuple[str, float, list[tuple[dict[str, str], float]]]]:
    """(expression, evaluation time in seconds, samples got) of every query promtool reports as failed: the
    grid's queries expect nothing, so each one that found something is reported with what it found."""
    expr, at = None, math.nan
    for line in promtool_output.splitlines():
        line = line.strip()
        if m := _BLOCK.match(line):
            expr, at = m.group(1).replace('\\"', '"'), duration_s(m.group(2))
        elif line.startswith("got:") and expr is not None:
            yield expr, at, [(dict(_LABEL.findall(labels)), float(value))
                             for labels, value in _SAMPLE.findall(line[4:].strip())]
            expr = None


def firing(promtool_output: str) -> Firing:
    """The alerts firing from each change on, from a group's report of its `CHANGES` queries."""
    fired: dict[float, dict[Labels, bool]] = {}
    for expr, at, samples in report(promtool_output):
        if not expr.startswith("label_replace(ALERTS"):
            continue
        for labels, _ in samples:
            sent = tuple(sorted((k, v) for k, v in labels.items() if k not in _NOT_SENT))
            fired.setdefault(at, {})[sent] = labels["change"] == "fired"
    out, now = [], frozenset()
    for at in sorted(fired):
        now = frozenset({a for a in now if fired[at].get(a, True)} | {a for a, up in fired[at].items() if up})
        out.append((at, now))
    return tuple(out)


def of_run(alerts: Firing, run_id: str) -> Firing:
    """The changes of one run's alerts (those with its `run_id`) in `alerts`."""
    out, before = [], frozenset()
    for at, now in alerts:
        mine = frozenset(a for a in now if ("run_id", run_id) in a)
        if mine != before:
            out.append((at, mine))
            before = mine
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Change:
    """What Prometheus sends Alertmanager about one run at one evaluation: alerts that start and stop firing."""

    at_s: float
    fired: tuple[Labels, ...]
    resolved: tuple[Labels, ...]


def changes(alerts: Firing) -> list[Change]:
    out, before = [], frozenset()
    for at, now in alerts:
        out.append(Change(at, tuple(sorted(now - before)), tuple(sorted(before - now))))
        before = now
    return out


def schedule(runs: Mapping[str, Sequence[Change]], align: Mapping[str, int]) -> list[dict[str, Change]]:
    """Slots for replaying runs side by side in compressed time: each run's changes in order, one per slot, a
    run's change number `align[run]` in the same slot for all aligned runs. Alertmanager groups and
    inhibits alerts of one run only (`group_by` and `equal` hold `run_id`), so within a run the order is
    kept; across runs the aligned changes (each failure's alert) arrive together."""
    at = max(align.values(), default=0)
    offsets = {run: at - align.get(run, 0) for run in runs}
    slots: list[dict[str, Change]] = [{} for _ in range(max((offsets[r] + len(c) for r, c in runs.items()), default=0))]
    for run, cs in runs.items():
        for i, change in enumerate(cs):
            slots[offsets[run] + i][run] = change
    return slots


__all__ = ["CHANGES", "Change", "Firing", "Labels", "changes", "duration_s", "firing", "of_run", "report", "schedule"]
