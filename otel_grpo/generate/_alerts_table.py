"""docs/alerts.md's "Failure modes" table: one row per alert the rules define, with the grid's failure modes that
expect it, each severity it fires at and its class (receiver), what it reads and why that survives."""

from __future__ import annotations

import re

from ._alerts import alerts
from ._grid import MODES
from ._routing import class_of
from ._rules import RuleSettings

# What each alert reads, and why that evidence survives what a scrape-based view loses.
EVIDENCE = {
    "GRPOMetricsAbsent": ("the latest process's `grpo_process_alive_until` (each collection: its time plus the "
                          "export interval) and end markers", "the trainer's times on Prometheus's clock "
                          "(`grpo_process_clock_seconds` gives its offset): a collector's expiry, scrape gaps and "
                          "export lag only add up to `liveness_slack`; the promise and the markers (0 from each "
                          "process's start) are read in the latest process's series only (its `job`, `instance`), so "
                          "a reused run id, at another world size or service name too, or a resume is running again, "
                          "and an older process still running under the id keeps no newer one alive; not judged "
                          "while every collector replica is down or one is settling"),
    "GRPORunPreempted": ("as GRPOMetricsAbsent, with `grpo_run_preempted` = 1", "as GRPOMetricsAbsent"),
    "GRPOTrainerStalled": ("`time()` minus the later of the latest process's start, `grpo_step_end_time_seconds` "
                           "and `grpo_process_activity_time_seconds`, against 3x the longest step or log "
                           "interval of its latest process within `recent_window` (at least `stall_floor`)",
                           "the trainer's times on Prometheus's clock, exact whatever the scrape or export interval; "
                           "start-up and pauses that beat are no interval; only live runs (alive within the slack)"),
    "GRPONoFirstStep": ("as GRPOTrainerStalled, for a process whose last step ended before it started (none yet), "
                        "against `first_step_floor`", "as GRPOTrainerStalled"),
    "GRPOKLHigh": ("`grpo_step_beyond_total{signal=\"kl\", streak=\"3\"}`: the trainer counts every step",
                   "a counter: every step is counted between scrapes; a new process counts in series of its own"),
    "GRPOKLSpike": ("`grpo_step_beyond_total{signal=\"kl\", streak=\"1\"}`", "as GRPOKLHigh"),
    "GRPOKLJump": ("step evidence of `kl_jump`: each step's KL in robust standard deviations above the median of "
                   "the run's own recent steps (and twice their 90th percentile), 3 consecutive steps",
                   "as GRPOKLHigh; the baseline is the process's own steps, counted in steps: a resume starts a new one"),
    "GRPORolloutISDrift": ("step evidence of the ESS and chi-square checks, 3 consecutive steps", "as GRPOKLHigh"),
    "GRPOEntropyCollapse": ("step evidence of `entropy` below 0.01, or `entropy_collapse`: below 25% of its mean "
                            "over the run's recent steps, 3 consecutive steps", "as GRPOKLJump"),
    "GRPORewardCollapse": ("step evidence of `reward_collapse`: the reward mean 3 standard deviations of its step-to-step "
                           "noise (and 0.1) below its mean over the run's recent steps, 3 consecutive steps", "as GRPOKLJump"),
    "GRPOThroughputDrop": ("step evidence of `throughput_drop`: tokens per second below half their mean over the "
                           "run's recent steps, 3 consecutive steps", "as GRPOKLJump"),
    "GRPONoLearningSignal": ("step evidence of `frac_reward_zero_std`, 3 consecutive steps", "as GRPOKLHigh"),
    "GRPOGradNormSpike": ("step evidence: a step's gradient norm over 10x the median of the previous 100",
                          "as GRPOKLHigh"),
    "GRPONonFiniteValues": ("`grpo_nonfinite_total` (non-finite values are counted, never exported)",
                            "a counter, per process: a resume's first NaN is a new series; the counts a "
                            "Prometheus that lost its storage first sees mid-run are old: their increases count"),
    "GRPOStepsSkipped": ("`grpo_skipped_steps_total`: the loop counts each update it skipped",
                         "as GRPONonFiniteValues"),
    "GRPOCollectorDown": ("`up` of each target that served the collector's own metrics (`otelcol_process_uptime*`; "
                          "`job_instance:collector:seen` remembers it for `history_window`)",
                          "a target, not a run: whatever its `job` is called, each replica alone; while every replica "
                          "is down no run is judged absent"),
    "GRPOSidecarDown": ("`up` of each target that served the sidecar's own metrics "
                        "(`otel_grpo_sidecar_spans_ingested_total`; `job_instance:sidecar:seen`)",
                        "as GRPOCollectorDown"),
    "GRPOCrashDetectionSuspended": ("`grpo:collector:up` and `grpo:collector_down:last_time`: the collector keeps "
                                    "coming back while failed scrapes keep the run-end judgement suspended",
                                    "one alert for all runs, whatever the collector's `job`"),
    "GRPOCollectorRefusing": ("increases of `otelcol_receiver_refused_metric_points_total` and "
                              "`otelcol_receiver_refused_spans_total` within `counter_window`",
                              "a counter per series: a failed scrape raises nothing; a process started within "
                              "`counter_window` counts its whole count"),
    "GRPOCollectorExportFailing": ("increases of `otelcol_exporter_send_failed_spans_total` and "
                                   "`otelcol_exporter_send_failed_metric_points_total` (data given up on, retries "
                                   "that succeed not counted)", "as GRPOCollectorRefusing"),
    "GRPOCollectorQueueFull": ("`otelcol_exporter_queue_size` near `otelcol_exporter_queue_capacity`, or an increase "
                               "of `otelcol_exporter_enqueue_failed_spans_total`", "as GRPOCollectorRefusing"),
    "GRPOSidecarRejecting": ("increases of `otel_grpo_sidecar_requests_rejected_total`, by reason",
                             "as GRPOCollectorRefusing"),
    "GRPOAlertDeliveryFailing": ("`instance:alert_notifications_failed:increase`: notifications Alertmanager gave "
                                 "up on (`alertmanager_notifications_failed_total`) and alerts every Alertmanager "
                                 "missed (`prometheus_notifications_dropped_total`)",
                                 "as GRPOCollectorRefusing, whatever Alertmanager's and Prometheus's `job`"),
    "GRPOWatchdog": ("`vector(1)`: firing always, unless notifications fail "
                     "(`instance:alert_notifications_failed:increase`)",
                     "its silence at the dead man's switch is the signal: rules, Prometheus, Alertmanager or a "
                     "receiver broken"),
}
_STEP_EVIDENCE = re.compile(r'grpo_step_check:beyond\{signal=~?"([^"]+)", streak="([0-9]+)"\}')


