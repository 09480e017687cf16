"""How a run ends, told apart by the times the trainer exports: finished, preempted, crashed, hung.

    >>> from otel_grpo.generate import RuleSettings
    >>> [a["alert"] for a in run_end_alerts(RuleSettings())]
    ['GRPOTrainerStalled', 'GRPONoFirstStep', 'GRPOMetricsAbsent', 'GRPORunPreempted']

Every judgement here reads times the training process exports, not the presence of series
(which a collector keeps for its metric_expiration, a scrape gap hides, and a reused run id
fills with an older process's values), each moved onto Prometheus's clock first:

- *the clock*: each collection exports the process's clock (`grpo.process.clock`), and Prometheus stamps
  the sample with its own scrape time, which is never earlier than the collection. So the smallest
  difference of the two over `clock_window` is the process's offset from Prometheus's clock (plus the
  shortest delivery lag, which only makes the process look later); it is added to every time the process
  exports before any is compared with `time()`, so a trainer clock minutes ahead or behind judges as one
  that agrees. A new process on the same target (its start changed within the window) has its smallest
  difference since that start until the window holds only its own; a process no longer heard keeps its last
  offset.
  Every alert of a run says its latest process's offset (`clock_offset_annotation`): the sidecar moves
  the alert's start by it onto the clock of the run's step times to find the step it belongs to.

- *alive*: each collection exports `grpo.process.alive_until`, the time plus the export
  interval (a scrape: the time). A process that stops being heard from, however its
  series are kept, is overdue once `time()` passes that promise by `liveness_slack` (a
  scrape interval and the delivery's lag): GRPOMetricsAbsent (crashed, killed, lost its
  exporter) or GRPORunPreempted, by the end markers of its *latest* process (0 from each
  process's start, so a new process of a reused run id is running again; read in the series of
  the latest start only, so an older process that exported under other target labels, at another
  world size or service name, marks nothing ended).
- *progress*: the later of the process's start, its last step's end and its last heartbeat
  (`grpo.process.start_time`, `grpo.step.end_time`, `grpo.process.activity_time`). A live
  process idle longer than `stall_factor` times its step interval (which does not count its
  start-up or beating pauses: its longest step or log interval within `recent_window`, of its latest
  process alone, `_since_start`: one slow step such as a first step that compiles raises the limit only
  that long, a run that speeds up is judged by its new steps once the slower ones left the window, and a
  relaunch on faster hardware by its own), and at least `stall_floor`, is hung:
  GRPOTrainerStalled; one that has no step yet (its last step's end is older than its
  start) has `first_step_floor` instead: GRPONoFirstStep.
- *the path*: while the collector is down (every replica of it that was seen: one replica
  down of several is on no run's path once its runs export to the others, and GRPOCollectorDown
  pages for it alone), and for `path_settle` after one is back (one export interval and a
  scrape for every run to be heard again), no run is judged absent: GRPOCollectorDown pages
  for all of them. Prometheus itself back from a pause of its evaluations longer than
  `liveness_slack` (a restart that kept its storage), or scraping nothing for longer than that (its
  first evaluations back come before its first scrape, service discovery's first update), counts as such
  a path: no run is judged absent until `path_settle` after its first scrape.
  A run judged crashed, preempted or hung before stays so meanwhile (`_judged`): the outage hides
  it, and would resolve its page and page again after.
- *a restart's leftovers*: Prometheus marks a record stale when a rule stops writing it, but only one it
  wrote since it started; a record written before a restart and not since is read at its last value for
  the lookback delta (5 minutes). So each alert reads the run's judgement and end as written at this
  evaluation (`_written_now`): a crash judged before a restart is no page for the process relaunched
  while Prometheus was down.

Each building block is a named recording rule (`run_id:grpo_process:*`, `run_id:grpo_run:*`),
evaluated in the alert group before the alerts: a live run's idle seconds and the limits they are
judged against too, so each alert reads a few records.
"""

from __future__ import annotations

from typing import Callable

from otel_grpo.catalog import CLOCK_OFFSET_ANNOTATION

from ._alerts_base import DURATION as _DURATION, RUN, STEP as _STEP, alert
from ._memory import last_record, remembered
from ._rules import LOG_INTERVAL, STEP_INDEX, STEP_TIME, RuleSettings, duration, prometheus_name, run_floor, seconds

