"""docs/alerts.md: the alert model, from the rules, the routing classes and the grid's failure modes."""

from __future__ import annotations

from otel_grpo.catalog import END_GONE_AFTER_S, END_WAIT_S, STEP_CHECKS

from ._alerts import WITHHELD, alert_rules, alerts
from ._alerts_table import failure_modes
from ._configs import EXPLAINS
from ._grid import CLOCK_SKEW_S, MODES, PATHS, SCRAPES, STEP_TIMES, STARTUPS
from ._rules import RuleSettings, recording_rules, seconds
from ._subset import reads, rule_reads

_TREND = STEP_CHECKS["kl_jump"].baseline
_GRAD = STEP_CHECKS["grad_norm"].baseline

# What each recording rule an alert reads holds (docs/operations.md lists the dashboards' records too).
_PER_PROCESS = ("the counter once per process (its run, target and start) whichever collector replicas relayed "
                "it: the largest of their copies")
BLOCKS = {
    "process:grpo_step_beyond_total": _PER_PROCESS + ", at the bounds and streaks the alerts read only (a trainer "
        "exports every check at every bound and streak)",
    "process:grpo_nonfinite_total": _PER_PROCESS,
    "process:grpo_skipped_steps_total": _PER_PROCESS,
    "run_id:grpo_step_index:max": "the run's highest step index now",
    "run_id_signal:grpo_nonfinite:counted": "the run's signals with non-finite values counted within "
                                            "`counter_window` (a new series: by its value, in a watched run)",
    "run_id:grpo_kl_coef:last": "the last beta within `absent_window` of the run's newest process that logged one "
                                "(0: KL alerts off)",
    "run_id_job_instance:grpo_kl_coef:process_start": "the start of each process that logged a beta (on "
                                                      "Prometheus's clock): the newest one's beta is the run's",
    "run_id:grpo_process:watched": "runs Prometheus heard before `counter_window` or from their process's start: "
                                   "a counter series new to it is a new event (first heard mid-run, by a "
                                   "Prometheus that lost its storage: what it counted before)",
    "run_id_signal_bound:grpo_step_streak:max": "the run's current streak beyond its own bound of the signal",
    "run_id_signal_bound:grpo_step_beyond:rose": "`{streak}`: the counter of streaks of that length at the run's "
                                                 "bound rose within `counter_window`",
    "run_id_signal_bound:grpo_step_beyond:new": "`{streak}`: that counter is new within `counter_window` (unseen "
                                                "for `counter_lookback` before), by its value",
    "run_id_signal_bound:grpo_step_beyond:increase": "`{streak}`: either of the two, a new counter in a "
                                                     "watched run only",
    "run_id_signal_bound:grpo_step_check:beyond": "`{streak}`: beyond the run's bound for that many consecutive "
                                                  "steps, lately (the counter) or now (the streak)",
    "job_instance:collector:seen": "targets that served the collector's own metrics within `history_window`",
    "job_instance:sidecar:seen": "targets that served the sidecar's own metrics within `history_window`",
    "instance:alertmanager_notifications_failed:increase": "notifications Alertmanager gave up on within "
                                                           "`counter_window`, by integration and reason",
    "instance:prometheus_notifications_dropped:increase": "alerts Prometheus dropped within `counter_window` for every "
                                                          "Alertmanager it sends to now",
    "instance:alert_notifications_failed:increase": "either of the two",
    "job_instance:process:started_recently": "stack targets whose process started within `counter_window` (the "
                                             "collector by its uptime, the others by `process_start_time_seconds`)",
    "run_id_job_instance:grpo_process:clock_lag_seconds": "each process's lag now: Prometheus's scrape time of "
                                                          "its `grpo_process_clock_seconds` minus that value",
    "run_id_job_instance:grpo_process:clock_least_lag_seconds": "its smallest lag over `clock_window`, where one "
                                                                "process was heard on the target (its start "
                                                                "unchanged); else its smallest since that start",
    "run_id_job_instance:grpo_process:same_start": "each target's process start (its clock) where it is the one the "
                                                   "previous evaluation saw",
    "run_id_job_instance:grpo_process:start_seen_seconds": "each target's process start now, for the next "
                                                           "evaluation to compare",
    "run_id_job_instance:grpo_process:clock_least_lag_since_start_seconds": "the smallest lag since the target's "
        "process start last changed: its lag now, or the previous value where it is smaller and the start the same",
    "run_id_job_instance:grpo_process:clock_offset_seconds": "Prometheus's clock minus the process's: that smallest "
                                                             "lag (a new process on the target: its smallest since its start; gone: "
                                                             "its last offset; no clock exported: 0), added to every "
                                                             "time it exports before the records below compare it",
    "run_id:grpo_process:alive_until": "the promise of the run's latest process to be heard from again",
    "run_id:grpo_process:overdue_seconds": "how far past that promise now",
    "run_id:grpo_process:start_time": "the latest process's start",
    "run_id_job_instance:grpo_process:start_time": "the same, in the series of the latest process only: its "
                                                   "target labels (`job`, `instance`), which the end markers and "
                                                   "the last step are read in",
    "run_id:grpo_process:clock_offset_seconds": "that process's clock offset, taken while the run is live and then "
                                                "held (a dead process's clock, still served, would creep): every run "
                                                "alert's `clock_offset_seconds` annotation",
    "run_id:grpo_step:end_time": "the end of the run's last step",
    "run_id:grpo_process:activity_time": "the run's last heartbeat",
    "run_id:grpo_process:progress_time": "the later of that start, its last step's end and its last heartbeat",
    "run_id:grpo_step_index:last": "the latest process's last step (-1: none yet)",
    "run_id_window:grpo_step:longest_interval_seconds": "`{window}`: the longest step time or time between "
                                                        "reported steps within the window, for runs whose latest "
                                                        "process has run it (`path_settle` more) and not twice it: "
                                                        "the longest halving of `recent_window` that holds that "
                                                        "process's samples alone",
    "run_id:grpo_step:longest_interval_seconds": "that one, per run: one slow step (a first step that compiles) "
                                                 "counts for `recent_window` only, the process before a relaunch "
                                                 "not at all",
    "run_id:grpo_run:ended": "`{how}`: finished or preempted, by the latest process's end markers",
    "grpo:collector_down:last_time": "when no collector seen was last up (one replica of several down: never), "
                                     "or Prometheus's evaluations resumed after a pause longer than "
                                     "`liveness_slack` (a restart that kept its storage), or no target was "
                                     "scraped within `liveness_slack` (its first scrape after a restart)",
    "grpo:rules:evaluated_time": "the time of the alert group's last evaluation: a pause since shows at the next",
    "run_id:grpo_process:idle_seconds": "seconds since that progress, for live runs (heard from within the "
                                        "slack, not ended)",
    "run_id:grpo_process:stall_limit_seconds": "3x the longest interval, at least `stall_floor` (or the run's own)",
    "run_id:grpo_process:first_step_limit_seconds": "`first_step_floor` (or the run's own)",
    "run_id:grpo_run:open_progress": "that progress, for runs that have not ended (finished or preempted)",
    "run_id:grpo_judged:overdue_until": "the promise of a run judged gone (overdue past the slack, the collector up "
                                        "and settled), held while the judgement is suspended and the promise the "
                                        "same: GRPOMetricsAbsent and GRPORunPreempted",
    "run_id:grpo_judged:stalled_progress": "the progress of a run judged hung (idle past its stall limit), held the "
                                           "same way: GRPOTrainerStalled",
    "run_id:grpo_judged:no_first_step_progress": "the progress of a run judged hung before its first step, held the "
                                                 "same way: GRPONoFirstStep",
    "grpo:collector:up": "1 while a collector seen is up (one replica of several is enough), 0 while none is (none "
                         "scraped, none with a target at all, or none scraped within `liveness_slack`: an `up` "
                         "from before a restart of Prometheus, of a collector gone meanwhile)",
}