def _evidence(rule: dict) -> tuple[str, str]:
    """What an alert reads and why that survives: `EVIDENCE`, else the trainer's step checks its expression
    selects, else the expression itself (a new alert has a row before anyone describes it)."""
    if rule["alert"] in EVIDENCE:
        return EVIDENCE[rule["alert"]]
    if m := _STEP_EVIDENCE.search(rule["expr"]):
        streak = int(m.group(2))
        steps = f"{streak} consecutive steps" if streak > 1 else "a single step"
        return f"step evidence of {' or '.join(f'`{c}`' for c in m.group(1).split('|'))}, {steps}", "as GRPOKLHigh"
    expr = rule["expr"].replace("|", "\\|")  # a table cell: an escaped pipe
    return f"its expression: `{expr}`", "—"


def failure_modes(s: RuleSettings) -> list[str]:
    """One row per alert the rules define: those the grid's failure modes expect first, in the grid's order, then
    every other in the rules' order, its failure modes "—"; each with its severities and the class the routing
    sends each to (`class_of`)."""
    by_name: dict[str, list[dict]] = {}
    for r in alerts(s):
        by_name.setdefault(r["alert"], []).append(r)
    modes: dict[str, list[str]] = {}
    for mode in MODES:
        if mode.expect is not None:
            modes.setdefault(mode.expect, []).append(mode.name)
    rows = []
    for name in [*modes, *(n for n in by_name if n not in modes)]:
        evidence, survives = _evidence(by_name[name][0])
        severities = dict.fromkeys(r["labels"]["severity"] for r in by_name[name])
        classes = ", ".join(f"{sev} ({class_of({'alertname': name, 'severity': sev})})" for sev in severities)
        rows.append(f"| {name} | {', '.join(modes.get(name, [])) or '—'} | {classes} | {evidence} | {survives} |")
    return ["| alert | failure modes | severity (class) | evidence | survives |", "| --- | --- | --- | --- | --- |",
            *rows]


__all__ = ["EVIDENCE", "failure_modes"]