FINISHED, PREEMPTED, STARTED, ACTIVITY, STEP_END, ALIVE, CLOCK = map(
    prometheus_name, ("run_finished", "run_preempted", "process_start", "activity", "step_end", "alive", "clock"))

TARGET = "run_id, job, instance"  # the labels of one process's series: its run id and its scrape target's
CLOCK_LAG = "run_id_job_instance:grpo_process:clock_lag_seconds"  # Prometheus's scrape time minus the clock
CLOCK_LEAST = "run_id_job_instance:grpo_process:clock_least_lag_seconds"  # over the window, of one process; or now
CLOCK_OFFSET = "run_id_job_instance:grpo_process:clock_offset_seconds"  # added to the process's times
SAME_START = "run_id_job_instance:grpo_process:same_start"  # the start as at the previous evaluation
START_SEEN = "run_id_job_instance:grpo_process:start_seen_seconds"  # the start now (its clock): the next one's
SINCE_START = "run_id_job_instance:grpo_process:clock_least_lag_since_start_seconds"  # of its latest process
WATCHED = "run_id:grpo_process:watched"  # runs whose every new counter series is a new event

ALIVE_UNTIL = "run_id:grpo_process:alive_until"
OVERDUE = "run_id:grpo_process:overdue_seconds"
START = "run_id:grpo_process:start_time"
LATEST = "run_id_job_instance:grpo_process:start_time"  # the series of the run's latest process only
RANK_START = "run_id_rank:grpo_process:start_time"  # each rank's latest process's start (one rank: the run's)
RANK_LATEST = "run_id_rank_job_instance:grpo_process:start_time"  # ... of each rank's, where every rank exports
RUN_OFFSET = "run_id:grpo_process:clock_offset_seconds"  # the latest process's offset: alerts' annotation
PROGRESS = "run_id:grpo_process:progress_time"
OPEN_PROGRESS = "run_id:grpo_run:open_progress"  # of runs not ended: a hang's judgement holds only for those
HEARTBEAT = "run_id:grpo_process:activity_time"
LAST_END = "run_id:grpo_step:end_time"
LAST_STEP = "run_id:grpo_step_index:last"
INTERVAL = "run_id:grpo_step:longest_interval_seconds"
ENDED = "run_id:grpo_run:ended"  # label `how`: finished, preempted
PREEMPTED_END = ENDED + '{how="preempted"}'
PATH_DOWN = "grpo:collector_down:last_time"  # the last time no collector seen was up, the rules resumed or
# nothing had been scraped
COLLECTOR_UP = "grpo:collector:up"  # 1 while a collector seen is up, 0 while none is; absent where none was seen
EVALUATED = "grpo:rules:evaluated_time"  # the time of the alert group's last evaluation
IDLE = "run_id:grpo_process:idle_seconds"  # live runs only
STALL_LIMIT = "run_id:grpo_process:stall_limit_seconds"
FIRST_STEP_LIMIT = "run_id:grpo_process:first_step_limit_seconds"
OVERDUE_JUDGED = "run_id:grpo_judged:overdue_until"  # judged crashed or preempted: its promise
STALLED_JUDGED = "run_id:grpo_judged:stalled_progress"  # judged hung: its last progress
NO_FIRST_JUDGED = "run_id:grpo_judged:no_first_step_progress"  # judged hung before its first step


def _larger(first: str, second: str) -> str:
    """Per run, the larger of two values (the later of two times; either alone where the other is absent). The
    label keeps `or` from dropping `second` where `first` has the same labels."""
    return f'max by (run_id) ({first} or label_replace({second}, "larger", "1", "", ""))'


def _on_prometheus_clock(s: RuleSettings, metric: str) -> str:
    """Each series' last value of `metric` within `absent_window` (a time on its process's clock), however long
    ago it was scraped, moved onto Prometheus's clock by its process's offset."""
    return f"({last_record(metric)} + on ({TARGET}) group_left {CLOCK_OFFSET})"


def _last(s: RuleSettings, metric: str) -> str:
    """The run's last exported time `metric`, on Prometheus's clock: the latest of its processes'."""
    return f"max by (run_id) ({_on_prometheus_clock(s, metric)})"


