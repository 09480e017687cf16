"""The alert rule group: drift, training, health and stack alerts, step-aware where it matters.

Three building blocks make the alerts hold on real runs (docs/operations.md):

- *Step evidence* for thresholds and trends: the training process counts, on every
  step, the consecutive steps each checked scalar has been beyond each bound
  (`_evidence.py`): "KL over 1 for 3 steps" is 3 consecutive steps, whatever the
  step duration and scrape interval, and a step below the threshold resets it. A
  trend (KL jump, reward or entropy collapse, throughput drop) is such a check of a
  statistic against the run's own recent steps (`otel_grpo.catalog.Baseline`).
- *Run ends* (`_run_end.py`): crashes, hangs and preemptions from the times each process exports,
  moved onto Prometheus's clock by the process's own clock offset.
- *Increases* of counters, with a series that is new (unseen for
  `counter_lookback`) counting by its value: a failed scrape or an outage
  raises nothing, since the series' last value before the gap is still found.

Every building block is a small named recording rule of the alert group, listed before the
rules that read it: Prometheus evaluates a group's rules in order at one timestamp, each
seeing the samples the ones before it wrote, so a record adds no evaluation interval of latency.
"""

from __future__ import annotations

from otel_grpo import catalog

from ._alerts_base import RUN as _RUN, STEP as _STEP, VAL as _VAL, alert as _alert
from ._evidence import HELD, at_step, counted, counter_rules, evidence_rules, held, held_uses
from ._memory import last_record, memory_group, remembered
from ._rules import NONFINITE, SKIPPED, STEP_INDEX, STEP_MAX, STEP_THRESHOLDS, RuleSettings, prometheus_name, seconds
from ._run_end import (clock_offset_annotation, newest_value_rules, remembered_rules, run_end_alerts, run_end_rules,
                       suspended_alert, watched_rule)
from .dashboards import STACK_COLLECTOR, STACK_SIDECAR, STACK_TARGETS

BETA = prometheus_name("beta")
BETA_LAST = f"run_id:{BETA}:last"
# Targets are told by what they serve, never by `job` (the Prometheus Operator names jobs after
# namespace/service): a self-referencing record remembers every target that served a collector's
# (sidecar's) own metrics, so it is known while it is down.
SEEN = {"collector": '{__name__=~"otelcol_process_uptime.*"}', "sidecar": "otel_grpo_sidecar_spans_ingested_total"}
_BEYOND = "{{ $labels.signal }} beyond {{ $labels.bound }}"
_TREND_STEPS = catalog.TREND["steps"]
_GRAD = catalog.STEP_CHECKS["grad_norm"].baseline


def _run_rules(s: RuleSettings) -> list[dict]:
    """What every check reads of a run now: its step, and each process's last beta within `absent_window` (a
    step that logs none keeps it, `_kl_on`; the run's is its newest process's, `BETA_LAST` after the clocks)."""
    return [{"record": STEP_MAX, "expr": f"max by (run_id) ({STEP_INDEX})"}, remembered(s, BETA, s.absent_window)]


def _kl_on(s: RuleSettings) -> str:
    """beta = 0: KL is not optimised, so no KL alert. The last beta within `absent_window` of the run's newest
    process that logged one: a step that logs none (a failed batch, a run that logs it once) has no beta gauge, and
    its KL alerts stay off; a relaunch's beta, not the largest of the run's processes' (`newest_value_rules`)."""
    return f"unless on (run_id) {BETA_LAST} == 0"


WITHHELD = {
    # KL above its threshold for `kl_steps` steps: a step above it and a jump up to it are that same KL.
    "GRPOKLHigh": ("GRPOKLSpike", "GRPOKLJump"),
}
"""Critical alert -> the warnings of its run that its cause explains: they do not fire while its condition holds
(its rule's record: a streak now or within `counter_window`, which a scrape between fast steps may miss).

Not an Alertmanager inhibition: the critical alert keeps firing for `keep_firing_for` after its condition last held,
and an inhibition would hide, for that hour, a warning of a new cause (a KL jump 30 minutes after KL came back
below its threshold). A warning held back this way fires once the cause's condition ends if its own still holds:
its cause is then no longer the critical one's."""


