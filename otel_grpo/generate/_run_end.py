"""How a run ends, told apart: finished, preempted, crashed, hung; a resume runs again.

    >>> from otel_grpo.generate import RuleSettings
    >>> [a["alert"] for a in run_end_alerts(RuleSettings())]
    ['GRPOTrainerStalled', 'GRPONoFirstStep', 'GRPOMetricsAbsent', 'GRPORunPreempted']

The training process exports `grpo.run.finished` and `grpo.run.preempted` at 0 from
each process's first step, and sets one of them to 1 when it ends on purpose
(completed or Ctrl-C; SIGTERM). So the *last* value within `absent_window` tells
how a run that no longer exports ended: finished (silent), preempted (a warning:
resume it), neither (a crash: a page). A resumed run exports 0 again, so an earlier
end no longer hides its crash.

A hang is measured from the last progress, which a self-referencing record keeps
for as long as the run exports: a run that hangs right after its first step (no
change of the step index ever) counts from when it was first seen, and a stall of
any length never resolves by itself. Before its first step a process exports only its
start time (`grpo.process.start_time`): one that hangs there, or dies, pages too
(GRPONoFirstStep), and a resumed process that is still starting is no crash. Work between
steps that the process reports (`grpo.process.activity_time`: heartbeats per evaluation
batch, and per change on disk during a checkpoint save) counts as progress for both: a long
evaluation or save is no hang, one stuck in a batch or on a hung file system is.
"""

from __future__ import annotations

from ._alerts_base import DURATION as _DURATION, PROGRESS, RUN, STEP as _STEP, alert, by_run
from ._rules import LOG_INTERVAL, STEP_INDEX, STEP_TIME, RuleSettings, prometheus_name, run_floor

FINISHED, PREEMPTED, STARTED, ACTIVITY = map(prometheus_name, ("run_finished", "run_preempted", "process_start",
                                                                "activity"))


def _larger(first: str, second: str) -> str:
    """Per run, the larger of two values (the later of two times; either alone where the other is absent). The
    label keeps `or` from dropping `second` where `first` has the same labels."""
    return f'max by (run_id) ({first} or label_replace({second}, "larger", "1", "", ""))'


def _floor_text(s: RuleSettings, name: str) -> str:
    """A floor as the alert's description says it: the setting, and that some runs have their own."""
    text = getattr(s, name)
    if s.overridden(name):
        text += " or the run's own"
    return text


def progress_rule(s: RuleSettings) -> dict:
    """The time of the run's last progress: a scrape whose step index changed within `progress_probe`, or
    that (re)appeared (a new or resumed process); else the time this record keeps while the run exports;
    else now (after a Prometheus restart). A later heartbeat (work between steps: an evaluation batch)
    counts as progress too."""
    now, probe = f"max by (run_id) (timestamp({STEP_INDEX}))", s.progress_probe
    exporting = f"max by (run_id) (last_over_time({STEP_INDEX}[{s.history_window}]))"
    steps = (f"({now} and on (run_id) max by (run_id) (changes({STEP_INDEX}[{probe}])) > 0)"
             f" or ({now} unless on (run_id) max by (run_id) (last_over_time({STEP_INDEX}[{probe}] offset {probe})))"
             f" or (max by (run_id) (last_over_time({PROGRESS}[{s.history_window}])) and on (run_id) {exporting})"
             f" or {now}")
    return {"record": PROGRESS, "expr": _larger(f"({steps})", by_run(ACTIVITY))}


def _no_first_step(s: RuleSettings) -> str:
    """Runs whose process started and has no step: still exporting after `first_step_floor` (a hang), or
    gone without one (a crash before its first step; a resumed run's is GRPOMetricsAbsent). Value: seconds
    since the process started."""
    started = f"max by (run_id) (last_over_time({STARTED}[{s.absent_window}]))"
    since = f"time() - {started}"
    # a live process runs the run again, whatever an earlier one's end was (a preempted run's resume that hangs);
    # its heartbeats (an evaluation before training) are work, not a hang
    idle = f"time() - {_larger(started, by_run(ACTIVITY))}"
    floor = run_floor(s, "first_step_floor", by_run(STARTED))
    hang = (f"({idle} > on (run_id) {floor}) * 0 + on (run_id) ({since}) and on (run_id) {by_run(STARTED)}"
            f" unless on (run_id) {by_run(STEP_INDEX)} unless on (run_id) {by_run(FINISHED)} == 1")
    died = (f"({since}) unless on (run_id) {by_run(STARTED)}"
            f" unless on (run_id) max by (run_id) (last_over_time({STEP_INDEX}[{s.absent_window}]))"
            f" unless on (run_id) {_ended(s, FINISHED)} unless on (run_id) {_ended(s, PREEMPTED)}")
    return f"{hang} or {died}"