def newest_value_rules(s: RuleSettings, metric: str, record: str) -> list[dict]:
    """`record`, by run_id: the last value of `metric` (within its memory, `last_record`) that the run's newest
    process to export one exported. A setting a process logs, not a judgement: a relaunch under the run id (on
    another target: another world size) may change it, and the older process's value, held for a day, must
    not win by being larger (beta 0.04 before, 0 now: KL alerts paged a run that optimises no KL). Not `LATEST`:
    the newest process may not export it yet (before its first step), nor at all where only rank 0 logs it."""
    starts = f"run_id_job_instance:{metric}:process_start"  # the start of each process that exported `metric`
    return [{"record": starts, "expr": f"{_on_prometheus_clock(s, STARTED)} and on ({TARGET}) {last_record(metric)}"},
            {"record": record, "expr": f"max by (run_id) ({last_record(metric)} and on ({TARGET}) ({starts}"
                                       f" == on (run_id) group_left max by (run_id) ({starts})))"}]


def _latest_process(s: RuleSettings, metric: str, latest: str = LATEST) -> str:
    """The last exported time `metric` of the run's latest process (`LATEST`; `RANK_LATEST`: of each rank's, where
    every rank exports), on Prometheus's clock: a second live process under the run id (a job started twice)
    would otherwise vouch, with its promise, steps and heartbeats, for a newer one that crashed or hangs, for as
    long as it runs."""
    return f"max by (run_id) ({_on_prometheus_clock(s, metric)} and on ({TARGET}) {latest})"


def _clock_rules(s: RuleSettings) -> list[dict]:
    """Each process's clock offset, before any rule reads a time it exports: the smallest lag of Prometheus's
    scrape time behind its clock over `clock_window` while one process is heard on its target; a new one (its
    start changed within the window): its smallest lag since that start, never the process's before it (another
    host's clock, perhaps); one no longer heard: its last offset; one that exports no clock (an older otel-grpo):
    0, its own clock as before. Only for processes heard within `absent_window`: the offset holds itself, and
    would otherwise outlive every process ever seen.

    The smallest lag, not the latest: a collector serves a dead process's last clock until it expires, its lag
    growing with every scrape, which would move the process's promise later by up to that expiration and page
    its crash that much later."""
    relaunched = f"max by ({TARGET}) (changes({STARTED}[{s.clock_window}])) > 0"
    heard = last_record(ALIVE)
    offset = (f"({CLOCK_LEAST} or {last_record(CLOCK_OFFSET)} or 0 * group by ({TARGET}) ({heard}))"
              f" and on ({TARGET}) {heard}")
    held = f"last_over_time({SINCE_START}[{s.clock_window}]) and on ({TARGET}) {SAME_START}"
    return [
        remembered(s, CLOCK_OFFSET, s.absent_window),  # its values before this evaluation
        {"record": CLOCK_LAG, "expr": f"min by ({TARGET}) (timestamp({CLOCK}) - {CLOCK})"},
        # Read before this evaluation writes START_SEEN and SINCE_START: their previous values.
        {"record": SAME_START, "expr": f"max by ({TARGET}) ({STARTED})"
                                      f" == on ({TARGET}) last_over_time({START_SEEN}[{s.clock_window}])"},
        {"record": SINCE_START, "expr": f'min by ({TARGET}) ({CLOCK_LAG} or label_replace({held}, "held", "1", "", ""))'},
        {"record": START_SEEN, "expr": f"max by ({TARGET}) ({STARTED})"},
        {"record": CLOCK_LEAST,
         "expr": f"min_over_time({CLOCK_LAG}[{s.clock_window}]) unless on ({TARGET}) ({relaunched}) or {SINCE_START}"},
        {"record": CLOCK_OFFSET, "expr": offset},
    ]


REMEMBERED = (ALIVE, STARTED, STEP_END, ACTIVITY, STEP_INDEX, FINISHED, PREEMPTED)
"""What the rules read of a process for `absent_window` after it stopped exporting."""


def remembered_rules(s: RuleSettings) -> list[dict]:
    """Each series' last value of `REMEMBERED` within `absent_window`, before any rule reads one (`_memory`)."""
    return [remembered(s, m, s.absent_window) for m in REMEMBERED]