def _explained(s: RuleSettings, name: str) -> str:
    """`unless` the run's condition of the critical alert that explains `name` (`WITHHELD`), or nothing."""
    # Each cause's condition, as its own rule reads it (`held`, one series per run: no `max` needed by `on (run_id)`).
    condition = {"GRPOKLHigh": f'{HELD}{{signal="{STEP_THRESHOLDS["kl_threshold"]}", streak="{s.kl_steps}"}}'}
    return "".join(f" unless on (run_id) {condition[c]}" for c, symptoms in WITHHELD.items() if name in symptoms)


def _evidence_alert(s: RuleSettings, name: str, fields: tuple[str, ...], steps: int, severity: str, summary: str,
                    description: str, panel: str, kl: bool = False) -> dict:
    """A threshold alert on the trainer's step evidence: `steps` consecutive steps beyond the run's threshold."""
    expr = at_step(held(fields, steps)) + (f" {_kl_on(s)}" if kl else "") + _explained(s, name)
    run = f" for {steps}+ consecutive steps" if steps > 1 else ""
    rule = _alert(s, name, expr, "0s", severity, f"{summary}{run} in {_RUN} (step {_STEP})", description, panel)
    # A condition that keeps coming back is one alert: each return would be a new one, notified again.
    return {**rule, "keep_firing_for": s.keep_firing_for}


# ---- alerts ----------------------------------------------------------------------------
def _drift_alerts(s: RuleSettings) -> list[dict]:
    return [
        _evidence_alert(s, "GRPOKLHigh", ("kl_threshold",), s.kl_steps, "critical",
                        "KL to the reference above {{ $labels.bound }}",
                        "The policy has moved far from the reference model: learning rate too high, beta too low, "
                        "or reward hacking.", "KL to the reference", kl=True),
        _evidence_alert(s, "GRPOKLSpike", ("kl_threshold",), 1, "warning",
                        f"A step's KL to the reference exceeded {{{{ $labels.bound }}}} within the last {s.counter_window}",
                        "Single steps exceeded the KL threshold, counted by the trainer on every step "
                        "(grpo_step_beyond_total), so spikes between two scrapes are not lost.",
                        "KL to the reference", kl=True),
        _evidence_alert(s, "GRPOKLJump", ("kl_zscore",), s.kl_steps, "warning",
                        "KL jumped over {{ $labels.bound }} robust standard deviations above its recent median",
                        f"KL rose suddenly against the run's own last {_TREND_STEPS} steps (the jump's own steps left "
                        "out), below the KL threshold itself: a learning-rate or data change, or the start of a "
                        "blow-up.",
                        "KL to the reference", kl=True),
        _evidence_alert(s, "GRPORolloutISDrift", ("ess_min", "chi2_threshold"), s.drift_steps, "warning",
                        f"IS weights degenerate: {_BEYOND}",
                        "Rollout and training policies disagree on token probabilities (effective sample size below, "
                        "or chi-square above, its threshold): weight sync, precision or sampler settings drifted.",
                        "Effective sample size, masked and vetoed fractions"),
        _evidence_alert(s, "GRPORolloutISVeto", ("veto_fraction_threshold", "catastrophic_fraction_threshold"),
                        s.drift_steps, "warning", f"Catastrophic tokens: {_BEYOND}",
                        "Tokens whose IS ratio is beyond the veto bounds: the rollout engine sampled tokens the trained "
                        "policy considers (nearly) impossible.", "Effective sample size, masked and vetoed fractions"),
        _evidence_alert(s, "GRPOMismatchKLHigh", ("mismatch_kl_threshold",), s.drift_steps, "warning",
                        "Rollout-vs-training KL (k3) above {{ $labels.bound }}",
                        "The rollout engine samples from a distribution measurably different from the trained policy.",
                        "Mismatch KL (k3)"),
    ]