def _block(name: str) -> str:
    """What a record holds: `BLOCKS`, or a remembered series' last value (`_memory.remembered`)."""
    if name in BLOCKS:
        return BLOCKS[name]
    if name.endswith(":increase"):
        return (f"each series' increase of `{name.removeprefix('series:').removesuffix(':increase')}` within "
                "`counter_window`; its whole count where its process started within it")
    metric = name.removeprefix("series:").removesuffix(":last")
    return (f"each series' last value of `{metric}` within `absent_window` (a count: `counter_lookback`), from "
            "minutes of its samples or the `grpo-memory` group's record of it; the rules read it as it was "
            "before this evaluation where it is their own")


def _building_blocks(s: RuleSettings) -> list[str]:
    """The records the alerts read (directly or through other records), in evaluation order, each with the
    alerts that read it."""
    rules = [r for doc in (recording_rules(s), alert_rules(s)) for r in doc["groups"][0]["rules"] if "record" in r]
    read = [reads(r["expr"], rules) for r in rules]
    readers: dict[str, set[str]] = {}
    for a in alerts(s):
        seen, todo = set(), list(rule_reads(a, rules))
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                readers.setdefault(rules[i]["record"], set()).add(a["alert"])
                todo += read[i]
    rows = [f"| `{name}` | {_block(name)} | {', '.join(sorted(readers[name]))} |"
            for name in dict.fromkeys(r["record"] for r in rules) if name in readers]
    return ["| record | holds, by run | read by |", "| --- | --- | --- |"] + rows


