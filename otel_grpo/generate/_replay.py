"""A run's processes replayed as the series Prometheus scrapes: the alert tests' input and timing model.

    >>> run = Segment("r", {"kl": [0.1, 1.5, 1.5, 1.5]}, step_s=10)
    >>> series = replay([run], scrape_s=15, scrapes=4)
    >>> series['grpo_step_index{run_id="r", job="grpo-trainer", instance="r"}']
    '_ 0 2 3 3'
    >>> series['grpo_step_beyond_total{run_id="r", job="grpo-trainer", instance="r", signal="kl", bound="1.0", process="0", streak="3"}']
    '_ 0 0 1 1'
    >>> encode([None, None, 1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, "stale"])
    '_x2 1+1x3 0.5x2 stale'

The training process's exports are modelled exactly as they reach Prometheus, on one
timeline per process (`Segment`): a start-up, steps of `step_s`, pauses between steps
(an evaluation or a save, beating or not: `Pause`), and an end (`ENDS`). What a scrape at
time t sees depends on the path:

- *pull* (`export_s=0`, `expire_s=0`): the process's endpoint, collected at the scrape
  itself; a process that ended is gone from the next scrape on (stale), except that a
  finished or preempted one lingers until one more scrape has read its end marker.
- *push* through a collector (`export_s>0`): the process exports every `export_s` (and
  once more when it closes on purpose; a killed one does not), each time every series it has
  (one it no longer has comes flagged "no recorded value", which drops it; a process that ends on purpose
  while the collector is down waits up to `END_WAIT_S` for it to take that last export, where it took one
  within `END_GONE_AFTER_S` before); the collector
  serves each series' last delivered value until `expire_s` (its metric_expiration) after
  that series' last update, forgets everything when it restarts, and is not scraped during an
  outage (`Outage`), when the exports to it fail too. A process whose exports move to
  another replica (`Segment.moved_s`) leaves the first serving what it got until its
  expiry, and the second serves copies of its own under its own target label (`with_replica`).
- `export_s=0` with `expire_s>0`: a collector fed continuously (each scrape sees the
  process's state at that moment), kept `expire_s` after the end.

The gauges hold the last step's values (a value not logged at a step, None, is absent:
no data point), non-finite values are counted, not exported, as are the steps whose update
was skipped (`Segment.skipped`), the counters count every
step (in series of the process: `process` is its start), and the step checks' streaks are
advanced by the catalog's own `Streaks` (the same code the trainer runs). Every series
carries the process's target labels as Prometheus stores them (`Segment.job`, `.instance`):
through the collector its service.name and service.instance.id, so a relaunch of a run id at
another world size or under another service name writes series of its own. The health
gauges are the trainer's: its start, its last step's end and last heartbeat,
`grpo.process.clock` (the collection time) and `grpo.process.alive_until` (the collection
time plus the export interval), all on the process's own clock (`Segment.clock_s` off
Prometheus's, whose scrape timestamps are the replay's), and the end markers (0 from the start). So a scenario says what a run does (2 s or 30 min
per step, crashes, hangs, resumes) and the rules are tested against what the scrapes
of it show, hours long.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

from otel_grpo import catalog
from otel_grpo.catalog import (END_GONE_AFTER_S, END_WAIT_S, PROCESS, STEP_CHECKS, Streaks, bound_label, judged,
                               process_id, reached)

from ._rules import promql_string

STALE = "stale"
ENDS = ("hang", "finish", "preempt", "crash")
COLLECTOR = 'job="otelcol", instance="otelcol:8888"'
"""Labels of the collector's own scrape target in replays (its `up` and uptime series)."""
SERVICE, PULL_JOB, PULL_INSTANCE = "grpo-trainer", "trainer", "127.0.0.1:9464"
"""A process's default target labels: its service.name through the collector; the local stack's scrape job and
the endpoint's address over the pull path."""


def _name(key: str) -> str:
    return catalog.get(key).prometheus_name


@dataclass(frozen=True, slots=True)
class Pause:
    """Time between two steps (or before the first, after the start-up) spent on other work."""

    seconds: float
    beat_s: float = 0.0
    """A heartbeat every this many seconds during the pause (an evaluation batch, a save that writes); 0: none
    (a hang that recovers, or work the process does not report)."""