def _training_alerts(s: RuleSettings) -> list[dict]:
    return [
        _evidence_alert(s, "GRPOClipRatioHigh", ("clip_ratio_threshold",), s.drift_steps, "warning",
                        "Clipped token fraction above {{ $labels.bound }}",
                        "Updates push the ratio outside the trust region: too many optimizer steps per batch or a "
                        "learning rate too high.", "Clip ratios (low, high, region)"),
        _evidence_alert(s, "GRPORewardCollapse", ("reward_zscore",), s.drift_steps, "critical",
                        "Reward mean fell over {{ $labels.bound }} standard deviations below its recent mean",
                        "Mean reward dropped well below the run's own recent steps: divergence, reward-function bug "
                        "or data change.", "Reward mean, std, min, max"),
        _evidence_alert(s, "GRPOEntropyCollapse", ("entropy_floor", "entropy_fraction"), s.drift_steps, "warning",
                        "Policy entropy collapsed: {{ $labels.signal }} below {{ $labels.bound }}",
                        "The policy became near-deterministic (entropy below its floor, or below a fraction of its "
                        "mean over the run's recent steps): exploration has stopped and group rewards stop varying.",
                        "Entropy"),
        _evidence_alert(s, "GRPOCompletionsClipped", ("completions_clipped_threshold",), s.drift_steps, "warning",
                        "Fraction of completions hitting the length limit above {{ $labels.bound }}",
                        "Completions are truncated without EOS: raise max length or penalize length; rewards on "
                        "truncated text mislead.", "Clipped completions (no EOS)"),
        _evidence_alert(s, "GRPONoLearningSignal", ("zero_std_threshold",), s.drift_steps, "warning",
                        "Fraction of prompt groups with equal rewards above {{ $labels.bound }}",
                        "Groups whose completions all score the same have zero advantage: the step learns nothing from "
                        "them. Tasks too easy or too hard, or a reward function that returns a constant.",
                        "Learning signal: within-group reward std, groups with zero std"),
        # One step is the spike: no streak. The trainer judges every step against its own median.
        _evidence_alert(s, "GRPOGradNormSpike", ("grad_norm_factor",), 1, "warning",
                        "A step's gradient norm exceeded {{ $labels.bound }} times its median over the previous "
                        f"100 steps within the last {s.counter_window}",
                        "A gradient-norm spike usually precedes a loss or KL blow-up: a bad batch, a learning-rate "
                        "jump, or fp16 overflow. The training process compares every step's gradient norm with the "
                        f"median of the run's previous 100 (from its {_GRAD.min_steps + 1}th step on) and counts the spikes "
                        "(grpo_step_beyond_total{signal=\"grad_norm\"}), so a spike between two scrapes is not lost.",
                        "Loss and gradient norm"),
        _evidence_alert(s, "GRPOThroughputDrop", ("throughput_fraction",), s.drift_steps, "warning",
                        "Throughput below {{ $labels.bound }} of its recent mean",
                        "Tokens per second fell against the run's own recent steps: a slower node, thermal throttling, "
                        "longer completions or a contended rollout engine.", "Tokens per second"),
    ]


def _health_alerts(s: RuleSettings) -> list[dict]:
    return [
        # Critical only where the update itself is broken (the loop skips it or applies garbage); a NaN
        # reward of one completion or in a logged diagnostic notifies the owner (docs/operations.md).
        _nonfinite(s, "critical", "=~"),
        _nonfinite(s, "warning", "!~"),
        _alert(s, "GRPOStepsSkipped", counted(SKIPPED, "run_id", s), "0s", "warning",
               f"{_VAL} training steps skipped in {_RUN}",
               "Updates were skipped for a non-finite loss or a failed batch.", "Non-finite values and skipped steps"),
    ] + run_end_alerts(s)


