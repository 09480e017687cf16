"""What the alerts remember of a run for a day, re-read rarely: the memory group.

    >>> from otel_grpo.generate import RuleSettings
    >>> last_within(RuleSettings(), "grpo_process_alive_until_seconds", "1d")  # doctest: +NORMALIZE_WHITESPACE
    '(last_over_time(grpo_process_alive_until_seconds[1890s])
      or last_over_time(series:grpo_process_alive_until_seconds:last_1d[30m]))'

A run's alerts need its processes' last values for a day after they stop exporting: a crashed run pages
until it resumes or `absent_window` has passed, a counter series is new only if unseen for
`counter_lookback`, a clock offset is kept after its clock is gone. `last_over_time(x[1d])` at every
evaluation finds them, but reads every sample of the day, so the alert group's cost grew with each run's
history and a team's runs of the last day outgrew its interval (benchmarks/README.md, rules_load).

Instead each such value is read by `last_within`: the series' last value within `fresh_window`, or else what the
memory group (`memory_group`, evaluated every `memory_interval`) last recorded of it, `<metric>:last_<lookback>` =
`last_over_time(<metric>[<lookback>])`. The alert group records that once per evaluation (`remembered`:
`<metric>:last`) for the rules after it, which read it now or `offset` a window back; it reads minutes of
samples, and the day is read once per `memory_interval`.

What it reads is the series' last value, or nothing; never an older one. The raw window is longer than the
memory window by `liveness_slack` (a scrape and its delivery), so where the series has no sample in the raw
window, a memory sample in the memory window was taken after the series' last sample was stored. Nothing is found
only where the memory group has not evaluated for `memory_window` (three intervals: a missed iteration and a slow
one), as after a restart of Prometheus that kept its storage and was down longer than that, until the memory
group's first evaluation (within `memory_interval`): a process heard since is read directly, an older one is not
judged meanwhile (as while the path settles after any outage, `path_settle`).
"""

from __future__ import annotations

import re
from typing import Iterable

from ._rules import RuleSettings, duration, seconds

GROUP = "grpo-memory"
_MEMORY = re.compile(r"([a-zA-Z_][a-zA-Z0-9_:]*?):last_(\d+[smhd])(\{[^}]*\})?(?=\[)")


def _levelled(metric: str, operation: str) -> str:
    """`metric`'s record name for `operation` (a selector after the name selects in it): a record keeps its level
    (`process:grpo_step_beyond_total:last`), a scraped series is at level `series`."""
    name, brace, selector = metric.partition("{")
    level = "" if ":" in name else "series:"
    return f"{level}{name}:{operation}{brace}{selector}"


def memory_record(metric: str, lookback: str) -> str:
    """The memory group's record of each series' last value of `metric` within `lookback`."""
    return _levelled(metric, f"last_{lookback}")


def last_record(metric: str) -> str:
    """The alert group's record of each series' last value of `metric` within its lookback (`remembered`)."""
    return _levelled(metric, "last")


def memory_window(s: RuleSettings) -> str:
    """How far back the alert group looks for the memory group's last record: three of its intervals."""
    return duration(3 * seconds(s.memory_interval))


def fresh_window(s: RuleSettings) -> str:
    """How far back the alert group reads a series itself: the memory window and a scrape's slack beyond it."""
    return duration(3 * seconds(s.memory_interval) + seconds(s.liveness_slack))


def last_within(s: RuleSettings, metric: str, lookback: str, offset: str | None = None) -> str:
    """Each series' last value of `metric` within `lookback` (its labels kept, its name dropped), as
    `last_over_time(metric[lookback] offset ...)` finds it, from minutes of samples (the module's docstring)."""
    at = f" offset {offset}" if offset else ""
    return (f"(last_over_time({metric}[{fresh_window(s)}]{at})"
            f" or last_over_time({memory_record(metric, lookback)}[{memory_window(s)}]{at}))")


def remembered(s: RuleSettings, metric: str, lookback: str, labels: dict[str, str] | None = None) -> dict:
    """The alert group's record `last_record(metric)`: `last_within(metric, lookback)` once per evaluation, for
    the rules after it to read as an instant vector (`offset w`: as it was w ago). `labels`: those the selected
    series share, which tell its rule from the others of the name (`_subset`)."""
    return {"record": last_record(metric).partition("{")[0], "expr": last_within(s, metric, lookback),
            **({"labels": labels} if labels else {})}


def memory_group(s: RuleSettings, rules: Iterable[dict]) -> dict:
    """The group recording every memory record that `rules` read, every `memory_interval` (with the reader's
    labels, a selector's rule for each)."""
    records = {}
    for rule in rules:
        for m in _MEMORY.finditer(rule["expr"]):
            stored, lookback, selector = m.groups()
            metric = stored.removeprefix("series:")
            records[m.group(0)] = {"record": f"{stored}:last_{lookback}",
                                   "expr": f"last_over_time({metric}{selector or ''}[{lookback}])",
                                   **({"labels": rule["labels"]} if selector and "labels" in rule else {})}
    return {"name": GROUP, "interval": s.memory_interval, "rules": list(records.values())}


__all__ = ["GROUP", "fresh_window", "last_record", "last_within", "memory_group", "memory_record", "memory_window",
           "remembered"]