def watched_rule(s: RuleSettings) -> dict:
    """The runs Prometheus has watched long enough that a counter series new to it is a new event: a process of
    theirs heard before `counter_window`, or from its start (first heard within `counter_window` of it). A run
    first heard mid-run (by a Prometheus that lost its storage) is not: the counters its process shows then count
    what it did before, unwatched; for `counter_window`, until that first sight has left the window, no counter of
    it is new by its value (an increase still counts). Read on the process's own clock: no offset needed."""
    since = (f"min_over_time({CLOCK}[{s.counter_window}]) - on ({TARGET}) group_left"
             f" max by ({TARGET}) ({last_record(STARTED)})")
    before = f"{last_record(ALIVE)} offset {s.counter_window}"
    return {"record": WATCHED,
            "expr": f"group by (run_id) ({before}) or group by (run_id) ({since} <= {seconds(s.counter_window)})"}


def _latest(s: RuleSettings, metric: str) -> str:
    """The last value of `metric` in the series of the run's latest process: those with its target's labels
    (`job`, `instance`: its service.name and service.instance.id through the collector, its address pulled). An
    older process of a reused run id may have exported under other labels (another world size, service
    name or host): its series keep their last values for `absent_window` and judge nothing."""
    return f"max by (run_id) ({last_record(metric)} and on (run_id, job, instance) {LATEST})"