NONFINITE_COUNTED = "run_id_signal:grpo_nonfinite:counted"


def _nonfinite_rule(s: RuleSettings) -> dict:
    """The run's signals with non-finite values counted lately: the building block of both severities."""
    return {"record": NONFINITE_COUNTED, "expr": counted(NONFINITE, "run_id, signal", s)}


def _nonfinite(s: RuleSettings, severity: str, match: str) -> dict:
    """GRPONonFiniteValues of the signals that stop training (`=~`, critical) or of the others (`!~`)."""
    signals = "|".join(catalog.get(k).key for k in catalog.STOPS_TRAINING)
    return _alert(s, "GRPONonFiniteValues", f'{NONFINITE_COUNTED}{{signal{match}"{signals}"}}', "0s", severity,
                  _VAL + " non-finite values of {{ $labels.signal }} in " + _RUN,
                  "NaN or Inf appeared in a training signal; they are counted, not exported. A non-finite loss or "
                  "gradient norm pages (the update is skipped or corrupt); any other signal notifies.",
                  "Non-finite values and skipped steps")


def _seen_rule(s: RuleSettings, component: str) -> dict:
    """The targets that served `component`'s own metrics within `history_window` (read from those metrics, a few
    series: the record read back from itself would renew itself at every evaluation and remember a target for
    good, a collector removed on purpose down for ever)."""
    record = f"job_instance:{component}:seen"
    return {"record": record,
            "expr": f"group by (job, instance) (last_over_time({SEEN[component]}[{s.history_window}]))"}


DELIVERY_FAILED = "instance:alert_notifications_failed:increase"
"""Alert notifications that failed lately: Alertmanager's, after their retries (by integration and reason),
Prometheus's that every Alertmanager it sends to missed. GRPOAlertDeliveryFailing names them; the Watchdog
stops while there are any, so the dead man's switch pages even when the failing receiver is the page one."""
_FAILED = "instance:alertmanager_notifications_failed:increase"
_DROPPED = "instance:prometheus_notifications_dropped:increase"


def _delivery_rules(s: RuleSettings) -> list[dict]:
    return [
        {"record": _FAILED, "expr": f"sum by (instance, integration, reason) ({_increase(_NOTIFY_FAILED)}) > 0"},
        # Named as Alertmanager names its own. Counted per Alertmanager: an alert another replica took is delivered,
        # so only what every one it sends to now dropped is lost (one it no longer sends to, say an old pod's
        # address, keeps a range of zeros for `window`).
        {"record": _DROPPED, "expr": f"label_replace(label_replace(min by (instance) ({_increase(_DROPPED_TOTAL)}"
                                     f' and {_DROPPED_TOTAL}) > 0, "integration", "alertmanager", "", ""),'
                                     ' "reason", "dropped", "", "")'},
        {"record": DELIVERY_FAILED, "expr": f"{_FAILED} or {_DROPPED}"},
    ]


# The stack's event counters the alerts count: each through `_increase`.
_REFUSED_POINTS, _REFUSED_SPANS = "otelcol_receiver_refused_metric_points_total", "otelcol_receiver_refused_spans_total"
_SEND_FAILED_SPANS = "otelcol_exporter_send_failed_spans_total"
_SEND_FAILED_POINTS = "otelcol_exporter_send_failed_metric_points_total"
_ENQUEUE_FAILED = "otelcol_exporter_enqueue_failed_spans_total"
_REJECTED = "otel_grpo_sidecar_requests_rejected_total"
_NOTIFY_FAILED, _DROPPED_TOTAL = "alertmanager_notifications_failed_total", "prometheus_notifications_dropped_total"
STACK_COUNTERS = (_REFUSED_POINTS, _REFUSED_SPANS, _SEND_FAILED_SPANS, _SEND_FAILED_POINTS, _ENQUEUE_FAILED, _REJECTED,
                  _NOTIFY_FAILED, _DROPPED_TOTAL)
