"""Per-step values of a run, replayed as the series Prometheus scrapes: the alert tests' input.

    >>> run = Segment("r", {"kl": [0.1, 1.5, 1.5, 1.5]}, step_s=10)
    >>> series = replay([run], scrape_s=15, scrapes=4)
    >>> series['grpo_step_index{run_id="r"}']
    '_ 0 2 3 3'
    >>> series['grpo_step_beyond_total{run_id="r", signal="kl", bound="1.0", process="0", streak="3"}']
    '_ 0 0 1 1'
    >>> encode([None, None, 1.0, 2.0, 3.0, 4.0, 0.5, 0.5, 0.5, "stale"])
    '_x2 1+1x3 0.5x2 stale'

The training process's exports are modelled exactly as they reach Prometheus: the
gauges hold the last step's values (non-finite values are counted, not exported),
the counters count every step (in series of the process: `process` is its start),
and the step checks' streaks are advanced by the catalog's own `Streaks` (the same
code the trainer runs). A scrape sees
the steps completed by its time. So a scenario says what a run does per step
(2 s or 15 min apart) and the rules are tested against what a 15 s scrape of it
shows, hours long.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from otel_grpo import catalog
from otel_grpo.catalog import PROCESS, STEP_CHECKS, Streaks, bound_label, judged, process_id, reached

STALE = "stale"
ENDS = ("hang", "finish", "preempt", "crash")


@dataclass(kw_only=False, slots=True)
class Segment:
    """One process of a run: its per-step values, from `start` (seconds) on, `step_s` seconds a step."""

    run_id: str
    values: Mapping[str, Sequence[float | None]]
    """Catalog key -> one value per step (all the same length); None: not logged at that step."""
    step_s: float
    start_s: float = 0.0
    first_step: int = 0
    """Step index of the first step (a resume may go back)."""
    stride: int = 1
    """Steps per reported step: a trainer that reports every N steps (TRL's `logging_steps`) moves the step
    index by N each `step_s`; its values are then one per reported step."""
    end: str = "hang"
    """After the last step: `hang` (alive, exporting, no step), `finish` (grpo.run.finished = 1), `preempt`
    (SIGTERM: grpo.run.preempted = 1) or `crash`; an ended process's series stay `expire_s` (the collector's
    metric_expiration) then go stale. A process exports its start time from its start; one with no step
    (empty values) ends one step time after its start."""
    expire_s: float = 300.0
    steps: int = field(init=False)

    def __post_init__(self) -> None:
        lengths = {len(v) for v in self.values.values()}
        if len(lengths) != 1 or self.step_s <= 0 or self.end not in ENDS or self.stride < 1:
            raise ValueError(f"segment {self.run_id!r}: values of one length, step_s > 0, stride >= 1, end in {ENDS}")
        self.steps = lengths.pop()


def _states(seg: Segment) -> Iterator[dict[str, float]]:
    """The exported values at the process's start (its start time), then after each step, keyed by series
    (labels included)."""
    run = f'run_id="{seg.run_id}"'
    process = f'{PROCESS}="{process_id(seg.start_s)}"'  # the event counters' series are the process's own
    out: dict[str, float] = {f"{catalog.get('process_start').prometheus_name}{{{run}}}": float(int(seg.start_s))}
    yield dict(out)
    streaks = {key: Streaks(c) for key, c in STEP_CHECKS.items()}
    for i in range(seg.steps):
        out[f"{catalog.get('step').prometheus_name}{{{run}}}"] = float(seg.first_step + i * seg.stride)
        out[f"{catalog.get('steps').prometheus_name}{{{run}}}"] = float((i + 1) * seg.stride)
        out[f"{catalog.get('log_interval').prometheus_name}{{{run}}}"] = seg.step_s
        logged = {key: values[i] for key, values in seg.values.items() if values[i] is not None}
        # the checks this step judges, by the key each judges (its own, else a fallback: TRL's kl), as the trainer
        finite = {key: value for key, value in logged.items() if math.isfinite(value)}
        judging = {next(k for k in check.inputs if k in finite): (check, value) for check, value in judged(finite)}
        for key, value in logged.items():  # a key not logged at this step: its gauge keeps its last value
            if not math.isfinite(value):
                name = f'{catalog.get("nonfinite").prometheus_name}{{{run}, {process}, signal="{key}"}}'
                out[name] = out.get(name, 0.0) + 1
                continue
            out[f"{catalog.get(key).prometheus_name}{{{run}}}"] = value
            if key not in judging:
                continue
            check, value = judging[key]
            state = streaks[check.key]
            state.advance(value)
            for bound, streak in zip(check.bounds, state.counts):
                labels = f'{run}, signal="{check.key}", bound="{bound_label(bound)}"'
                out[f"{catalog.get('step_streak').prometheus_name}{{{labels}}}"] = float(streak)
                done = reached(streak)
                for n in catalog.STREAKS:
                    name = f'{catalog.get("step_beyond").prometheus_name}{{{labels}, {process}, streak="{n}"}}'
                    out[name] = out.get(name, 0.0) + (n in done)
        for end in ("finish", "preempt"):  # 0 from the first step, 1 at a deliberate end
            marker = f"{catalog.get('run_' + end + 'ed').prometheus_name}{{{run}}}"
            out[marker] = float(seg.end == end and i == seg.steps - 1)
        yield dict(out)


def _segment_series(seg: Segment, scrape_s: float, scrapes: int) -> dict[str, list]:
    states = list(_states(seg))
    names = list(dict.fromkeys(n for s in states for n in s))
    series: dict[str, list] = {n: [None] * (scrapes + 1) for n in names}
    # a process that never completes a step ends (crash: dies) one step time after its start
    last_s = seg.start_s + max(seg.steps, 1) * seg.step_s
    gone_s = math.inf if seg.end == "hang" else last_s + seg.expire_s
    for k in range(scrapes + 1):
        t = k * scrape_s
        if t < seg.start_s:
            continue
        done = min(seg.steps, int((t - seg.start_s) // seg.step_s))
        if t > gone_s:
            for n in names:  # one staleness marker where a sample was, then nothing
                if series[n][k - 1] not in (None, STALE):
                    series[n][k] = STALE
            continue
        for n, v in states[done].items():  # states[0]: started, no step yet
            series[n][k] = v
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


def replay(segments: Sequence[Segment], scrape_s: float, scrapes: int) -> dict[str, str]:
    """Series name -> promtool values for `scrapes` + 1 scrapes, `scrape_s` apart; a later segment of a
    run (a resume) replaces an earlier one's samples from its first scrape with data on."""
    merged: dict[str, list] = {}
    for seg in segments:
        for name, values in _segment_series(seg, scrape_s, scrapes).items():
            old = merged.setdefault(name, [None] * (scrapes + 1))
            first = next((k for k, v in enumerate(values) if v is not None), scrapes + 1)
            old[first:] = values[first:]
    return {name: encode(values) for name, values in merged.items()}


_TOKEN = re.compile(r"^((?:nan|inf|[-+0-9.e]+)(?:,(?:nan|inf|[-+0-9.e]+))*)(?:\*(\d+))?$")


def expand(text: str) -> list[float]:
    """Per-step values in scenario notation: `0.1*100 1.5,0.5*3 nan` is 100 steps of 0.1, then 1.5 0.5
    three times, then one NaN.

    >>> expand("0.1*2 1.5,0.5*2 nan")
    [0.1, 0.1, 1.5, 0.5, 1.5, 0.5, nan]
    """
    out: list[float] = []
    for token in text.split():
        m = _TOKEN.match(token.lower())
        if m is None:
            raise ValueError(f"step values: {token!r} is not `value`, `value*count` or `a,b*count`")
        out += [float(v) for v in m.group(1).split(",")] * int(m.group(2) or 1)
    return out


__all__ = ["Segment", "encode", "expand", "replay"]