def _fmt_s(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _limits(s: RuleSettings) -> list[str]:
    """The model's known limits, one bullet each (a limit that a change removes is one item to drop)."""
    step = 60
    stall = max(s.stall_factor * step, seconds(s.stall_floor))
    return [
        "- Warnings go to one `notify` receiver, named once in `alertmanager/routing.yml` for every run and the",
        "  stack's own warnings alike: the generated Alertmanager config routes by severity, not per run owner or",
        "  team (docs/operations.md, \"Routing, receivers and inhibitions\", says how to name that receiver).",
        f"- A step that takes longer than `stall_factor` ({s.stall_factor:g}) times the longest step or log interval",
        f"  of its process's last `recent_window` ({s.recent_window}), and at least `stall_floor` ({s.stall_floor}),",
        f"  pages GRPOTrainerStalled as a hang while it runs: with steps of {_fmt_s(step)}, a step still running",
        f"  {_fmt_s(stall)} in pages (after the next evaluation and group_wait). A loop whose steps can grow that much",
        "  beats inside them: `Telemetry.heartbeat()` (per rollout or generation batch) or",
        "  `Telemetry.beat_while_writing(path)` around a save (docs/usage.md); a step that beats is work, not a hang.",
        "- One run id run by two live processes at once (two jobs started with the same `--run-id` or",
        "  `OTEL_GRPO_RUN_ID`) is one run to the rules, which judge its latest process: the newer one's crash and hang page",
        "  (the grid's concurrent-id-newer-crash and concurrent-id-newer-hang), the older one's do not, and its",
        "  signals mix with the newer one's on the dashboards. A run id must be unique per live process; a relaunch or",
        "  resume under it after the earlier process ended is judged as above.",
        f"- A run's end (`grpo_run_finished` = 1, `grpo_run_preempted` = 1) waits at most {END_WAIT_S:g} s (`END_WAIT_S`,",
        "  the telemetry's `prometheus_linger_s`) to reach Prometheus: a collector that took the run's exports within",
        f"  {END_GONE_AFTER_S:g} s (and two export intervals) of the end and restarts within the wait takes the last",
        "  export (the grid's finish-in-collector-restart); one down longer or gone before, a Prometheus that stopped",
        "  scraping, or a collector behind a proxy (the proxy is all the run can see), leaves the run's last values,",
        "  and GRPOMetricsAbsent pages a crash. The run's log says so in one warning (`the run's end did not reach",
        "  Prometheus`).",
        "- With several ranks only rank 0 exports the run's liveness; a crash of another rank reaches it as the",
        "  launcher's SIGTERM, the signal a preemption sends. Every rank writes how its run ended into the job's",
        "  store (the process group's), and on SIGTERM looks at its host's ranks, so the run ends as crashed",
        "  (GRPOMetricsAbsent pages) where another rank raised (CUDA out of memory) or one of rank 0's host was",
        "  killed (SIGKILL: the kernel's OOM killer). Every rank must make its Telemetry (`instrument` does); a",
        "  rank joins once its process group is up and its Telemetry made. Still reported as preempted",
        "  (GRPORunPreempted, warning): a rank that fails before it joins (loading the model), a rank of another",
        "  host killed outright unless a rank of its host handled the launcher's SIGTERM before rank 0 did, and",
        "  any rank's fall where the store does not answer within 2 s. A rank blocked in a collective handles",
        "  SIGTERM only when it returns (or is killed by the launcher's SIGKILL).",
        "- The rules read records their group wrote earlier in the same evaluation, and the run-end alerts read",
        "  only what that evaluation wrote (a record left from before a restart of Prometheus is not marked stale):",
        "  they are written for Prometheus's own rule evaluation (a Prometheus server, the Operator's included).",
        "  A ruler that writes its records to remote storage and reads them back (Thanos Ruler, Grafana Mimir's or",
        "  Cortex's) may not see a record of the same evaluation yet: untested there.",
        "- Other alerts than the run-end ones read their records as Prometheus does: after a restart of it that",
        "  kept its storage, a breach it recorded before and no longer does (KL back under its bound while it was",
        "  down) can keep its alert firing, or a record that withholds one (GRPOKLHigh's streak) hold it back, for",
        "  up to its lookback delta (5 minutes) after its last evaluation before the restart.",
    ]


def render_alerts_md() -> str:
    s = RuleSettings()
    lines = [
        "# The alert model",
        "",
        "Generated by `otel-grpo dashboards` from the rules (`otel_grpo/generate`), the routing classes",
        "(`alertmanager/routing.yml`) and the failure modes of the scenario grid (`otel_grpo/generate/_grid.py`);",
        "`tests/stack/test_alert_grid.py` checks every failure mode on every grid case, and `benchmarks/alerts.py`",
        "prints the measured latencies (`benchmarks/README.md`). Runbooks: [operations.md](operations.md).",
        "The grid's judge delivers what fires as the committed Alertmanager config routes, groups and",
        "inhibits it (`otel_grpo/generate/_delivery.py`); a sample of the grid's runs, one of every mode, also",
        "goes through a real Alertmanager on that config (every alert promtool fired for them, in order, side",
        "by side in compressed time), which sends exactly what the judge says, inhibited alerts included.",
        "",
        "## The promise",
        "",
        "A healthy run notifies nobody. A failing run notifies nobody before the failure, and the alert",
        "of its failure mode reaches its receiver within **max(3 step intervals, 5 minutes)** of the onset",
        "(Alertmanager's group_wait included: an alert counts at the flush that finds it firing and not",
        "inhibited, as the committed routing and inhibitions deliver it), at any step time from 2 s to 30 min,",
        "scrape interval from 15 to 60 s, over the pull endpoint or OTLP through the collector (export every",
        "10 to 60 s, the collector's 2-minute metric_expiration), with a start-up and first step that end within",
        "30 min together, evaluations and",
        "saves up to an hour between steps, relaunches (one with steps 10 times faster than the process before it),",
        "resumes, a run id reused by a later process, outages of the collector or of",
        "one of its replicas, and a run's exports moving from one replica to another. A step",
        "interval is the time between two reported steps: `logging_steps` steps for a trainer that",
        "reports every N. The onset of a hang is when its next step was due.",
        "",
        f"A process with no step yet is judged by `first_step_floor` ({s.first_step_floor}) alone: nothing tells a",
        "slow start from a hang before the first step ends. A run whose start-up and first step take longer (a",
        "10-minute start-up before 30-minute steps) pages GRPONoFirstStep unless its loop beats meanwhile",
        "(`Telemetry.heartbeat`, from its own code between the first step's phases) or the rule settings give it",
        "its own floor (`overrides`).",
        "",
        "Where the bound is longer, and why:",
        "",
    ]
    for mode in MODES:
        if mode.why:
            lines.append(f"- **{mode.name}** ({mode.expect}): {mode.why}")
    lines += [
        f"- A hang within `recent_window` ({s.recent_window}) of a step longer than a third of that hang's bound",
        "  (a first step that compiles, a slow evaluation that does not beat) pages up to 3 times that step",
        "  after its onset: the run's own longest healthy step in that window sets its limit, and so does a",
        "  process's last slower step after it sped up (hang-after-slow-first-step: a 10-minute first step, a",
        "  hang 45 min on; hang-after-speed-up: steps 10 times faster after an hour, a hang 35 to 60 min on). A",
        "  relaunch under the run id is judged by its own steps alone (hang-after-faster-relaunch).",
        "- Trend alerts (GRPOKLJump, a relative GRPOEntropyCollapse, GRPORewardCollapse, GRPOThroughputDrop)",
        f"  judge a process's steps against its own earlier ones from its {_TREND.min_steps + 1}th judged step on",
        f"  ({_TREND.min_steps} to {_TREND.steps} earlier steps, a streak's own steps left out), and the gradient-norm",
        f"  spike from its {_GRAD.min_steps + 1}th: a trend needs a history, counted in steps whatever the step time",
        "  (the grid's trend failures start at step 12). The absolute checks (KL, IS, clipping, zero-std groups,",
        "  entropy below its floor, non-finite values, hangs, crashes) have no warm-up.",
        "- A Prometheus that restarts without its storage (an emptyDir, kube-prometheus-stack's default) sees each",
        "  run first mid-run. Every judgement reads what the process exports now (its start, last step, heartbeat,",
        "  promise and clock; the trainer's streaks and baselines), so a healthy run notifies nobody and a crash,",
        "  hang or threshold breach after the restart pages within the usual bound (the grid's `*-after-lost-storage`",
        "  modes, 3 hours into a run). The counters it shows then count what the process did before (a NaN, a",
        "  skipped update, a KL streak an hour ago: lost-storage-after-alerts) and notify nobody again",
        "  (`run_id:grpo_process:watched`). A page after the restart is an increase of a series Prometheus saw at",
        "  0: the trainer exports the counters that page at 0 from its start (skipped steps, the non-finite counts",
        "  of loss and grad_norm) and the step evidence from a scalar's first step, so a NaN loss soon after the",
        "  restart pages in the usual time (nan-loss-after-lost-storage). The price: another signal's first",
        f"  non-finite value (a warning) within `counter_window` ({s.counter_window}) of such a restart notifies once",
        "  that window has passed since the restart, and an event counted while Prometheus was down (before its",
        "  first scrape) never does.",
        "- A Prometheus that restarts with its storage neither scrapes nor evaluates while it is down, and its",
        "  first evaluation back may come before its first scrape (service discovery's first update): every run",
        "  would look overdue until then. Its evaluations resumed after a pause longer than `liveness_slack`, and",
        "  evaluations while no target has been scraped within it, count as a path just back: no run is judged",
        f"  absent until `path_settle` ({s.path_settle}) after its first scrape, so a healthy run notifies nobody,",
        "  and a crash while it was down or just after pages within `path_settle`, `for_fast` and group_wait of",
        "  that scrape. A record Prometheus wrote before the restart and not since is no stale series to it and",
        "  reads at its last value for 5 minutes (its lookback delta): the run-end alerts read their judgement",
        "  and the run's end as this evaluation wrote them, so a run judged crashed before the restart and",
        "  relaunched while Prometheus was down pages nobody. Other failures meanwhile page within their usual",
        "  bound of the restart. promtool",
        "  cannot pause its evaluations, so the grid has no such restart: `tests/stack/test_prometheus_restart.py`",
        "  restarts the local stack's real Prometheus under a real trainer.",
        "",
        "What the promise does not cover:",
        "",
        *_limits(s),
        "",
        "## Receivers",
        "",
        "| class | severity | receives |",
        "| --- | --- | --- |",
        "| page | critical | the on-call receiver `routing.yml` names (`page`); every alert also reaches the sidecar |",
        "| notify | warning | one receiver (`notify`: a webhook or chat channel) for every run's warnings and the "
        "stack's: not per run owner |",
        "| record | anything else | the sidecar only (the run explorer's alert marks) |",
        "| deadman | GRPOWatchdog | a dead man's switch (`deadman`): silence means alerting is broken or notifications "
        "fail (GRPOAlertDeliveryFailing) |",
        "",
        "Until an operator names a destination in `alertmanager/routing.yml` every class reaches the",
        "sidecar only: no alert text leaves the host. Inhibitions pair alerts of one run only",
        "(`equal: [run_id]`), and only where the critical alert's cause explains the other:",
        "",
        *(f"- {cause} (critical) silences {', '.join(symptoms)}" for cause, symptoms in EXPLAINS.items()),
        *(f"- {cause}'s condition holds back {', '.join(symptoms)} in their rules" for cause, symptoms in WITHHELD.items()),
        "",
        "\"Explains\" means the cause holds now or held within `counter_window` (10 minutes: its rule's own",
        "record of a streak, which a scrape between fast steps may miss). An alert that keeps firing after its",
        "condition ended (`keep_firing_for`: GRPOKLHigh, an hour) is no inhibition source: a KL jump 30 minutes",
        "after KL came back below its threshold is a new cause, and the page still firing would hide it for that",
        "hour. The rules of its symptoms leave out the runs where its condition holds instead (`unless on",
        "(run_id)`); one whose own condition outlasts the cause's then fires, as its own, up to `counter_window`",
        "after the cause's last streak (`prometheus/tests/scenarios.yml`).",
        "",
        "A critical alert does not silence its run's other warnings: the page reaches whoever is on call,",
        "the warning `notify`, and a page can fire for long (a NaN's for `counter_window`, GRPOKLHigh",
        "while KL stays high), so a warning of another cause would reach nobody until it ends",
        "(nan-loss-then-is-drift: IS weights that degenerate after a NaN loss notify within the usual bound).",
        "No infrastructure alert inhibits a run's: while the collector is down (every",
        "replica seen; one replica of several down is on no run's path once its runs export to the others)",
        "the run-end rules do not judge absence anew (GRPOCollectorDown pages once for all runs; a collector",
        "seen that has no target at all, its pod gone and none back yet, is down too: one removed for good is",
        "down for `history_window` after its last scrape, so remove a collector while no run uses it, or",
        "expect GRPOCollectorDown and no absence judged that long). A run judged crashed,",
        "preempted or hung before stays so through the outage, which hides it: its page is neither resolved",
        "nor sent again (the grid's `*-then-outage` modes), until the run is heard to come back. Each failed scrape",
        "of the collector suspends that judgement for `path_settle`, so scrapes that keep failing now and then",
        "(a timeout under load, a collector that restarts in seconds, again and again) suspend it for good",
        "without the continuous failure GRPOCollectorDown needs: GRPOCrashDetectionSuspended pages once for all",
        "runs when the suspension has lasted three times `path_settle` and a minute while the collector kept",
        "coming back (`prometheus/tests/scenarios.yml`: one scrape in eight failing pages; one outage, long or",
        "short, does not).",
        "",
        "## Several collector replicas",
        "",
        "A run's exports can move to another replica (a reconnect that the Service balances to another pod;",
        "the chart's Service keeps a client on one pod while it is ready, `sessionAffinity: ClientIP`, so this",
        "is a rare event, not every reconnect). The first replica then still serves the run's last values until",
        "its metric_expiration, and each replica's scrape adds its own target labels (the ServiceMonitor's",
        "`pod`): for that while the run has two copies of each series. The rules read every series by run",
        "(largest step, latest promise, smallest clock lag), and count each event counter once per process",
        "(`process:*` records: the largest of its copies), so an old NaN, skipped step or KL spike is not",
        "new again under the other replica, and a count that rose between the last export to one replica and",
        "the first to the other still pages (`prometheus/tests/scenarios.yml`; the grid's moved-replica,",
        "crash-after-move and hang-after-move). A Prometheus that scrapes several replicas with",
        "`honor_labels` and no label of each target's own writes both copies into one series: with two real",
        "collectors no alert fired falsely and a crash paged as through one, but for that while gauges and the",
        "step index alternate between old and fresh values, counter rates read several times too high and the",
        "liveness promise can look overdue (GRPOMetricsAbsent pending, not firing); give each replica's target",
        "a label of its own, as the ServiceMonitor does. docs/operations.md, \"Several collector replicas\",",
        "says what only a real cluster shows.",
        "",
        "## Failure modes",
        "",
        "Every alert of the rules has a row, with each severity it fires at and the class (receiver) the committed",
        "routing sends it to: `critical` pages, `warning` notifies, the Watchdog goes to `deadman` (\"Receivers\").",
        "An alert that no failure mode of the grid expects (a threshold the grid does not break, the stack's own",
        "health) has \"—\" for failure modes: `prometheus/tests/grpo_alerts_test.yml` tests it with promtool.",
        "",
    ]
    lines += failure_modes(s)
    lines += [
        "",
        "Healthy variants in the grid, none of which may notify: "
        + ", ".join(m.name for m in MODES if m.expect is None) + ".",
        "",
        "## Building blocks",
        "",
        "Each alert reads a few named recording rules (the kubernetes-mixin style), so its expression stays",
        "short: `tests/stack/test_rules.py` keeps every alert expression, and every record with the default",
        "settings, at 300 characters or fewer. No record holds a baseline: the trend checks' baselines are",
        "the training process's (`otel_grpo.catalog.Baseline`). The records are in the alert group",
        "(`grpo_alerts.yml`), each before the rules that read it: Prometheus evaluates a group's rules in order",
        "at one timestamp, each seeing what the ones before it wrote, so a record adds no evaluation interval",
        "of latency (the grid's verdicts, latencies included, are the same as with the expressions inlined).",
        "",
        "What a record needs of a process for a day after it stopped (its last promise, start, end markers,",
        "clock offset; a counter's last value) it reads through the `grpo-memory` group, in the same file:",
        f"every `memory_interval` ({s.memory_interval}) it records each such series' last value within the day",
        "(`<name>:last_1d`), and the alert group reads minutes of the series itself and of those records only",
        "(`otel_grpo/generate/_memory.py`): the value found is the series' last, or none while the memory group",
        "has not evaluated for three of its intervals (after a restart of Prometheus), never an older one.",
        "The grid evaluates it at its own interval too.",
        "",
        *_building_blocks(s),
        "",
        "## Settings the bounds rest on",
        "",
        "| setting | default | role |",
        "| --- | --- | --- |",
        f"| `liveness_slack` | {s.liveness_slack} | how far past its promise a process may be heard from: a 60-s scrape and the delivery lag |",
        f"| `clock_window` | {s.clock_window} | how far back a process's clock offset is taken: longer than the collector's metric_expiration and the slack |",
        f"| `path_settle` | {s.path_settle} | after the collector (every replica) was down, how long no run is judged absent |",
        f"| `recent_window` | {s.recent_window} | a run's step interval: its latest process's longest step or log interval within it (the longest halving of it that the process has run, less `path_settle`) |",
        f"| `history_window` | {s.history_window} | how long a collector or sidecar target once seen is remembered while it is down |",
        f"| `stall_factor`, `stall_floor` | {s.stall_factor:g}, {s.stall_floor} | a hang: idle longer than this many step intervals, and the floor (above an export interval and a scrape) |",
        f"| `first_step_floor` | {s.first_step_floor} | a hang before the first step: longer than the longest healthy start-up |",
        f"| `kl_steps`, `drift_steps` | {s.kl_steps}, {s.drift_steps} | consecutive steps the threshold and trend alerts need |",
        f"| `keep_firing_for` | {s.keep_firing_for} | how long a threshold or trend alert keeps firing after its condition last held: one that keeps coming back is one notification |",
        f"| `for_fast` | {s.for_fast} | GRPOMetricsAbsent and GRPORunPreempted wait this long (one failed scrape is no crash) |",
        "",
        "A process's liveness promise and its progress are its own timestamps, judged on Prometheus's clock: each",
        "collection also exports the process's clock (`grpo_process_clock_seconds`), Prometheus stamps every sample",
        "with its own scrape time (the collector's Prometheus exporter and the pull endpoint send none), and the",
        f"smallest difference of the two over `clock_window` ({s.clock_window}) is the process's offset, added to each",
        "time it exports before any is compared with `time()`. So a trainer clock minutes ahead or behind pages as",
        f"one that agrees (the grid's clock modes: {_fmt_s(CLOCK_SKEW_S)} either way). The offset includes the",
        "window's shortest delivery lag (a collection waits in the collector until the next scrape): it only makes",
        "a process look later, so where exports and scrapes keep one phase a crash or hang may page up to a scrape",
        "interval later than on an exact clock. The trainer's clock does not step: the telemetry reads the wall",
        "clock once per process and advances it by the monotonic clock (`otel_grpo/telemetry/_clock.py`), so NTP or",
        "an operator stepping the host's wall clock mid-run moves no time the process exports and its offset holds",
        "(tests/stack/test_skewed_clock.py steps a real trainer's 10 minutes back). Its rate is the monotonic clock's,",
        "which NTP corrects as it does the wall clock's; a host without NTP drifts by its oscillator's error, seconds",
        "a day, which the offset follows within `clock_window`. A new process on a target whose start changed within",
        "`clock_window` is judged by its smallest lag since that start until then (not its latest: a collector serves",
        "a dead process's clock until it expires, its lag growing): never early, at worst an export interval and a",
        "scrape late.",
        "",
        "Every alert of a run carries the run's offset as its `clock_offset_seconds` annotation (`%.3f`, read from",
        "`run_id:grpo_process:clock_offset_seconds` when the rule is evaluated; empty for a run that exports no",
        "clock). The sidecar takes an alert's `startsAt` (Prometheus's clock) minus it to find the step the alert",
        "belongs to among the run's step times (the trainer's clock): the last step ended at or before the alert",
        "started. An alert without it (rules older than the annotation), or with one that is no clock's offset (not a",
        "number, or beyond 100 years either way: `MAX_CLOCK_OFFSET_S`), is placed as if the clocks agreed.",
        "",
        "Tested beyond the grid's simulated series with a real trainer process whose wall clock libfaketime puts",
        f"{_fmt_s(CLOCK_SKEW_S)} behind or ahead (its monotonic and boot clocks left real, as on such a host), scraped by the",
        "local stack's real Prometheus under local mode's rules, the runs' hang floors their own",
        "(`tests/stack/test_skewed_clock.py`): behind and",
        "stepping, no run-end alert for longer than its first-step, stall and liveness limits, then killed,",
        "GRPOMetricsAbsent within `liveness_slack` and `for_fast`; ahead and hung after a step, GRPOTrainerStalled",
        "at `stall_floor`. The OTLP path through a collector has the grid alone: with a collector `clock_window`",
        "must outlast its metric_expiration, so local mode's seconds do not apply, and compose's windows make a",
        "case minutes long.",
        "",
        "## The grid",
        "",
        f"Step times {', '.join(_fmt_s(x) for x in STEP_TIMES)}; scrape intervals "
        f"{', '.join(_fmt_s(x) for x in SCRAPES)}; paths: pull, "
        + ", ".join(f"OTLP every {_fmt_s(e)}" for e, _ in PATHS if e) + "; start-ups "
        + ", ".join(_fmt_s(x) for x in STARTUPS) + ". The series each case exports are those the trainer, the",
        "collector and the pull endpoint export (`otel_grpo/generate/_replay.py`: one timeline per process,",
        "the collector's expiry and restarts, the endpoint's linger after a clean end). The grid evaluates",
        "the rules every 60 s (its hundreds of run-hours fit the test budget; a latency is measured up to 45 s",
        "late, except crash-in-outage's, up to 45 s early: its settling counts from the last evaluation that saw",
        "the collector down); `benchmarks/alerts.py --evaluation-interval 15s` runs it as compose evaluates, and",
        "the hand-written scenarios of `prometheus/tests/scenarios.yml` run at 15 s.",
        "",
    ]
    return "\n".join(lines)


__all__ = ["render_alerts_md"]