def _ended(s: RuleSettings, marker: str) -> str:
    return f"max by (run_id) (last_over_time({marker}[{s.absent_window}])) == 1"


def _stalled(s: RuleSettings) -> str:
    since = f"time() - max by (run_id) ({PROGRESS})"
    # The longest recent step, or time between two reported steps: a trainer that reports every N steps
    # (TRL's logging_steps) advances the step index once per N step times
    step, interval = (f"max by (run_id) (max_over_time({m}[{s.history_window}]))" for m in (STEP_TIME, LOG_INTERVAL))
    limit = _larger(f"{s.stall_factor} * {_larger(step, interval)}", run_floor(s, "stall_floor", by_run(STEP_INDEX)))
    # Value: the last step. Still exporting: otherwise GRPOMetricsAbsent.
    return (f"({since} > on (run_id) ({limit})) * 0 + on (run_id) {by_run(STEP_INDEX)}"
            f" unless on (run_id) {by_run(FINISHED)} == 1 unless on (run_id) {by_run(PREEMPTED)} == 1")


def _gone(s: RuleSettings) -> str:
    """Runs that exported within `absent_window` and no longer do; value: their last step index."""
    # A process of the run that exports its start but no step yet is a resume starting, not gone
    return (f"max by (run_id) (last_over_time({STEP_INDEX}[{s.absent_window}]))"
            f" unless on (run_id) {by_run(STEP_INDEX)} unless on (run_id) {by_run(STARTED)}")


def run_end_alerts(s: RuleSettings) -> list[dict]:
    panel = "Step index and steps per second"
    return [
        alert(s, "GRPOTrainerStalled", _stalled(s), s.for_fast, "critical",
              f"No training step after step {_STEP} in {RUN}, yet it still exports",
              f"The process is alive but makes no progress for longer than {s.stall_factor:g} times its longest recent "
              f"step time or time between reported steps (at least {_floor_text(s, 'stall_floor')}), nor any "
              "other work it reports (heartbeats: evaluation batches, a checkpoint save that writes): a hung collective, a dead data loader or a "
              "deadlock. It resolves only when a step completes, the process reports work again, or the run ends.",
              panel),
        alert(s, "GRPONoFirstStep", _no_first_step(s), s.for_target, "critical",
              f"{RUN} has completed no training step in the {_DURATION} since its process started",
              f"The run's process exports (or exported) its start time but no step: it hangs before its first step "
              f"for longer than {_floor_text(s, 'first_step_floor')} since its start or its last heartbeat (model or "
              "data loading, a collective or an inference server that never answers) or died without one. Under "
              "`instrument` or `OtelGrpoCallback` the first step is the first optimizer step, whatever logging_steps "
              "is.", panel),
        alert(s, "GRPOMetricsAbsent",
              f"{_gone(s)} unless on (run_id) {_ended(s, FINISHED)} unless on (run_id) {_ended(s, PREEMPTED)}",
              s.for_target, "critical",
              f"{RUN} crashed: it stopped exporting at step {_STEP} without finishing",
              "A run that reported within the absent window no longer does, and its last process neither finished "
              "(grpo_run_finished = 1) nor was preempted (grpo_run_preempted = 1): it crashed, was killed "
              "(SIGKILL, out of memory) or lost its exporter.", panel),
        alert(s, "GRPORunPreempted", f"{_gone(s)} and on (run_id) {_ended(s, PREEMPTED)}", s.for_target, "warning",
              f"{RUN} was preempted at step {_STEP} and has not resumed",
              "The run was stopped by SIGTERM (a scheduler's preemption or a job's time limit): resume it from its "
              "last checkpoint. A resumed run exports again and this resolves.", panel),
    ]


__all__ = ["FINISHED", "PREEMPTED", "progress_rule", "run_end_alerts"]