@dataclass(frozen=True, slots=True)
class Outage:
    """A collector replica down from `start_s` to `end_s`: not scraped, exports to it lost, its memory gone
    after."""

    start_s: float
    end_s: float
    replica: int = 0
    """Which replica (`collector.replicas` > 1 in the Helm chart): the runs export through replica 0 (until a
    `Segment.moved_s`); another one down is a target of its own that is down, on nobody's path."""


@dataclass(kw_only=False, slots=True)
class Segment:
    """One process of a run: its per-step values, from `start` (seconds) on, `step_s` seconds a step."""

    run_id: str
    values: Mapping[str, Sequence[float | None]]
    """Catalog key -> one value per step (all the same length); None: not logged at that step (absent)."""
    step_s: float
    start_s: float = 0.0
    first_step: int = 0
    """Step index of the first step (a resume may go back)."""
    stride: int = 1
    """Steps per reported step: a trainer that reports every N steps (TRL's `logging_steps`) moves the step
    index by N each `step_s`; its values are then one per reported step."""
    end: str = "hang"
    """After the last step (and `end_after_s`): `hang` (alive, exporting, no step), `finish` (grpo.run.finished
    = 1), `preempt` (SIGTERM: grpo.run.preempted = 1) or `crash` (killed: no last export)."""
    expire_s: float = 300.0
    """How long the collector serves a series after its last update (metric_expiration); 0: a pull endpoint."""
    export_s: float = 0.0
    """Push interval of the process's metric reader; 0: collected at each scrape."""
    startup_s: float = 0.0
    """From the process's start to its first step's beginning (loading a model, a data set)."""
    pauses: Mapping[int, Pause] = field(default_factory=dict)
    """After step i (-1: after the start-up, before the first step): a pause before the next step begins."""
    end_after_s: float | None = None
    """From the last step's end to the process's end (a crash mid-step); default 0, and for a process
    without steps one step time after its start-up."""
    skipped: frozenset[int] = frozenset()
    """Steps (0-based) whose update the loop skipped (a non-finite loss, a failed batch): counted in the
    process's `grpo.skipped_steps`, as the trainer counts them."""
    first_step_s: float | None = None
    """The first step's duration, where it is longer than the others (a warm-up: compilation, cold caches);
    default `step_s`. Its `step_time` value is the scenario's."""
    job: str | None = None
    """The series' `job`: through the collector (honor_labels) the process's service.name (OTEL_SERVICE_NAME,
    default `SERVICE`), over the pull endpoint the scrape job's name (`PULL_JOB`)."""
    instance: str | None = None
    """The series' `instance`: through the collector the process's service.instance.id (the run id for one
    process, `<run id>/rank0` for several), over the pull endpoint its address (default `PULL_INSTANCE`)."""
    clock_s: float = 0.0
    """The process's clock minus Prometheus's: every time the process exports (its start, step ends, heartbeats,
    promise and clock) is shifted by it; the scrapes' timestamps, Prometheus's own, are not."""
    durations: Sequence[float] = ()
    """Each step's duration, where they vary (a run that speeds up); default `step_s` (`first_step_s` for the
    first). The `step_time` values are the scenario's."""
    moved_s: float | None = None
    """From this time on the process exports through collector replica 1 (a new connection that the Service
    balanced to another pod); replica 0 still serves what it got until its expiry. None: replica 0 throughout."""
    rank: int | None = None
    """The process's rank where every rank exports (`export_all_ranks`: its points carry `rank`); None: one does."""
    steps: int = field(init=False)

    def __post_init__(self) -> None:
        lengths = {len(v) for v in self.values.values()} or {0}
        if (len(lengths) != 1 or self.step_s <= 0 or self.end not in ENDS or self.stride < 1 or self.export_s < 0
                or self.expire_s < 0 or self.startup_s < 0
                or any(not 0 <= i < max(lengths) for i in self.skipped)
                or (self.moved_s is not None and self.export_s <= 0)
                or len(self.durations) not in (0, max(lengths)) or any(d <= 0 for d in self.durations)):
            raise ValueError(f"segment {self.run_id!r}: values of one length, step_s > 0, stride >= 1, end in {ENDS}, "
                             "export_s, expire_s and startup_s >= 0, skipped steps among the steps, moved_s only "
                             "where it exports, a duration > 0 for each step or none")
        self.steps = lengths.pop()

    @property
    def pull(self) -> bool:
        return self.export_s == 0 and self.expire_s == 0

    @property
    def labels(self) -> str:
        """The labels every series of the process carries: its run id and its target's `job` and `instance`."""
        job = self.job or (PULL_JOB if self.pull else SERVICE)
        instance = self.instance or (PULL_INSTANCE if self.pull else self.run_id)
        rank = "" if self.rank is None else f", rank={promql_string(str(self.rank))}"
        return (f"run_id={promql_string(self.run_id)}, job={promql_string(job)}, instance={promql_string(instance)}"
                f"{rank}")