STARTED_RECENTLY = "job_instance:process:started_recently"
"""Stack targets whose process started within `counter_window`: the collector by its uptime, the others by their
process_start_time_seconds (the Go and Python clients' own)."""


def _increase(metric: str) -> str:
    """The record of a stack counter's increase within `counter_window` (`_increase_rules`)."""
    return f"series:{metric}:increase"


def _increase_rules(s: RuleSettings) -> list[dict]:
    """Each stack counter's increase within `counter_window`, and the whole count of a process that started within
    it: a component that crashes on start and restarts, or fails before Prometheus first scrapes it, shows its
    counts in its first sample, which `increase` never counts (its first sample is its start). A series new to
    Prometheus in an older process (one that lost its storage) counts what happened before: nothing, as before."""
    w = seconds(s.counter_window)
    young = (f'max by (job, instance) ({{__name__=~"otelcol_process_uptime.*"}}) < {w}'
             f" or max by (job, instance) (time() - process_start_time_seconds) < {w}")
    return [{"record": STARTED_RECENTLY, "expr": young}] + [
        {"record": _increase(m), "expr": f"{m} and on (job, instance) {STARTED_RECENTLY}"
                                        f" or increase({m}[{s.counter_window}])"} for m in STACK_COUNTERS]


def _down(component: str) -> str:
    """The targets of `component` seen that are down: scraped and failing, or gone from service discovery (no `up`
    at all: the one collector pod evicted, its replacement not yet scheduled) while no other target seen is up."""
    seen = f"job_instance:{component}:seen"
    return (f"up == 0 and on (job, instance) {seen} or {seen} unless on (job, instance) up"
            f" unless on () (up and on (job, instance) {seen})")


