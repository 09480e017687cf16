"""What the grid's promtool runs report, and what a traced run fired at every evaluation, as Alertmanager gets it.

    >>> out = '''    expr: "ALERTS{alertstate=\\\\"firing\\\\", run_id=~\\\\"a\\\\"}", time: 1h2m,
    ...         exp: nil
    ...         got: {__name__="ALERTS", alertname="X", alertstate="firing", run_id="a", severity="warning"} 1E+00'''
    >>> [(expr[:7], t, samples[0][0]["alertname"]) for expr, t, samples in report(out)]
    [('ALERTS{', 3720.0, 'X')]
    >>> transitions({60.0: {(("alertname", "X"),)}}, 180.0, 60.0)
    ((60.0, frozenset({(('alertname', 'X'),)})), (120.0, frozenset()))

A traced run's groups get one query of its firing alerts (`ALERTS`) at every evaluation; promtool reports each
evaluation at which some alert of the run fired. `transitions` turns them into the evaluations at which the
set of firing alerts changed, each with the alerts (label sets, as Prometheus sends them) firing from then
on; `changes` and `schedule` replay those to a real Alertmanager (tests/stack/test_alert_grid.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

Labels = tuple[tuple[str, str], ...]
"""An alert's label set, sorted: what Prometheus sends Alertmanager (ALERTS without `__name__`, `alertstate`)."""
Firing = tuple[tuple[float, frozenset[Labels]], ...]
"""(evaluation time in seconds, the run's alerts firing from then on), at each change, the first included."""

TRACE = 'ALERTS{{alertstate="firing", run_id=~"{runs}"}}'
"""The firing alerts of the traced runs of a group (`runs`: their ids as a regex alternation)."""
_BLOCK = re.compile(r'^expr: "(.*)", time: (\S+),$')
_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_SAMPLE = re.compile(r"\{([^{}]*)\} (\S+?)(?:,|$)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _seconds(duration: str) -> float:
    """A duration as promtool prints it (Go's model.Duration: "1d2h30m", "45s", "0s") in seconds."""
    return float(sum(int(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(duration)))


def report(promtool_output: str) -> Iterator[tuple[str, float, list[tuple[dict[str, str], float]]]]:
    """(expression, evaluation time in seconds, samples got) of every query promtool reports as failed: the
    grid's queries expect nothing, so each one that found something is reported with what it found."""
    expr, at = None, math.nan
    for line in promtool_output.splitlines():
        line = line.strip()
        if m := _BLOCK.match(line):
            expr, at = m.group(1).replace('\\"', '"'), _seconds(m.group(2))
        elif line.startswith("got:") and expr is not None:
            yield expr, at, [(dict(_LABEL.findall(labels)), float(value))
                             for labels, value in _SAMPLE.findall(line[4:].strip())]
            expr = None


def traced(promtool_output: str) -> dict[str, dict[float, set[Labels]]]:
    """run_id -> evaluation time -> the alerts of the run firing then, from a traced group's report."""
    out: dict[str, dict[float, set[Labels]]] = {}
    for expr, at, samples in report(promtool_output):
        if not expr.startswith("ALERTS{"):
            continue
        for labels, _ in samples:
            sent = tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "alertstate")))
            out.setdefault(labels["run_id"], {}).setdefault(at, set()).add(sent)
    return out


def transitions(firing: Mapping[float, set[Labels]], length_s: float, every_s: float) -> Firing:
    """The evaluations (every `every_s` from 0 to `length_s`) at which the set of firing alerts changed."""
    out, now = [], frozenset()
    for k in range(int(length_s // every_s) + 1):
        at = k * every_s
        then = frozenset(firing.get(at, ()))
        if then != now:
            out.append((at, then))
            now = then
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Change:
    """What Prometheus sends Alertmanager about one run at one evaluation: alerts that start and stop firing."""

    at_s: float
    fired: tuple[Labels, ...]
    resolved: tuple[Labels, ...]


def changes(firing: Firing) -> list[Change]:
    out, before = [], frozenset()
    for at, now in firing:
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


__all__ = ["TRACE", "Change", "Firing", "Labels", "changes", "report", "schedule", "traced", "transitions"]
