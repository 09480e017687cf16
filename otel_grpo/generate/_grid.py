"""A grid of runs, healthy and failing, replayed through the rules: the alert model's property check.

    >>> cases = grid()
    >>> len(cases) >= 500
    True
    >>> sorted({c.mode for c in cases})[:3]
    ['checkpoints', 'collector-outage', 'crash']

Each `Case` is one run (its processes as `_replay.Segment`s) at one step time (2 s .. 30 min),
scrape interval (15 .. 60 s) and path (the pull endpoint, or OTLP through the collector every
10 or 60 s), with a start-up of up to 30 minutes, and either healthy (evaluations and saves
that beat, a clean finish, a relaunch under the same run id, a KL that creeps up, a collector
outage, a trainer clock 10 minutes behind or ahead of Prometheus's) or failing in one way from
`onset_s` on (a crash and a hang on such a clock too). The property is about what a person receives
(`_grid_run`: the alerts Prometheus fires, as the committed Alertmanager config routes, groups and
inhibits them). For every case:

- healthy: no alert of the run notifies anyone (critical or warning) at any evaluation;
- failing: nothing of the run notifies anyone about what it saw before the onset, and `expect`
  reaches its receiver within `bound_s` of it (Alertmanager's group_wait included): max(3 step
  intervals, 5 minutes), longer only where docs/alerts.md says why (`Mode.why`).

benchmarks/alerts.py prints the latency table; tests/stack/test_alert_grid.py asserts the property.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable

from ._replay import Outage, Pause, Segment
from ._rules import RuleSettings, seconds

STEP_TIMES = (2.0, 10.0, 60.0, 300.0, 1800.0)
SCRAPES = (15.0, 30.0, 60.0)
PATHS = ((0.0, 0.0), (10.0, 120.0), (60.0, 120.0))
"""(export_s, expire_s): the pull endpoint; OTLP through the collector every 10 s and every 60 s."""
STARTUPS = (0.0, 300.0, 1800.0)
FIRST_STEP_FLOOR_S = float(seconds(RuleSettings().first_step_floor))  # the default rules' floor
PER_MODE = 19


@dataclass(frozen=True, slots=True)
class Case:
    mode: str
    run_id: str
    segments: tuple[Segment, ...]
    step_s: float
    scrape_s: float
    export_s: float
    startup_s: float
    length_s: float
    expect: str | None = None
    """The alert that must reach a person; None: a healthy run that must reach nobody."""
    onset_s: float | None = None
    bound_s: float | None = None
    outages: tuple[Outage, ...] = ()
    ends_s: float | None = None
    """When the failure ends (a stall's pause), where it does not last to the case's end."""

    @property
    def path(self) -> str:
        return "pull" if self.export_s == 0 else f"push {self.export_s:g}s"


@dataclass(frozen=True, slots=True)
class Mode:
    """A failure mode (or a healthy variant): builds a case's processes from its parameters."""

    name: str
    build: Callable[["_Params"], "_Built"]
    expect: str | None = None
    min_step_s: float = 0.0
    max_step_s: float = math.inf
    pushed_only: bool = False
    why: str = ""
    """Why the bound is longer than max(3 steps, 5 min), where it is (docs/alerts.md)."""


@dataclass(slots=True)
class _Params:
    run_id: str
    step_s: float
    export_s: float
    expire_s: float
    startup_s: float
    rng: random.Random


@dataclass(slots=True)
class _Built:
    segments: list[Segment]
    onset_s: float | None = None
    bound_s: float | None = None
    length_s: float = 0.0
    outages: list[Outage] = field(default_factory=list)
    ends_s: float | None = None


# ---- values -------------------------------------------------------------------------------
TRENDED = ("kl", "reward", "entropy", "tokens_per_second")
"""The signals every run of the grid logs at every step."""
TREND_ONSET = 12
"""The step of a trend's (and a gradient spike's) failure: a process's 9th step (the gradient norm's 11th) is the
first its baselines judge (`otel_grpo.catalog.Baseline.min_steps`)."""


def healthy(n: int, rng: random.Random, *keys: str) -> dict[str, list[float | None]]:
    """A run that learns: KL slowly up from 0.02, reward up, entropy slowly down, throughput steady (the trend
    alerts' signals: `TRENDED`), and `keys` at healthy values (gradients steady, IS weights fine, groups that
    vary, finite losses)."""
    def wiggle(x: float, rel: float = 0.1) -> float:
        return x * (1 + rel * (2 * rng.random() - 1))

    at = {"grad_norm": (1.0, 0.2), "frac_reward_zero_std": (0.2, 0.1), "rollout_is_eff_sample_size": (0.9, 0.02),
          "loss": (0.1, 0.1)}
    values: dict[str, list[float | None]] = {
        "kl": [wiggle(0.02 + 0.02 * i / max(n, 1)) for i in range(n)],  # a faster creep: the kl-creep mode
        "reward": [wiggle(0.3 + 0.4 * i / max(n, 1), 0.05) for i in range(n)],
        "entropy": [wiggle(1.0 - 0.2 * i / max(n, 1), 0.02) for i in range(n)],
        "tokens_per_second": [wiggle(2000.0) for _ in range(n)],
    }
    for key in keys:
        values[key] = [0.5] * n if key == "sample_reward" else [wiggle(*at[key]) for _ in range(n)]
    return values


def _seg(p: _Params, values: dict, **kw) -> Segment:
    n = len(next(iter(values.values())))
    values = {**values, "step_time": [p.step_s] * n}
    return Segment(p.run_id, values, p.step_s, export_s=p.export_s, expire_s=p.expire_s, startup_s=p.startup_s, **kw)


def _end_of(p: _Params, step: int) -> float:
    """When step `step` (0-based) ends in a process without pauses that started at 0."""
    return p.startup_s + (step + 1) * p.step_s


def _after_steps(p: _Params, steps: int, onset: float) -> float:
    return max(onset + max(3 * p.step_s, 300.0) + 600.0, _end_of(p, steps))


def _bound(p: _Params) -> float:
    return max(3 * p.step_s, 300.0)


def _k(p: _Params, steps: int) -> int:
    """The failing step: after `steps` healthy ones, or after an hour of them when steps are slow (at least 2)."""
    return min(steps, max(2, int(3600 / p.step_s)))


# ---- healthy variants ---------------------------------------------------------------------
def _steps_for(p: _Params, hours: float = 1.5, at_least: int = 8, at_most: int = 300) -> int:
    return int(min(max(at_least, hours * 3600 / p.step_s), at_most))


def _healthy(p: _Params) -> _Built:
    n = _steps_for(p)
    values = healthy(n, p.rng, "grad_norm", "frac_reward_zero_std", "rollout_is_eff_sample_size", "loss")
    return _Built([_seg(p, values, end="finish")], length_s=_end_of(p, n) + 1800)


def _finishes(p: _Params) -> _Built:
    n = _steps_for(p, 1.0, 8, 200)
    return _Built([_seg(p, healthy(n, p.rng), end="finish")], length_s=_end_of(p, n) + 2400)


def _beating_pauses(p: _Params, every: int, seconds: float, beat_s: float) -> _Built:
    n = _steps_for(p, 1.5, 6, 300)
    pauses = {i: Pause(seconds, beat_s) for i in range(every - 1, n - 1, every)}
    seg = _seg(p, healthy(n, p.rng), pauses=pauses, end="finish")
    return _Built([seg], length_s=_end_of(p, n) + len(pauses) * seconds + 1800)


def _evaluations(p: _Params) -> _Built:
    return _beating_pauses(p, every=max(3, int(1800 / p.step_s)), seconds=p.rng.choice((600.0, 2400.0, 3600.0)),
                           beat_s=30.0)


def _checkpoints(p: _Params) -> _Built:
    return _beating_pauses(p, every=max(3, int(3600 / p.step_s)), seconds=p.rng.choice((60.0, 900.0, 3600.0)),
                           beat_s=5.0)


def _other_target(p: _Params) -> dict[str, str]:
    """The target labels of a process that reuses the run id at another world size (service.instance.id
    `<run id>/rank0`) under another service name; over the pull endpoint, at another address."""
    if p.export_s == 0:
        return {"instance": "127.0.0.1:9465"}
    return {"job": "grpo-trainer-2", "instance": f"{p.run_id}/rank0"}


def _relaunched(p: _Params, other: bool = False) -> _Built:
    """A run that finishes, then a new process under the same run id (a second attempt, a reused id); `other`:
    exporting under other target labels than the first."""
    n = _steps_for(p, 0.5, 4, 150)
    values = healthy(2 * n, p.rng)  # the second attempt goes on where the first ended
    first = _seg(p, {k: v[:n] for k, v in values.items()}, end="finish")
    later = _end_of(p, n) + 900
    second = _seg(p, {k: v[n:] for k, v in values.items()}, start_s=later, end="finish",
                  **(_other_target(p) if other else {}))
    return _Built([first, second], length_s=later + _end_of(p, n) + 1800)


def _creep(p: _Params) -> _Built:
    """KL creeping from 0.02 to 0.14 over 70 minutes (and on): a healthy drift, no jump."""
    n = _steps_for(p, 2.0, 40, 400)
    values = healthy(n, p.rng)
    values["kl"] = [0.02 + 0.12 * min(1.0, i * p.step_s / 4200) for i in range(n)]
    return _Built([_seg(p, values, end="finish")], length_s=_end_of(p, n) + 1800)


OUTAGES = (Outage(3600.0, 3750.0), Outage(3600.0, 4200.0))
"""The collector down for 2.5 or 10 minutes, an hour in (one outage per promtool group: it is the collector's)."""


REPLICA_OUTAGE = Outage(60.0, 14400.0, replica=1)
"""A second collector replica, seen up at first, down from its second minute for 4 hours (crash-looping): on no
run's path (the runs export through replica 0)."""


def _both(down: Outage) -> list[Outage]:
    """Both replicas down over the same time: every path is down."""
    return [down, Outage(down.start_s, down.end_s, replica=1)]


def _outage(p: _Params, replicas: int = 1) -> _Built:
    down = p.rng.choice(OUTAGES)
    n = max(4, int((down.end_s + 1800 - p.startup_s) / p.step_s) + 1)
    return _Built([_seg(p, healthy(n, p.rng), end="finish")], length_s=max(_end_of(p, n), down.end_s) + 1800,
                  outages=[down] if replicas == 1 else _both(down))


COLLECTOR_RESTART_S = 60.0
"""A collector restarting (a rolling update) as a run finishes: shorter than `END_WAIT_S`, which the run waits."""


def _finish_in_restart(p: _Params) -> _Built:
    """A run that finishes 20 s into a collector restart: it waits for the collector to take its last export, so
    Prometheus reads its end and the run notifies nobody (GRPOCollectorDown is the collector's)."""
    n = max(4, int((3600.0 - p.startup_s) / p.step_s) + 1)
    end = _end_of(p, n - 1)
    down = Outage(end - 20.0, end - 20.0 + COLLECTOR_RESTART_S)
    return _Built([_seg(p, healthy(n, p.rng), end="finish")], length_s=down.end_s + 2400, outages=[down])


# ---- failures -----------------------------------------------------------------------------
def _valued(key: str, value: Callable[[float], float], one_step: bool = False, at: int = 5,
            skipped: bool = False) -> Callable:
    """A failure in one signal from step `at` on (or at that step only; `skipped`: the loop skips its update, as
    a trainer that guards against a non-finite loss does)."""
    def build(p: _Params) -> _Built:
        k = at if at > 5 else _k(p, at)
        onset = _end_of(p, k)
        n = max(k + 1, int((_after_steps(p, k, onset) - p.startup_s) / p.step_s))
        values = healthy(n, p.rng, *({key} - set(TRENDED)))
        for i in range(k, k + 1 if one_step else n):
            values[key][i] = value(values[key][i])
        return _Built([_seg(p, values, skipped=frozenset({k} if skipped else ()))], onset, _bound(p),
                      _end_of(p, n) + 600)
    return build


COUNTER_WINDOW_S = float(seconds(RuleSettings().counter_window))
"""How long an event counter's alert fires after the event (GRPONonFiniteValues, GRPOStepsSkipped)."""


def _nan_then_drift(p: _Params) -> _Built:
    """A NaN loss at one step (its update skipped: a page), and from the next step on IS weights that degenerate:
    another cause, a warning that must reach the run's owner while the page still fires."""
    k = _k(p, 5)
    onset = _end_of(p, k)
    n = max(k + 2, int((_after_steps(p, k + 1, onset) - p.startup_s) / p.step_s))
    values = healthy(n, p.rng, "loss", "rollout_is_eff_sample_size")
    values["loss"][k] = math.nan
    values["rollout_is_eff_sample_size"][k + 1:] = [0.3] * (n - k - 1)
    return _Built([_seg(p, values, skipped=frozenset({k}))], onset, _bound(p), _end_of(p, n) + 600)


def _skipped_after_nan(p: _Params) -> _Built:
    """A NaN loss at one step (its update skipped: a page, which withholds the run's GRPOStepsSkipped: one cause),
    then, about 4 minutes later while the page still fires, a failed batch skipped: a cause of its own, which
    reaches the owner once the page resolves."""
    k = _k(p, 5)
    later = k + max(1, int(240 / p.step_s))
    onset = _end_of(p, k)
    n = max(later + 1, int((_after_steps(p, later, onset) - p.startup_s) / p.step_s))
    values = healthy(n, p.rng, "loss")
    values["loss"][k] = math.nan
    return _Built([_seg(p, values, skipped=frozenset({k, later}))], onset, _bound(p) + COUNTER_WINDOW_S,
                  _end_of(p, n) + COUNTER_WINDOW_S + 600)


def _crash(p: _Params) -> _Built:
    k = _k(p, 5)
    killed = _end_of(p, k) + p.rng.random() * p.step_s  # mid-step
    seg = _seg(p, healthy(k + 1, p.rng), end="crash", end_after_s=killed - _end_of(p, k))
    return _Built([seg], killed, _bound(p), killed + _bound(p) + 600)


def _crash_replica_down(p: _Params) -> _Built:
    """Killed while another collector replica, on no path of this run, is down: judged as any crash."""
    built = _crash(p)
    built.outages = [REPLICA_OUTAGE]
    return built


def _crash_starting(p: _Params) -> _Built:
    # from seconds after its start: its export at the start says it exists before its first interval ends
    killed = p.rng.uniform(5.0, max(p.startup_s, p.export_s + 60.0))
    seg = Segment(p.run_id, {"kl": []}, p.step_s, export_s=p.export_s, expire_s=p.expire_s, startup_s=p.startup_s,
                  end="crash", end_after_s=killed - p.startup_s)
    return _Built([seg], killed, _bound(p), killed + _bound(p) + 1800)


def _hang(p: _Params, k: int) -> _Built:
    due = _end_of(p, k) + p.step_s  # a hang shows once the next step is due
    return _Built([_seg(p, healthy(k + 1, p.rng))], due, _bound(p), due + _bound(p) + 600)


def _hang_mid(p: _Params) -> _Built:
    return _hang(p, _k(p, 8))


def _hang_after_first(p: _Params) -> _Built:
    return _hang(p, 1)


def _hang_before_first(p: _Params) -> _Built:
    seg = Segment(p.run_id, {"kl": []}, p.step_s, export_s=p.export_s, expire_s=p.expire_s, startup_s=p.startup_s)
    bound = FIRST_STEP_FLOOR_S + 120.0
    return _Built([seg], 0.0, bound, bound + 600)


SLOW_FIRST_STEP_S = 600.0
"""A first step that compiles or warms caches: 10 minutes, however short the others are."""


def _slow_first_step(p: _Params) -> _Built:
    """A first step of 10 minutes (compilation), then steady steps, and a hang 45 minutes after it."""
    k = max(8, int(2700 / p.step_s))
    values = {**healthy(k + 1, p.rng), "step_time": [SLOW_FIRST_STEP_S] + [p.step_s] * k}
    seg = Segment(p.run_id, values, p.step_s, export_s=p.export_s, expire_s=p.expire_s, startup_s=p.startup_s,
                  first_step_s=SLOW_FIRST_STEP_S)
    due = p.startup_s + SLOW_FIRST_STEP_S + (k + 1) * p.step_s
    return _Built([seg], due, _bound(p), due + _bound(p) + 600)


def _stall(p: _Params) -> _Built:
    k = _k(p, 8)
    seconds = max(3 * p.step_s, 300.0) + p.rng.choice((300.0, 1800.0))
    due = _end_of(p, k) + p.step_s
    n = k + min(20, max(2, int(1800 / p.step_s)))
    seg = _seg(p, healthy(n, p.rng), pauses={k: Pause(seconds)})
    return _Built([seg], due, _bound(p), _end_of(p, n) + seconds + 600, ends_s=due + seconds)


def _preempt(p: _Params) -> _Built:
    k = _k(p, 6)
    stopped = _end_of(p, k) + p.rng.random() * p.step_s
    seg = _seg(p, healthy(k + 1, p.rng), end="preempt", end_after_s=stopped - _end_of(p, k))
    return _Built([seg], stopped, _bound(p), stopped + _bound(p) + 600)


def _reused_crash(p: _Params, other: bool = False) -> _Built:
    """A finished run's id reused by a new process that is killed a few steps in; `other`: the new process
    exports under other target labels (another world size or service name) than the finished one."""
    n, k = _k(p, 10), _k(p, 5)
    first = _seg(p, healthy(n, p.rng), end="finish")
    later = _end_of(p, n) + 900
    killed = later + _end_of(p, k) + p.rng.random() * p.step_s
    second = _seg(p, healthy(k + 1, p.rng), start_s=later, end="crash", end_after_s=killed - later - _end_of(p, k),
                  **(_other_target(p) if other else {}))
    return _Built([first, second], killed, _bound(p), killed + _bound(p) + 600)


def _concurrent_crash(p: _Params) -> _Built:
    """One run id run by two live processes at once (a job started twice): the newer one, under other target
    labels, is killed a few steps in while the older one goes on. The run is its latest process: that crash pages,
    however long the older one runs (docs/alerts.md says a run id is meant for one live process)."""
    k = _k(p, 5)
    later = _end_of(p, 3)
    killed = later + _end_of(p, k) + p.rng.random() * p.step_s
    n = int((killed + _bound(p) + 600 - p.startup_s) / p.step_s) + 1  # the older one outlives the judgement
    older = _seg(p, healthy(n, p.rng), end="finish")
    newer = _seg(p, healthy(k + 1, p.rng), start_s=later, end="crash", end_after_s=killed - later - _end_of(p, k),
                 **_other_target(p))
    return _Built([older, newer], killed, _bound(p), killed + _bound(p) + 600)


def _concurrent_hang(p: _Params) -> _Built:
    """One run id run by two live processes at once, the newer one (under other target labels) hangs a few steps
    in while the older one goes on stepping: the run is its latest process, so that hang pages."""
    k = _k(p, 5)
    later = _end_of(p, 3)
    due = later + _end_of(p, k) + p.step_s  # a hang shows once the next step is due
    n = int((due + _bound(p) + 600 - p.startup_s) / p.step_s) + 1  # the older one outlives the judgement
    older = _seg(p, healthy(n, p.rng), end="finish")
    newer = _seg(p, healthy(k + 1, p.rng), start_s=later, **_other_target(p))
    return _Built([older, newer], due, _bound(p), due + _bound(p) + 600)


def _reused_hang(p: _Params) -> _Built:
    """A finished run's id reused, under other target labels, by a new process that hangs a few steps in."""
    n, k = _k(p, 10), _k(p, 5)
    first = _seg(p, healthy(n, p.rng), end="finish")
    later = _end_of(p, n) + 900
    due = later + _end_of(p, k) + p.step_s  # a hang shows once the next step is due
    second = _seg(p, healthy(k + 1, p.rng), start_s=later, **_other_target(p))
    return _Built([first, second], due, _bound(p), due + _bound(p) + 600)


RELAUNCH_SPEED_UP = 10
"""How much faster a relaunch's steps are than the process before it (more GPUs, a fixed data loader)."""


def _hang_after_faster_relaunch(p: _Params) -> _Built:
    """A run that finished an hour of slow steps, relaunched under its id a minute later (the collector still
    serving the first process's series) with steps `RELAUNCH_SPEED_UP` times faster, that hangs 5 to 40
    minutes in: judged by the relaunch's own step times, not the first process's."""
    slow_s = RELAUNCH_SPEED_UP * p.step_s  # its first step, too, ends within 30 minutes of its start
    slow = replace(p, step_s=slow_s, startup_s=max(0.0, min(p.startup_s, STARTUPS[-1] - slow_s)))
    n = _steps_for(slow, 1.0, 4, 100)
    first = _seg(slow, healthy(n, p.rng), end="finish")
    later = _end_of(slow, n - 1) + 60.0
    k = max(2, int(p.rng.uniform(300.0, 2400.0) / p.step_s))
    due = later + _end_of(p, k) + p.step_s  # a hang shows once the next step is due
    second = _seg(p, healthy(k + 1, p.rng), start_s=later)
    return _Built([first, second], due, _bound(p), due + _bound(p) + 600)


def _crash_after_fast_relaunch(p: _Params) -> _Built:
    """A run that finished, relaunched under its id on its target a minute later (a requeue: its start changes
    within `clock_window`, the collector still serving the first process's series), killed a few steps in: the
    collector then serves its frozen clock, whose lag grows by the scrape until it expires."""
    n, k = _k(p, max(10, int(600 / p.step_s))), _k(p, max(3, int(210 / p.step_s)))  # 10 and 3.5 minutes at least
    first = _seg(p, healthy(n, p.rng), end="finish")
    later = _end_of(p, n - 1) + 60.0
    killed = later + _end_of(p, k) + p.rng.random() * p.step_s
    second = _seg(p, healthy(k + 1, p.rng), start_s=later, end="crash", end_after_s=killed - later - _end_of(p, k))
    return _Built([first, second], killed, _bound(p), killed + _bound(p) + 600)


def _hang_after_speed_up(p: _Params) -> _Built:
    """One process whose steps get `RELAUNCH_SPEED_UP` times faster after an hour (shorter completions, a rollout
    engine warmed up), hanging 35 to 60 minutes later: judged by its new steps once the slower ones have left
    `recent_window`."""
    slow_s = RELAUNCH_SPEED_UP * p.step_s
    startup = max(0.0, min(p.startup_s, STARTUPS[-1] - slow_s))  # its first step ends within 30 minutes
    n = max(4, int(3600 / slow_s))
    k = int(p.rng.uniform(2100.0, 3600.0) / p.step_s)
    durations = [slow_s] * n + [p.step_s] * (k + 1)
    values = {**healthy(n + k + 1, p.rng), "step_time": durations}
    seg = Segment(p.run_id, values, p.step_s, export_s=p.export_s, expire_s=p.expire_s, startup_s=startup,
                  durations=durations)
    due = startup + sum(durations) + p.step_s  # a hang shows once the next step is due
    return _Built([seg], due, _bound(p), due + _bound(p) + 600)


def _then_outage(build: Callable[[_Params], _Built]) -> Callable[[_Params], _Built]:
    """`build`'s failure, then the collector down (2.5 or 10 minutes) from the first whole hour after its alert's
    bound and 5 minutes: the page stands through the outage, which hides the run, neither resolved nor sent again
    about a failure that never ended (the verdict's `repaged`)."""
    def then(p: _Params) -> _Built:
        built = build(p)
        start = math.ceil((built.onset_s + built.bound_s + 300.0) / 3600.0) * 3600.0
        down = p.rng.choice(OUTAGES)
        built.outages = [Outage(start, start + down.end_s - down.start_s)]
        built.length_s = max(built.length_s, built.outages[0].end_s + 1200.0)
        return built
    return then


def _crash_in_outage(p: _Params, replicas: int = 1) -> _Built:
    """Killed while the collector (every replica) is down: judged once one is back and settled."""
    down = p.rng.choice(OUTAGES)
    killed = down.start_s + 60.0
    k = max(0, int((killed - p.startup_s) / p.step_s) - 1)  # the last step that ends before the kill
    seg = _seg(p, healthy(k + 1, p.rng), end="crash", end_after_s=killed - _end_of(p, k))
    return _Built([seg], down.end_s, 180.0 + 300.0, down.end_s + 1200,
                  outages=[down] if replicas == 1 else _both(down))


CLOCK_SKEW_S = 600.0
"""How far a skewed trainer's clock is off Prometheus's, ahead or behind: minutes beyond `liveness_slack`."""


def _skewed(build: Callable[[_Params], _Built], clock_s: float) -> Callable[[_Params], _Built]:
    """`build`'s run with every process on a clock `clock_s` off Prometheus's (its exported times shifted, the
    scrapes' timestamps not): judged as the same run on a clock that agrees."""
    def skewed(p: _Params) -> _Built:
        built = build(p)
        built.segments = [replace(seg, clock_s=clock_s) for seg in built.segments]
        return built
    return skewed


def _relaunched_on_another_clock(p: _Params) -> _Built:
    """A finished run relaunched under its id on its target, on a host whose clock is behind the first one's (a
    requeue onto another node): judged by its own offset, not the first process's."""
    built = _relaunched(p)
    first, second = built.segments
    built.segments = [first, replace(second, clock_s=-CLOCK_SKEW_S)]
    return built


LOST_STORAGE_AFTER_S = 3 * 3600.0
"""How long a run has been going when Prometheus restarts without its storage (an emptyDir lost to a node drain, an
upgrade, an out-of-memory kill): its process started 3 hours before Prometheus's first scrape (t = 0)."""
RESTART_ONSET_S = 120.0
"""A failure this long after such a restart: judged by a Prometheus that has seen the run for minutes."""


def _seen_from_restart(p: _Params, values: dict, **kw) -> Segment:
    """A process that started `LOST_STORAGE_AFTER_S` before Prometheus's first scrape: all Prometheus has of it is
    what it exports from then on."""
    return replace(_seg(p, values, **kw), start_s=-LOST_STORAGE_AFTER_S - p.startup_s)


def _steps_before(p: _Params, at_s: float) -> int:
    """Steps a `_seen_from_restart` process completes by `at_s` (Prometheus's time)."""
    return int((at_s + LOST_STORAGE_AFTER_S) / p.step_s)


def _restart_end_of(p: _Params, step: int) -> float:
    """When step `step` of a `_seen_from_restart` process ends (Prometheus's time)."""
    return (step + 1) * p.step_s - LOST_STORAGE_AFTER_S


def _restart_after_alerts(p: _Params) -> _Built:
    """A run whose alerts fired an hour before Prometheus restarted without its storage (a NaN reward, a skipped
    update, KL over its threshold for 3 steps, then healthy again), seen from the restart on: none of those
    notifies again, and nothing else."""
    n = _steps_before(p, 5400.0)
    k = _steps_before(p, -3600.0) - 3  # its 3 KL steps end an hour before the restart
    values = healthy(n, p.rng, "sample_reward", "loss")
    values["sample_reward"][k] = math.nan
    values["kl"][k:k + 3] = [1.5] * 3
    return _Built([_seen_from_restart(p, values, skipped=frozenset({k}), end="finish")], length_s=5400.0 + 1800)


def _crash_after_restart(p: _Params) -> _Built:
    k = _steps_before(p, RESTART_ONSET_S) - 1
    killed = _restart_end_of(p, k) + p.rng.random() * p.step_s  # mid-step
    seg = _seen_from_restart(p, healthy(k + 1, p.rng), end="crash", end_after_s=killed - _restart_end_of(p, k))
    return _Built([seg], killed, _bound(p), killed + _bound(p) + 600)


def _hang_after_restart(p: _Params) -> _Built:
    k = _steps_before(p, RESTART_ONSET_S) - 1
    due = _restart_end_of(p, k) + p.step_s  # a hang shows once the next step is due
    return _Built([_seen_from_restart(p, healthy(k + 1, p.rng))], due, _bound(p), due + _bound(p) + 600)


def _valued_after_restart(key: str, value: float, one_step: bool = False, skipped: bool = False) -> Callable:
    """`key` at `value` from the first step after `RESTART_ONSET_S` on (or at that step only)."""
    def build(p: _Params) -> _Built:
        k = _steps_before(p, RESTART_ONSET_S)
        onset = _restart_end_of(p, k)
        n = _steps_before(p, onset + _bound(p) + 600)
        values = healthy(n, p.rng, *({key} - set(TRENDED)))
        values[key][k:k + 1 if one_step else n] = [value] * (1 if one_step else n - k)
        seg = _seen_from_restart(p, values, skipped=frozenset({k} if skipped else ()))
        return _Built([seg], onset, _bound(p), onset + _bound(p) + 600)
    return build


def _moved(build: Callable[[_Params], _Built]) -> Callable[[_Params], _Built]:
    """`build`'s run with its exports moving to another collector replica (a reconnect the Service balanced to
    another pod): a failure's within the collector's expiry before its onset, so the first replica still serves
    the run's last values then; a healthy run's a third of the way in."""
    def moved(p: _Params) -> _Built:
        built = build(p)
        at = (built.length_s / 3 if built.onset_s is None
              else max(0.0, built.onset_s - p.rng.uniform(p.export_s, p.expire_s)))
        built.segments = [replace(seg, moved_s=at) for seg in built.segments]
        return built
    return moved


_WHY_FIRST = ("A process that has no step yet cannot be told from a slow start-up (30 minutes here) until "
              "`first_step_floor` has passed without a heartbeat.")
_WHY_SKIPPED = ("A non-finite loss pages (GRPONonFiniteValues) and withholds the run's GRPOStepsSkipped while it "
                "fires, `counter_window` after the NaN: one cause, one page. A step skipped for another cause "
                "meanwhile reaches the owner when the page resolves (the next group_interval after it).")
_WHY_OUTAGE = ("Nothing of any run is heard while the collector is down (GRPOCollectorDown pages for all); a run "
               "killed meanwhile is judged `path_settle` after the collector is back.")

MODES: tuple[Mode, ...] = (
    Mode("healthy", _healthy),
    Mode("finished", _finishes),
    Mode("evaluations", _evaluations),
    Mode("checkpoints", _checkpoints),
    Mode("relaunched", _relaunched),
    Mode("relaunched-other-target", lambda p: _relaunched(p, other=True)),
    Mode("kl-creep", _creep, max_step_s=60.0),
    Mode("collector-outage", _outage, pushed_only=True),
    Mode("replicas-outage", lambda p: _outage(p, replicas=2), pushed_only=True),
    Mode("crash", _crash, "GRPOMetricsAbsent"),
    Mode("crash-starting", _crash_starting, "GRPOMetricsAbsent"),
    Mode("reused-id-crash", _reused_crash, "GRPOMetricsAbsent"),
    Mode("reused-id-other-target-crash", lambda p: _reused_crash(p, other=True), "GRPOMetricsAbsent"),
    Mode("reused-id-other-target-hang", _reused_hang, "GRPOTrainerStalled"),
    Mode("crash-in-outage", _crash_in_outage, "GRPOMetricsAbsent", pushed_only=True, why=_WHY_OUTAGE),
    Mode("crash-in-replicas-outage", lambda p: _crash_in_outage(p, replicas=2), "GRPOMetricsAbsent",
         pushed_only=True, why=_WHY_OUTAGE),
    Mode("crash-replica-down", _crash_replica_down, "GRPOMetricsAbsent", pushed_only=True),
    Mode("hang", _hang_mid, "GRPOTrainerStalled"),
    Mode("hang-after-first-step", _hang_after_first, "GRPOTrainerStalled"),
    Mode("hang-before-first-step", _hang_before_first, "GRPONoFirstStep", why=_WHY_FIRST),
    Mode("stall", _stall, "GRPOTrainerStalled"),
    Mode("hang-after-slow-first-step", _slow_first_step, "GRPOTrainerStalled", max_step_s=60.0),
    Mode("preempted", _preempt, "GRPORunPreempted"),
    Mode("nan-loss", _valued("loss", lambda v: math.nan, one_step=True, skipped=True), "GRPONonFiniteValues"),
    Mode("nan-reward", _valued("sample_reward", lambda v: math.nan, one_step=True), "GRPONonFiniteValues"),
    Mode("kl-high", _valued("kl", lambda v: 1.5), "GRPOKLHigh"),
    Mode("kl-spike", _valued("kl", lambda v: 5.0, one_step=True), "GRPOKLSpike"),
    Mode("is-drift", _valued("rollout_is_eff_sample_size", lambda v: 0.3), "GRPORolloutISDrift"),
    Mode("entropy-collapse", _valued("entropy", lambda v: 0.005), "GRPOEntropyCollapse"),
    Mode("entropy-drop", _valued("entropy", lambda v: 0.15, at=TREND_ONSET), "GRPOEntropyCollapse"),
    Mode("kl-jump", _valued("kl", lambda v: 0.3, at=TREND_ONSET), "GRPOKLJump"),
    Mode("reward-collapse", _valued("reward", lambda v: 0.05, at=TREND_ONSET), "GRPORewardCollapse"),
    Mode("throughput-drop", _valued("tokens_per_second", lambda v: 0.3 * v, at=TREND_ONSET), "GRPOThroughputDrop"),
    Mode("no-learning-signal", _valued("frac_reward_zero_std", lambda v: 0.95), "GRPONoLearningSignal"),
    Mode("grad-spike", _valued("grad_norm", lambda v: 50 * v, one_step=True, at=TREND_ONSET), "GRPOGradNormSpike"),
    Mode("nan-loss-then-is-drift", _nan_then_drift, "GRPORolloutISDrift", max_step_s=60.0),
    Mode("steps-skipped-after-nan-loss", _skipped_after_nan, "GRPOStepsSkipped", max_step_s=300.0,
         why=_WHY_SKIPPED),
    # Last, so that every mode above draws the start-ups it drew before them (one random sequence for the grid).
    Mode("healthy-clock-behind", _skewed(_evaluations, -CLOCK_SKEW_S)),
    Mode("healthy-clock-ahead", _skewed(_evaluations, CLOCK_SKEW_S)),
    Mode("relaunched-clock-behind", _relaunched_on_another_clock),
    Mode("crash-clock-behind", _skewed(_crash, -CLOCK_SKEW_S), "GRPOMetricsAbsent"),
    Mode("crash-clock-ahead", _skewed(_crash, CLOCK_SKEW_S), "GRPOMetricsAbsent"),
    Mode("hang-clock-behind", _skewed(_hang_mid, -CLOCK_SKEW_S), "GRPOTrainerStalled"),
    Mode("hang-clock-ahead", _skewed(_hang_mid, CLOCK_SKEW_S), "GRPOTrainerStalled"),
    # Prometheus restarted without its storage, 3 hours into the run (`LOST_STORAGE_AFTER_S`).
    Mode("lost-storage-after-alerts", _restart_after_alerts),
    Mode("crash-after-lost-storage", _crash_after_restart, "GRPOMetricsAbsent"),
    Mode("hang-after-lost-storage", _hang_after_restart, "GRPOTrainerStalled"),
    Mode("kl-high-after-lost-storage", _valued_after_restart("kl", 1.5), "GRPOKLHigh"),
    Mode("is-drift-after-lost-storage", _valued_after_restart("rollout_is_eff_sample_size", 0.3),
         "GRPORolloutISDrift"),
    Mode("moved-replica", _moved(_healthy), pushed_only=True),
    Mode("crash-after-move", _moved(_crash), "GRPOMetricsAbsent", pushed_only=True),
    Mode("hang-after-move", _moved(_hang_mid), "GRPOTrainerStalled", pushed_only=True),
    Mode("nan-loss-after-lost-storage", _valued_after_restart("loss", math.nan, one_step=True, skipped=True),
         "GRPONonFiniteValues"),
    Mode("hang-after-faster-relaunch", _hang_after_faster_relaunch, "GRPOTrainerStalled", max_step_s=60.0),
    Mode("crash-after-fast-relaunch", _crash_after_fast_relaunch, "GRPOMetricsAbsent"),
    Mode("hang-after-speed-up", _hang_after_speed_up, "GRPOTrainerStalled", max_step_s=60.0),
    Mode("finish-in-collector-restart", _finish_in_restart, pushed_only=True),
    Mode("concurrent-id-newer-crash", _concurrent_crash, "GRPOMetricsAbsent"),
    Mode("concurrent-id-newer-hang", _concurrent_hang, "GRPOTrainerStalled"),
    Mode("crash-then-outage", _then_outage(_crash), "GRPOMetricsAbsent", pushed_only=True),
    Mode("hang-then-outage", _then_outage(_hang_mid), "GRPOTrainerStalled", pushed_only=True),
    Mode("preempted-then-outage", _then_outage(_preempt), "GRPORunPreempted", pushed_only=True),
)


def grid(per_mode: int = PER_MODE, seed: int = 0) -> list[Case]:
    """`per_mode` cases of every mode, their step times, scrape intervals, paths and start-ups spread over the
    grid (every step time the mode allows, in turn; the rest drawn with `seed`)."""
    rng = random.Random(seed)
    cases = []
    for mode in MODES:
        steps = [s for s in STEP_TIMES if mode.min_step_s <= s <= mode.max_step_s]
        paths = [p for p in PATHS if p[0] > 0] if mode.pushed_only else list(PATHS)
        for i in range(per_mode):
            step_s = steps[i % len(steps)]
            export_s, expire_s = paths[(i // len(steps)) % len(paths)]
            scrape_s = SCRAPES[(i + i // len(steps)) % len(SCRAPES)]
            # a healthy start-up ends with the first step within 30 minutes (first_step_floor: 35m)
            startup = min(rng.choice(STARTUPS), max(0.0, STARTUPS[-1] - step_s))
            if mode.name == "hang-before-first-step":
                startup = min(startup, STARTUPS[1])
            if mode.name == "hang-after-slow-first-step":  # its first step ends within 30 minutes too
                startup = min(startup, STARTUPS[-1] - SLOW_FIRST_STEP_S)
            run_id = f"{mode.name}-{i}"
            p = _Params(run_id, step_s, export_s, expire_s, startup, random.Random(f"{seed}-{run_id}"))
            built = mode.build(p)
            cases.append(Case(mode.name, run_id, tuple(built.segments), step_s, scrape_s, export_s, startup,
                              built.length_s, mode.expect, built.onset_s, built.bound_s, tuple(built.outages),
                              built.ends_s))
    return cases


__all__ = ["Case", "MODES", "Mode", "grid"]