def _stack_alerts(s: RuleSettings) -> list[dict]:
    return [
        _alert(s, "GRPOCollectorDown", _down("collector"), s.for_target, "critical",
               "The OpenTelemetry Collector is not scraped ({{ $labels.instance }})",
               "No trainer metrics reach Prometheus while the collector is down. Any target that served the "
               "collector's own metrics counts, whatever its job is called.", STACK_TARGETS, per_run=False),
        suspended_alert(s, STACK_TARGETS),
        _alert(s, "GRPOSidecarDown", _down("sidecar"), s.for_target, "warning",
               "The sidecar is not scraped ({{ $labels.instance }})",
               "Samples and step history are not being stored (the trainer still spills samples to disk).",
               STACK_TARGETS, per_run=False),
        _alert(s, "GRPOCollectorRefusing",
               f"sum by (instance, receiver) ({_increase(_REFUSED_POINTS)}) > 0"
               f" or sum by (instance, receiver) ({_increase(_REFUSED_SPANS)}) > 0",
               s.for_slow, "warning",
               "The collector's receiver {{ $labels.receiver }} refused " + _VAL + " items",
               "The collector turned data away (its memory limiter, or a pipeline that cannot keep up): those "
               "metrics or samples are lost. A warning: the exporter retries refused data, and a run whose "
               "metrics stop arriving altogether pages on its own.", STACK_COLLECTOR, per_run=False),
        _alert(s, "GRPOCollectorExportFailing",
               f"sum by (instance, exporter) ({_increase(_SEND_FAILED_SPANS)}) > 0"
               f" or sum by (instance, exporter) ({_increase(_SEND_FAILED_POINTS)}) > 0",
               s.for_slow, "warning",
               "The collector's exporter {{ $labels.exporter }} failed to send " + _VAL + " items",
               "The collector gave up on data for the sidecar (or another exporter): refused for good "
               "(401: token mismatch, 400: malformed) or retried past max_elapsed_time (10m). Retries that "
               "succeed do not count; the persistent queue keeps data across restarts.", STACK_COLLECTOR,
               per_run=False),
        _alert(s, "GRPOCollectorQueueFull",
               "max by (instance, exporter) (otelcol_exporter_queue_size / otelcol_exporter_queue_capacity) > 0.8"
               f" or sum by (instance, exporter) ({_increase(_ENQUEUE_FAILED)}) > 0",
               s.for_fast, "warning",
               "The collector's queue of {{ $labels.exporter }} is full (" + _VAL + ")",
               "A full queue drops new spans (samples, step history): the sidecar is down or slower than the "
               "trainer produces. The trainer's spill keeps every sample for `otel-grpo replay`; metrics and "
               "the run alerts do not go through this queue.", STACK_COLLECTOR, per_run=False),
        _alert(s, "GRPOSidecarRejecting",
               f"sum by (instance, reason) ({_increase(_REJECTED)}) > 0",
               s.for_slow, "warning",
               "The sidecar rejected " + _VAL + " requests ({{ $labels.reason }})",
               "Requests answered with an error: overloaded (the collector retries), unauthorized (token mismatch), "
               "malformed or too large (client bug), store_unavailable (disk).", STACK_SIDECAR, per_run=False),
        # A warning: it reaches the run's owner and the sidecar where the page receiver is the one failing; the
        # Watchdog below stops meanwhile, so whoever watches the dead man's switch is paged whichever receiver fails.
        _alert(s, "GRPOAlertDeliveryFailing", DELIVERY_FAILED, s.for_fast, "warning",
               "Alert notifications failing: " + _VAL + " ({{ $labels.integration }}, {{ $labels.reason }}, "
               "on {{ $labels.instance }})",
               "Alertmanager gave up on notifications after retrying them for a group interval (its log names "
               "the receiver), or Prometheus dropped alerts it could not hand to any Alertmanager. Alertmanager "
               "tries a failed notification again at every group interval, so a page arrives once its receiver "
               "answers; meanwhile the Watchdog stops, and the dead man's switch pages."),
        _alert(s, "GRPOWatchdog", f"vector(1) unless on () {DELIVERY_FAILED}", "0s", "none",
               "Firing while alerts are delivered: proves that rules, Prometheus and Alertmanager deliver",
               "Route it to a dead man's switch; silence means the alerting pipeline itself is broken. It stops "
               "while notifications fail (GRPOAlertDeliveryFailing), so a receiver that fails pages someone too."),
    ]


def alert_rules(s: RuleSettings) -> dict:
    """The alert rule file: the records first, each before those that read it (one group: evaluated in order at
    one timestamp), then the alerts."""
    # Every alert of a run (run_id in its labels) says its run's clock offset: the sidecar places it at its step.
    runs = [{**a, "annotations": {**a["annotations"], **clock_offset_annotation()}}
            for a in _drift_alerts(s) + _training_alerts(s) + _health_alerts(s)]
    alerts = runs + _stack_alerts(s)
    uses = held_uses(a["expr"] for a in alerts)
    records = counter_rules(s, uses) + remembered_rules(s) + _run_rules(s) + [watched_rule(s), _nonfinite_rule(s)]
    records += evidence_rules(s, uses)
    collector, sidecar = _seen_rule(s, "collector"), _seen_rule(s, "sidecar")
    records += [collector, sidecar] + run_end_rules(s, collector["record"]) + newest_value_rules(s, BETA, BETA_LAST)
    records += _increase_rules(s) + _delivery_rules(s)
    # The memory group after it: `[0]` is the alert group wherever the file is read.
    return {"groups": [{"name": "grpo-alerts", "rules": records + alerts}, memory_group(s, records + alerts)]}


def alerts(s: RuleSettings) -> list[dict]:
    """The alert rules alone (no records)."""
    return [r for r in alert_rules(s)["groups"][0]["rules"] if "alert" in r]


__all__ = ["alert_rules", "alerts"]