@dataclass(slots=True)
class _Timeline:
    """When a process's steps end, when it beats, and when it ends (inf: it hangs, alive)."""

    ends: list[float]
    beats: list[float]
    end_s: float

    @classmethod
    def of(cls, seg: Segment) -> "_Timeline":
        ends: list[float] = []
        beats: list[float] = []
        t = seg.start_s + seg.startup_s
        for i in range(-1, seg.steps):
            if i >= 0:
                if seg.durations:
                    t += seg.durations[i]
                else:
                    t += seg.first_step_s if i == 0 and seg.first_step_s is not None else seg.step_s
                ends.append(t)
            pause = seg.pauses.get(i)
            if pause is not None:  # after the last step too: a process that beats, then hangs or ends
                if pause.beat_s > 0:
                    beats += [t + k * pause.beat_s for k in range(1, int(pause.seconds / pause.beat_s) + 1)
                              if k * pause.beat_s < pause.seconds]
                t += pause.seconds
        after = seg.end_after_s if seg.end_after_s is not None else (0.0 if seg.steps else seg.step_s)
        end = math.inf if seg.end == "hang" else (ends[-1] if ends else t) + after
        return cls(ends, beats, end)

    def done(self, at: float) -> int:
        """Steps completed by `at`."""
        return bisect.bisect_right(self.ends, at)

    def last_beat(self, at: float) -> float | None:
        i = bisect.bisect_right(self.beats, at)
        return self.beats[i - 1] if i else None


def _states(seg: Segment, line: _Timeline) -> Iterator[dict[str, float]]:
    """The exported values at the process's start, then after each step, keyed by series (labels included);
    the time-dependent gauges (alive, heartbeat) are added at collection."""
    run = seg.labels
    process = f'{PROCESS}="{process_id(seg.start_s + seg.clock_s)}"'  # the event counters' series are its own
    out: dict[str, float] = {f"{_name('process_start')}{{{run}}}": float(int(seg.start_s + seg.clock_s))}
    for end in ("finish", "preempt"):  # 0 from the start, 1 at a deliberate end
        out[f"{_name('run_' + end + 'ed')}{{{run}}}"] = 0.0
    skipped = f'{_name("skipped_steps")}{{{run}, {process}}}'
    out[skipped] = 0.0  # the counters that page exist at 0 from the start, as the trainer's
    for key in catalog.STOPS_TRAINING:
        out[f'{_name("nonfinite")}{{{run}, {process}, signal="{catalog.get(key).key}"}}'] = 0.0
    yield dict(out)
    streaks = {name: Streaks(c) for name, c in STEP_CHECKS.items()}
    for i in range(seg.steps):
        end_s = line.ends[i]
        out[f"{_name('step')}{{{run}}}"] = float(seg.first_step + i * seg.stride)
        out[f"{_name('steps')}{{{run}}}"] = float((i + 1) * seg.stride)
        out[f"{_name('step_end')}{{{run}}}"] = end_s + seg.clock_s
        # from the later of the last step and heartbeat; the first step's is its own duration (not the start-up)
        first = seg.first_step_s if seg.first_step_s is not None else seg.step_s
        since = max(line.ends[i - 1], line.last_beat(end_s) or -math.inf) if i else end_s - first
        out[f"{_name('log_interval')}{{{run}}}"] = end_s - since
        finite: dict[str, float] = {}
        for key, values in seg.values.items():
            value = values[i]
            name = f"{_name(key)}{{{run}}}"
            if catalog.get(key).kind is catalog.Kind.HISTOGRAM:  # a per-sample value: only a non-finite one counts
                value = None if value is None or math.isfinite(value) else value
                if value is None:
                    continue
            if value is None or not math.isfinite(value):  # absent at this step: no data point
                out.pop(name, None)
                if value is not None:
                    bad = f'{_name("nonfinite")}{{{run}, {process}, signal="{key}"}}'
                    out[bad] = out.get(bad, 0.0) + 1
                continue
            out[name] = finite[key] = value
        if i in seg.skipped:
            out[skipped] += 1
        # the checks this step judges, each on its own key, else a fallback (TRL's kl), as the trainer does
        for check, value in judged(finite):
            state = streaks[check.name]
            state.advance(value)
            for bound, streak in zip(check.bounds, state.counts):
                labels = f'{run}, signal="{check.name}", bound="{bound_label(bound)}"'
                out[f"{_name('step_streak')}{{{labels}}}"] = float(streak)
                done = reached(streak)
                for n in catalog.STREAKS:
                    counter = f'{_name("step_beyond")}{{{labels}, {process}, streak="{n}"}}'
                    out[counter] = out.get(counter, 0.0) + (n in done)
        yield dict(out)