def _rungs(s: RuleSettings, window: str) -> list[int]:
    """`window` and its halvings (seconds) down to `liveness_slack`, the shortest that holds a sample of every
    series (a scrape and its delivery)."""
    rungs = [seconds(window)]
    while rungs[-1] // 2 >= seconds(s.liveness_slack):
        rungs.append(rungs[-1] // 2)
    return rungs


def _since_start(s: RuleSettings, record: str, over: Callable[[str], str], window: str) -> list[dict]:
    """`record` (by run_id): `over(range)`, an expression by run_id over a range of samples, within `window`, or
    within the longest of its halvings that the run's latest process (`START`) has run, less `path_settle` (until
    its first export replaced what a collector served of the process before it); the shortest for a process younger
    than that. A relaunch under the run id shares its target labels with the processes before it, whose samples
    stay in its series: a resume on faster hardware would be judged by its predecessor's steps. Where no process
    start is known (an older otel-grpo), `window`.

    One record per halving, labelled `window`, for the runs whose process's age falls in its band (so each record
    reads only its own range), then `record`, their one value per run. Reads each series at most twice as far back
    as `window` alone."""
    settle = seconds(s.path_settle)
    rungs = _rungs(s, window)
    banded = record.replace("run_id:", "run_id_window:", 1)
    age = f"time() - {START}"
    rules = []
    for i, rung in enumerate(rungs):
        if len(rungs) == 1:
            band = ""
        elif i == 0:
            band = f" unless on (run_id) ({age} < {rung + settle})"
        elif i == len(rungs) - 1:
            band = f" unless on (run_id) ({age} >= {rungs[i - 1] + settle})"
        else:
            band = f" and on (run_id) ({age} >= {rung + settle} < {rungs[i - 1] + settle})"
        rules.append({"record": banded, "labels": {"window": duration(rung)}, "expr": over(duration(rung)) + band})
    return [*rules, {"record": record, "expr": f"max by (run_id) ({banded})"}]


def _floor_text(s: RuleSettings, name: str) -> str:
    """A floor as the alert's description says it: the setting, and that some runs have their own."""
    text = getattr(s, name)
    if s.overridden(name):
        text += " or the run's own"
    return text


def run_end_rules(s: RuleSettings, collector_seen: str) -> list[dict]:
    """The building blocks, in evaluation order: what each run's latest process last said about itself, and the
    limits its idleness is judged against."""
    # A run's last step is its latest process's only if it ended after that process started; -1: no step yet.
    last_step = (f"({_latest(s, STEP_INDEX)} and on (run_id) ({LAST_END} >= on (run_id) {START}))"
                 f" or (0 * {START} - 1)")
    # The step or log interval: the step time is measured at every step on every path, while a log interval may
    # be given once (the first optimizer step's, times logging_steps) and then held; the recent max holds both.
    def longest(within: str) -> str:
        return _larger(*(f"max_over_time({m}[{within}])" for m in (STEP_TIME, LOG_INTERVAL)))

    # No seen collector up (a series only then): one replica of several down is on nobody's path.
    down = f"{COLLECTOR_UP} == 0"
    slack = seconds(s.liveness_slack)
    return [
        *_clock_rules(s),
        # 0 also where no collector seen has a target at all (gone from service discovery, none back yet), or
        # only an `up` not scraped within the slack: one from before a restart of Prometheus, of a collector gone
        # meanwhile (no stale marker ends it), read for the lookback delta; judged up, every run paged crashed.
        {"record": COLLECTOR_UP,
         "expr": f"max(up and on (job, instance) {collector_seen} unless on (job, instance) time() - timestamp(up)"
                 f" > {slack}) or 0 * group({collector_seen})"},
        {"record": START, "expr": _last(s, STARTED)},
        {"record": LATEST, "expr": f"{_on_prometheus_clock(s, STARTED)} == on (run_id) group_left {START}"},
        {"record": ALIVE_UNTIL, "expr": _latest_process(s, ALIVE)},
        {"record": OVERDUE, "expr": f"time() - {ALIVE_UNTIL}"},
        remembered(s, RUN_OFFSET, s.absent_window),  # its values before this evaluation
        # Taken while the run is live, then held: a collector serves a dead process's last clock until it expires,
        # its lag growing, and once the window holds only those lags its offset would creep by up to that much.
        # Held while the run has a process heard within `absent_window` (ALIVE_UNTIL), not for ever.
        {"record": RUN_OFFSET, "expr": f"max by (run_id) ({CLOCK_OFFSET} and on ({TARGET}) {LATEST})"
                                       f" and on (run_id) {OVERDUE} <= {seconds(s.liveness_slack)}"
                                       f" or {last_record(RUN_OFFSET)} and {OVERDUE}"},  # both by run_id only
        # Each rank's latest process where every rank exports (`export_all_ranks`: the series carry `rank`), the
        # run's otherwise: the ranks of one job start apart, and one that saves a checkpoint beats for them all.
        {"record": RANK_START, "expr": f"max by (run_id, rank) ({_on_prometheus_clock(s, STARTED)})"},
        {"record": RANK_LATEST, "expr": f"{_on_prometheus_clock(s, STARTED)} == on (run_id, rank) group_left"
                                        f" {RANK_START}"},
        {"record": LAST_END, "expr": _latest_process(s, STEP_END, RANK_LATEST)},
        {"record": HEARTBEAT, "expr": _latest_process(s, ACTIVITY, RANK_LATEST)},
        {"record": PROGRESS, "expr": _larger(_larger(START, LAST_END), HEARTBEAT)},
        {"record": LAST_STEP, "expr": last_step},
        # One long step (a first step that compiles) counts for `recent_window`; a lasting slow-down at once, and
        # a lasting speed-up once its last slower step has left the window.
        *_since_start(s, INTERVAL, longest, s.recent_window),
        {"record": ENDED, "labels": {"how": "finished"}, "expr": f"{_latest(s, FINISHED)} == 1"},
        {"record": ENDED, "labels": {"how": "preempted"}, "expr": f"{_latest(s, PREEMPTED)} == 1"},
        # Prometheus itself down (a restart that kept its storage): it neither scrapes nor evaluates, and at its
        # first evaluations back every run looks overdue until its path is scraped again. The group's previous
        # evaluation (read before this one writes it) more than the slack ago, or no target scraped within the
        # slack (the first scrape waits for service discovery, seconds after the first evaluation; every `up`
        # read meanwhile is one from before the restart): judged as a path just back, until it is scraped.
        {"record": PATH_DOWN, "expr": f"timestamp({down}) or timestamp(time() - last_over_time({EVALUATED}"
                                      f"[{s.absent_window}]) > {slack} or time() - max(timestamp(up)) > {slack})"
                                      f" or last_over_time({PATH_DOWN}[{s.absent_window}])"},
        {"record": EVALUATED, "expr": "vector(time())"},
        # Live runs (heard from within their promise and the slack, not ended on purpose): seconds without a
        # step, heartbeat or start.
        {"record": IDLE, "expr": f"time() - {PROGRESS} and on (run_id)"
                                 f" ({OVERDUE} <= {seconds(s.liveness_slack)} unless on (run_id) {ENDED})"},
        {"record": STALL_LIMIT, "expr": _larger(f"{s.stall_factor} * {INTERVAL}", run_floor(s, "stall_floor", START))},
        {"record": FIRST_STEP_LIMIT, "expr": run_floor(s, "first_step_floor", START)},
        *_judged(s, OVERDUE_JUDGED, ALIVE_UNTIL,
                 f"{OVERDUE} > {seconds(s.liveness_slack)} unless on () ({suspended(s)})"),
        {"record": OPEN_PROGRESS, "expr": f"{PROGRESS} unless on (run_id) {ENDED}"},
        *_judged(s, STALLED_JUDGED, OPEN_PROGRESS, f"{IDLE} > {STALL_LIMIT} and {LAST_STEP} >= 0"),
        *_judged(s, NO_FIRST_JUDGED, OPEN_PROGRESS, f"{IDLE} > {FIRST_STEP_LIMIT} and {LAST_STEP} < 0"),
    ]


def _judged(s: RuleSettings, record: str, key: str, now: str) -> list[dict]:
    """`record`: the runs judged failed now (`now`, by run_id), valued `key`, a time that stays while the failure
    does (the promise a crashed process left, the last progress of a hung one); and while no run is judged absent
    (`suspended`: the collector down, or just back), the runs judged so before with the same `key`. A collector
    outage hides every run: judged afresh, a standing page resolved as the outage began (one failed scrape
    suspends the judgement for `path_settle`) and paged again after it, about a failure that never ended. A run
    that came back meanwhile (a resumed process, a step) has a later key and is judged afresh once heard; a
    judgement that ended (its run heard again) is over, whatever key a later process of the run id shows."""
    # The record's previous value (this rule reads its own last evaluation): a judgement held without a break, not
    # one of an earlier process of the run id that a day's memory would still hold.
    return [{"record": record, "expr": f"{key} and {now} or {key} <= {record} and on () ({suspended(s)})"}]


def clock_offset_annotation() -> dict[str, str]:
    """The annotation every alert of a run carries (`catalog.CLOCK_OFFSET_ANNOTATION`): its latest process's
    clock offset, read when the alert is evaluated, so the sidecar puts the alert's start on the clock of the
    run's step times (a value in a label would make each new offset a new alert). `%q` quotes the run id as
    PromQL reads a string; empty where the run exports no clock."""
    query = 'printf "' + RUN_OFFSET + '{run_id=%q}" $labels.run_id | query'
    return {CLOCK_OFFSET_ANNOTATION: "{{ with " + query + ' }}{{ . | first | value | printf "%.3f" }}{{ end }}'}


def _written_now(record: str) -> str:
    """`record` as this evaluation wrote it, for an alert to read (the module's docstring: a restart's leftovers).
    A group's rules all evaluate at one timestamp, so only this evaluation's samples fall in the last millisecond;
    one written before a restart and not since (no stale marker ends it) is older."""
    return f"last_over_time({record}[1ms])"


def _stalled() -> str:
    # Value: the last step.
    return f"{_written_now(STALLED_JUDGED)} * 0 + on (run_id) {LAST_STEP}"


def _no_first_step() -> str:
    # Value: the seconds since the process started.
    return f"{_written_now(NO_FIRST_JUDGED)} * 0 + on (run_id) (time() - {START})"


def suspended(s: RuleSettings) -> str:
    """Whether no run is judged absent now: a collector seen was down, or the rules paused, within `path_settle`."""
    return f"time() - {PATH_DOWN} < {seconds(s.path_settle)}"


def _overdue(s: RuleSettings) -> str:
    """Runs whose latest promise is overdue, judged only with the collector up and settled (or judged so before
    it went down: `_judged`); value: the last step (-1: none)."""
    return f"{_written_now(OVERDUE_JUDGED)} * 0 + on (run_id) {LAST_STEP}"


def suspended_alert(s: RuleSettings, panel: str) -> dict:
    """GRPOCrashDetectionSuspended: the suspension (`suspended`) lasting while the collector keeps coming back, which
    no single outage does (GRPOCollectorDown pages for those): its scrapes fail now and then (a scrape timeout under
    load, a collector that restarts in seconds, again and again), or Prometheus keeps missing evaluations. Each
    such failure suspends every run's crash detection for `path_settle`, so failures closer together than that
    suspend it for good, and a run that crashes meanwhile pages no one.

    Judged with the collector seen up within a window of twice `path_settle`, for that window, `path_settle` and a
    minute: one outage keeps both true for its first window at most and for `path_settle` after it, so it never
    fires for one (however long: a longer one is all down in the window before it ends)."""
    settle = seconds(s.path_settle)
    window = duration(2 * settle)
    coming_back = f"avg_over_time({COLLECTOR_UP}[{window}]) > 0"
    return alert(s, "GRPOCrashDetectionSuspended", f"{coming_back} and on () ({suspended(s)})",
                 duration(3 * settle + 60), "critical",
                 "Crash detection is suspended for every run: the collector's scrapes keep failing",
                 f"Every failed scrape of the collector (and every pause of Prometheus's evaluations) suspends "
                 f"GRPOMetricsAbsent and GRPORunPreempted for every run for {s.path_settle}, the time for live runs "
                 f"to be heard again. Failures that come more often than that, the collector coming back between "
                 f"them (up {{{{ $value | humanizePercentage }}}} of the last {window}), keep them suspended, and "
                 "a run that crashes meanwhile pages no one. Find why scrapes of the collector fail (Prometheus's "
                 "targets page: a scrape timeout under load, a collector that restarts) or why Prometheus misses "
                 f"evaluations. Runs that crashed meanwhile page once scrapes have succeeded for {s.path_settle}.",
                 panel, per_run=False)


def run_end_alerts(s: RuleSettings) -> list[dict]:
    panel = "Step index and steps per second"
    return [
        alert(s, "GRPOTrainerStalled", _stalled(), "0s", "critical",
              f"No training step after step {_STEP} in {RUN}, yet it still exports",
              f"The process is alive but makes no progress for longer than {s.stall_factor:g} times its step time or "
              f"time between reported steps (its longest in the last {s.recent_window} since its process "
              f"started, and at least {_floor_text(s, 'stall_floor')}), nor any "
              "other work it reports (heartbeats: evaluation batches, a checkpoint save that writes): a hung "
              "collective, a dead data loader or a deadlock. Measured from its last step's end as the trainer "
              "reports it, moved onto Prometheus's clock (the trainer's clock offset removed); it resolves only "
              "when a step completes, the process reports work again, or the run ends.",
              panel),
        alert(s, "GRPONoFirstStep", _no_first_step(), "0s", "critical",
              f"{RUN} has completed no training step in the {_DURATION} since its process started",
              f"The run's process is alive and has no step, and nothing it reports has happened for longer than "
              f"{_floor_text(s, 'first_step_floor')} since its start or its last heartbeat: it hangs before its "
              "first step (model or data loading, a collective or an inference server that never answers). A "
              "process that dies before its first step is GRPOMetricsAbsent. Under `instrument` or "
              "`OtelGrpoCallback` the first step is the first optimizer step, whatever logging_steps is.", panel),
        alert(s, "GRPOMetricsAbsent", f"{_overdue(s)} unless on (run_id) {_written_now(ENDED)}", s.for_fast,
              "critical",
              f"{RUN} crashed: it stopped exporting at step {_STEP} without finishing",
              "The run's latest process stopped vouching for itself (grpo_process_alive_until is overdue by more "
              f"than {s.liveness_slack}, whatever the collector still serves) and neither finished "
              "(grpo_run_finished = 1) nor was preempted (grpo_run_preempted = 1): it crashed, was killed "
              "(SIGKILL, out of memory) or lost its exporter. Step -1: before its first step. Not judged anew while the "
              "collector is down or for a few minutes after it is back (GRPOCollectorDown stands for every run; a "
              "run judged crashed before stays so), "
              "nor for as long after Prometheus itself restarts with its storage (until it has scraped again).",
              panel),
        alert(s, "GRPORunPreempted", f"{_overdue(s)} and on (run_id) {_written_now(PREEMPTED_END)}", s.for_fast,
              "warning", f"{RUN} was preempted at step {_STEP} and has not resumed",
              "The run was stopped by SIGTERM (a scheduler's preemption or a job's time limit): resume it from its "
              "last checkpoint. A resumed run exports again and this resolves. A launcher that stops its workers "
              "when one fails (torchrun, accelerate) sends the others SIGTERM too: where another rank raised or "
              "a rank of the exporting one's host was killed first, the run ends as crashed (GRPOMetricsAbsent); "
              "a rank of another host killed outright (SIGKILL) before its host's other ranks had a SIGTERM is "
              "still reported as a preemption: the launcher's log names the rank that failed first.", panel),
    ]


__all__ = ["FINISHED", "PREEMPTED", "WATCHED", "clock_offset_annotation", "newest_value_rules", "remembered_rules", "run_end_alerts",
           "run_end_rules", "suspended_alert", "watched_rule"]