def _at(seg: Segment, line: _Timeline, states: list[dict[str, float]], c: float) -> dict[str, float]:
    """Everything the process exports when collected at `c`."""
    run = seg.labels
    out = dict(states[line.done(c)])
    ended = c >= line.end_s
    if ended and seg.end in ("finish", "preempt"):
        out[f"{_name('run_' + seg.end + 'ed')}{{{run}}}"] = 1.0
    beat = line.last_beat(c)
    if beat is not None:
        out[f"{_name('activity')}{{{run}}}"] = beat + seg.clock_s
    out.update(_collected(seg, c, ended))
    return out


def _collected(seg: Segment, c: float, ended: bool = False) -> dict[str, float]:
    """The gauges read at the collection itself, at `c` (Prometheus's time), on the process's clock: its clock,
    and its promise (closing: no further export vouched for)."""
    run, now = seg.labels, c + seg.clock_s
    return {f"{_name('clock')}{{{run}}}": now, f"{_name('alive')}{{{run}}}": now if ended else now + seg.export_s}


def _deliveries(seg: Segment, line: _Timeline, scrape_s: float, scrapes: int) -> list[float]:
    """Collection times of what reaches the collector: one at the start, then every `export_s`, and the last
    export of a process that closes (finish, preempt; a killed process makes none); with `export_s=0`, every
    scrape while the process runs and its end."""
    horizon = scrapes * scrape_s
    if seg.export_s > 0:
        times = [seg.start_s + k * seg.export_s for k in range(int((horizon - seg.start_s) // seg.export_s) + 1)]
        times = [c for c in times if c < line.end_s]
        if seg.end in ("finish", "preempt") and line.end_s <= horizon:
            times.append(line.end_s)
        return times
    times = [k * scrape_s for k in range(scrapes + 1) if seg.start_s <= k * scrape_s < line.end_s]
    return times + ([line.end_s] if line.end_s <= horizon else [])


def _down(outages: Sequence[Outage], t: float, replica: int = 0) -> bool:
    return any(o.start_s <= t < o.end_s for o in outages if o.replica == replica)


def _restarted(outages: Sequence[Outage], t: float, replica: int = 0) -> float:
    """The replica's last restart at or before `t` (-inf: none)."""
    return max((o.end_s for o in outages if o.end_s <= t and o.replica == replica), default=-math.inf)


def collector_target(replica: int) -> str:
    """Labels of a collector replica's own scrape target in replays (its `up` and uptime series)."""
    return COLLECTOR if replica == 0 else f'job="otelcol", instance="otelcol-{replica}:8888"'


def _segment_series(seg: Segment, scrape_s: float, scrapes: int, outages: Sequence[Outage]) -> dict[str, list]:
    line = _Timeline.of(seg)
    states = list(_states(seg, line))
    if seg.pull:
        return _series_of(_pulled(seg, line, states, scrape_s, scrapes))
    series: dict[str, list] = {}
    for replica in _path(seg):  # each replica on the process's path serves a copy of its own
        for name, values in _series_of(_relayed(seg, line, states, replica, outages, scrape_s, scrapes)).items():
            series[with_replica(name, replica)] = values
    return series


def _pulled(seg: Segment, line: "_Timeline", states: list[dict[str, float]], scrape_s: float,
            scrapes: int) -> list[dict[str, float] | None]:
    """What each scrape of the pull endpoint sees: the process collected at the scrape itself, while it runs."""
    seen: list[dict[str, float] | None] = [None] * (scrapes + 1)
    read_end, last = False, None
    for k in range(scrapes + 1):
        t = k * scrape_s
        if t < seg.start_s:
            continue
        if t >= line.end_s:
            if seg.end not in ("finish", "preempt") or read_end:
                continue
            read_end = True  # it lingers until one more scrape has read its end
        key = (line.done(t), line.last_beat(t), t >= line.end_s)
        if last is None or last[0] != key:  # scrapes of one collection share its values (steps of minutes)
            last = (key, _at(seg, line, states, t))
        seen[k] = {**last[1], **_collected(seg, t, t >= line.end_s)}
    return seen


def _path(seg: Segment) -> tuple[int, ...]:
    """The collector replicas the process exports through, in turn."""
    return (0,) if seg.moved_s is None else (0, 1)


def with_replica(name: str, replica: int) -> str:
    """A series as a scrape of collector replica `replica` stores it: replica 0's as it is (compose's one
    collector), another's with the label its own target adds (a ServiceMonitor's `pod`), so two replicas' copies
    of one series are two series."""
    return name if replica == 0 else f'{name[:-1]}, pod="otel-collector-{replica}"}}'


def _relayed(seg: Segment, line: "_Timeline", states: list[dict[str, float]], replica: int,
             outages: Sequence[Outage], scrape_s: float, scrapes: int) -> list[dict[str, float] | None]:
    """What each scrape of `replica` serves of the process: each series' last value delivered to it (its exports
    while the process's path goes through it), until its expiry, a restart or an outage."""
    moved = math.inf if seg.moved_s is None else seg.moved_s
    deliveries = [c for c in _deliveries(seg, line, scrape_s, scrapes) if (c < moved) == (replica == 0)]
    if deliveries and deliveries[-1] == line.end_s and seg.end in ("finish", "preempt"):
        # a process whose exports got through lately waits for a collector that is down as it ends (restarting)
        # to take its last one, at most `END_WAIT_S`: delivered as the outage ends, else lost; one that took
        # nothing for `END_GONE_AFTER_S` (and two export intervals) before the end is gone, and not waited for
        back = max((o.end_s for o in outages if o.replica == replica and o.start_s <= line.end_s < o.end_s),
                   default=line.end_s)
        took = [c for c in deliveries[:-1] if not _down(outages, c, replica)]
        lately = took and line.end_s - took[-1] <= max(END_GONE_AFTER_S, 2 * seg.export_s)
        if back > line.end_s and back - line.end_s <= END_WAIT_S and lately:
            deliveries[-1] = back
    deliveries = [c for c in deliveries if not _down(outages, c, replica)]
    seen: list[dict[str, float] | None] = [None] * (scrapes + 1)
    held: dict[str, tuple[float, float]] = {}
    view: dict[str, float] = {}
    j, changed = 0, True
    for k in range(scrapes + 1):
        t = k * scrape_s
        while j < len(deliveries) and deliveries[j] <= t:
            # every series the process has now; one it no longer has (a statistic absent at the latest step) is
            # ended by the export's "no recorded value" point, which drops it at once
            held = {name: (v, deliveries[j]) for name, v in _at(seg, line, states, deliveries[j]).items()}
            j, changed = j + 1, True
        restart = _restarted(outages, t, replica)
        kept = {n: vc for n, vc in held.items() if t - vc[1] <= seg.expire_s and vc[1] >= restart}
        if len(kept) != len(held):
            held, changed = kept, True
        if changed:
            view, changed = {n: v for n, (v, _) in held.items()}, False
        if view and not _down(outages, t, replica):
            seen[k] = view
    return seen


def _series_of(seen: Sequence[Mapping[str, float] | None]) -> dict[str, list]:
    """Per-scrape views (series -> value; None: nothing served) as series -> values, with one staleness marker
    where a series is gone from a scrape that had it."""
    series: dict[str, list] = {}
    for k, view in enumerate(seen):
        for name, v in (view or {}).items():
            values = series.get(name)
            if values is None:
                values = series[name] = [None] * len(seen)
            values[k] = v
    for values in series.values():
        for k in range(1, len(values)):
            if values[k] is None and values[k - 1] not in (None, STALE):
                values[k] = STALE
    return series


def collector_series(outages: Sequence[Outage], scrape_s: float, scrapes: int,
                     replicas: Iterable[int] = ()) -> dict[str, list]:
    """The collector's own targets, replica 0, `replicas` and every replica an outage names: `up` (0 during an
    outage) and its uptime (not scraped while down)."""
    series: dict[str, list] = {}
    for replica in sorted({0, *replicas} | {o.replica for o in outages}):
        up, uptime = [], []
        for k in range(scrapes + 1):
            t = k * scrape_s
            down = _down(outages, t, replica)
            up.append(0.0 if down else 1.0)
            uptime.append(None if down else float(t - max(_restarted(outages, t, replica), 0.0)))
        for k in range(1, scrapes + 1):
            if uptime[k] is None and uptime[k - 1] not in (None, STALE):
                uptime[k] = STALE
        target = collector_target(replica)
        series[f"up{{{target}}}"] = up
        series[f"otelcol_process_uptime_seconds_total{{{target}}}"] = uptime
    return series


def _fmt(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def encode(values: Sequence) -> str:
    """promtool's expanding notation: `_xN` (N missing), `axN` (N+1 equal), `a+bxN` (integer steps)."""
    out, i, n = [], 0, len(values)
    while i < n:
        v = values[i]
        if v is None or v == STALE:
            j = i
            while j + 1 < n and values[j + 1] == v:
                j += 1
            out.append(("_" if v is None else STALE) + (f"x{j - i + 1}" if j > i and v is None else ""))
            if v == STALE and j > i:
                out.extend([STALE] * (j - i))
            i = j + 1
            continue
        j, d = i, None
        while j + 1 < n and isinstance(values[j + 1], float):
            step = values[j + 1] - values[j]
            if d is None:
                if step != 0 and not (step == int(step) and v == int(v)):
                    break
                d = step
            elif step != d:
                break
            j += 1
        if j < i + 2:  # two values read better as two
            out.append(_fmt(v))
            i += 1
            continue
        if d == 0:
            out.append(f"{_fmt(v)}x{j - i}")
        else:
            out.append(f"{_fmt(v)}{'+' if d > 0 else '-'}{_fmt(abs(d))}x{j - i}")
        i = j + 1
    return " ".join(out)


def replay(segments: Sequence[Segment], scrape_s: float, scrapes: int,
           outages: Sequence[Outage] = ()) -> dict[str, str]:
    """Series name -> promtool values for `scrapes` + 1 scrapes, `scrape_s` apart; a later segment of a
    run (a resume) replaces an earlier one's samples from its first scrape with data on. Where a process
    exports through the collector, the collector's own target is replayed too (its outages)."""
    merged: dict[str, list] = {}
    for seg in segments:
        for name, values in _segment_series(seg, scrape_s, scrapes, outages).items():
            old = merged.setdefault(name, [None] * (scrapes + 1))
            first = next((k for k, v in enumerate(values) if v is not None), scrapes + 1)
            old[first:] = values[first:]
    if any(seg.export_s > 0 for seg in segments) or outages:
        merged.update(collector_series(outages, scrape_s, scrapes, {r for seg in segments for r in _path(seg)}))
    return {name: encode(values) for name, values in merged.items()}


_TOKEN = re.compile(r"^((?:nan|inf|none|[-+0-9.e]+)(?:,(?:nan|inf|none|[-+0-9.e]+))*)(?:\*(\d+))?$")


def expand(text: str) -> list[float | None]:
    """Per-step values in scenario notation: `0.1*100 1.5,0.5*3 nan none*2` is 100 steps of 0.1, then 1.5 0.5
    three times, then one NaN, then two steps that do not log it.

    >>> expand("0.1*2 1.5,0.5*2 nan none")
    [0.1, 0.1, 1.5, 0.5, 1.5, 0.5, nan, None]
    """
    out: list[float | None] = []
    for token in text.split():
        m = _TOKEN.match(token.lower())
        if m is None:
            raise ValueError(f"step values: {token!r} is not `value`, `value*count` or `a,b*count`")
        out += [None if v == "none" else float(v) for v in m.group(1).split(",")] * int(m.group(2) or 1)
    return out


__all__ = ["Outage", "Pause", "Segment", "collector_series", "collector_target", "encode", "expand", "replay",
           "with_replica"]
