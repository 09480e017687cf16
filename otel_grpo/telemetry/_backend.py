"""`Backend`: turns a `StepRecord` into spans, metrics, sample events and spill lines. The one emission path.

    backend = Backend.build(settings, rank=0, world_size=1, local_rank=0)
    backend.emit(record)                 # a finished step: every span made here, after the fact
    backend.emit(Heartbeat(clock.now_ns()))  # work between steps: the activity gauge only
    backend.flush(5.0)
    backend.close(10.0, finished=True, preempted=False)

Both sinks run this class unchanged: `ThreadSink` on a thread of the training process,
`ProcessSink` in a child process. Spans are made from the record with its explicit
start and end times; an error in the record becomes the span's ERROR status and an
`exception` event. Recording into the SDK costs several microseconds per call (per-sample
vectors go in one batch per histogram, see `_bulk_histogram`), building sample events and
spilling them more. Nothing in here raises: a failing step is logged once and the next goes on.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from otel_grpo.catalog import spans

from . import _clock as clock
from ._exporters import Exporters
from ._instruments import Instruments
from ._numbering import StepNumbering, record_key
from ._quiet import spans_dropped_said_once
from ._record import Error, Heartbeat, StepRecord
from ._retention import AnomalyJudge, RowBudget
from ._samples import (EVENT_ATTRIBUTE_LIMIT, ColumnTracker, Selected, StepRows, event_attributes, flatten_row,
                       pick_rows, rank_sample_index, step_rng)
from ._settings import TelemetrySettings
from ._span_ids import derived_ids
from ._step import run_deferred
from ._spill import SampleSpill

logger = logging.getLogger("otel_grpo.telemetry")
_SCOPE = "otel_grpo"


class Backend:
    """One exporting rank's instruments, tracer, spill and exporters, fed one record at a time."""

    def __init__(self, settings: TelemetrySettings, exporters: Exporters, *, rank: int, world_size: int) -> None:
        self._settings = settings
        self._rank = rank
        self.exporters = exporters
        base: dict[str, Any] = {"run_id": settings.run_id}
        side_by_side = settings.export_all_ranks and world_size > 1
        if side_by_side:
            base["rank"] = rank  # per-rank series would otherwise collide
        self._ranks = world_size if side_by_side else 1
        """How many ranks export their own selection of a step's rows, this one's included (`rank_sample_index`)."""
        self._tracer = exporters.tracer_provider.get_tracer(_SCOPE)
        pushed = any(name in ("otlp", "console") for name in settings.metrics_exporters)
        promise_s = settings.metric_export_interval_ms / 1000 if pushed else 0.0
        self._instruments = Instruments(exporters.meter_provider.get_meter(_SCOPE), base, promise_s)
        suffix = f"_rank{rank}" if "rank" in base else ""  # ranks must not append to one file
        # the spill's failure says whether an exporter still sends what it could not keep: none does without OTLP traces
        sent_by = exporters.health if "otlp" in settings.traces_exporters else None
        self.spill = (SampleSpill(settings.output_dir, suffix, sent_by, settings.max_text_chars)
                      if settings.spill_samples else None)
        exporters.health.spill = self.spill  # before the first export: its failure's warning names what is kept
        # the run, its start time and its first promise, before the first interval ends; and the end of what a
        # crashed attempt of the run may still have on a collector under these target labels
        exporters.announce(self._instruments.step_gauge_series())
        self._budget = RowBudget(settings)  # anomalous steps kept whole: this backend selects (one process)
        self._judge = AnomalyJudge(settings)  # ... as it judges (else the training thread did: `StepRecord.judged`)
        self._columns = ColumnTracker()
        self._numbering = StepNumbering()  # a step's records number their rows one after another
        self._failed_kinds: set[str] = set()
        self._warned_span_limit = False
        self._warned_wide_row = False
        self._warned_score = False
        # The step interval is measured once per new latest step: a trainer that reports every N steps
        # (TRL's logging_steps) moves it every N step times, and the stall alert must wait that long.
        # Measured from the later of the last step and the last heartbeat (work between steps is
        # no part of a step interval); the first step's is its own duration, not the start-up before it,
        # and so is a newer attempt's first (its wait before is the failed attempt's end and the resume).
        self._last_progress_ns: int | None = None
        # The step index is the latest step of the newest attempt: a late record of an earlier step (a summary, a
        # metric logged afterwards) never moves it back; a newer attempt (a resume in this process) starts it anew.
        # Only a record that moves it counts a step (`_record_metrics`).
        self._index: tuple[int, int] | None = None  # (attempt, step)

    @classmethod
    def build(cls, settings: TelemetrySettings, rank: int, world_size: int, local_rank: int,
              meter_provider: MeterProvider | None = None, tracer_provider: TracerProvider | None = None) -> Backend:
        """A backend over the given providers, else over ones built from `settings`."""
        exporters = Exporters(settings, rank, world_size, local_rank, meter_provider, tracer_provider)
        return cls(settings, exporters, rank=rank, world_size=world_size)

    @property
    def prometheus_port(self) -> int | None:
        return self.exporters.prometheus_port

    # ---- the sinks' calls ----------------------------------------------------------------
    def emit(self, rec: StepRecord | Heartbeat) -> None:
        """Everything of one step, or a heartbeat's time; never raises (a failing step is logged once per kind
        of error)."""
        if isinstance(rec, Heartbeat):
            self._instruments.record_activity(rec.at_ns / 1e9)
            if self._last_progress_ns is not None:
                self._last_progress_ns = max(self._last_progress_ns, rec.at_ns)
            return
        try:
            with spans_dropped_said_once(self.exporters.health, self.exporters.traces_target):
                self._emit(rec)
        except Exception as exc:  # keep the sink (and the next steps) alive
            kind = type(exc).__name__
            if kind not in self._failed_kinds:
                self._failed_kinds.add(kind)
                logger.exception("otel-grpo: emitting step %s failed; later %s errors not logged", rec.step, kind)

    def flush(self, timeout_s: float) -> bool:
        return self.exporters.flush(timeout_s)

    def close(self, timeout_s: float, *, finished: bool, preempted: bool) -> None:
        """The run's end markers (`grpo.run.finished` / `grpo.run.preempted`), then the exporters' close."""
        self._instruments.closing()
        if preempted:
            self._instruments.record_scalars({"run_preempted": 1.0})
        if finished:
            self._instruments.record_scalars({"run_finished": 1.0})
        closed = self.exporters.close(timeout_s, linger=finished or preempted)
        if self.spill is not None:  # after the exporters' last word: whether what was not spilled is lost
            health = self.exporters.health
            self.spill.report(exported=closed and not health.failures and not health.dropped
                              and "otlp" in self._settings.traces_exporters)

    # ---- one step ------------------------------------------------------------------------
    def _emit(self, rec: StepRecord) -> None:
        s = self._settings
        if not rec.judged:  # the step's deferred recordings first: the verdict reads what they record
            run_deferred(rec, s.run_id)
            rec.keep_reason = self._judge(rec.scalars, rec.skipped)
        with derived_ids(s.run_id, rec.step, rec.attempt, spans.STEP_SPAN, rec.start_ns):
            attrs = {spans.RUN_ID_ATTR: s.run_id, spans.STEP_ATTR: rec.step, **_attempt(rec, self._rank)}
            step = self._tracer.start_span(spans.STEP_SPAN, attributes=attrs, start_time=rec.start_ns)
        try:
            _fail(step, rec.error, rec.end_ns)
            parent = trace.set_span_in_context(step)
            self._phases(rec, parent)
            durations = _durations(rec)
            # Non-finite values too: the sidecar stores them as null, so a step that diverged shows a gap, not the
            # last finite value (Prometheus gets no data point for them: `Instruments.record_scalars`).
            scalars = self._record_metrics(rec, durations)
            step.set_attributes({spans.METRIC_PREFIX + k: v for k, v in scalars.items()})
            self._check_span_limit(step)
            self._spill_step(rec, scalars, durations)
            if rec.rows or rec.picked:
                self._emit_samples(rec, parent)
        finally:
            step.end(end_time=rec.end_ns)  # even after an error: an unended span is never exported

    def _phases(self, rec: StepRecord, parent: Context) -> None:
        """A child span per phase, with the phase's own start and end (timed by `phase()` or measured elsewhere)."""
        s = self._settings
        for i, (name, start_ns, end_ns, error) in enumerate(rec.phases):
            # run_id and step too: phase spans may reach the sidecar in an earlier batch than their step span
            attrs = {spans.PHASE_ATTR: name, spans.RUN_ID_ATTR: s.run_id, spans.STEP_ATTR: rec.step,
                     **_attempt(rec, self._rank)}
            with derived_ids(s.run_id, rec.step, rec.attempt, spans.PHASE_PREFIX + name, rec.start_ns, i):
                span = self._tracer.start_span(spans.PHASE_PREFIX + name, context=parent, attributes=attrs,
                                               start_time=start_ns)
            _fail(span, error, end_ns)
            span.end(end_time=end_ns)

    def _spill_step(self, rec: StepRecord, scalars: dict[str, float], durations: dict[str, list[float]]) -> None:
        """The step span's content, spilled: `otel-grpo replay` rebuilds the sidecar's step row from it."""
        if self.spill is None:
            return
        phases = {name: sum(seconds) for name, seconds in durations.items()}
        self.spill.write_step(self._settings.run_id, rec.step, rec.start_ns, rec.end_ns, scalars, phases,
                              rec.attempt, claims=_claimed(rec, self._rank) is not None)

    def _record_metrics(self, rec: StepRecord, durations: dict[str, list[float]]) -> dict[str, float]:
        """The step's scalars recorded, and returned as its span carries them (the last record's value of each)."""
        instruments = self._instruments
        scalars: dict[str, float] = {}
        older = instruments.begin_record(rec.evaluation, rec.step, rec.attempt)
        try:
            for values in rec.scalars:
                scalars.update(instruments.record_scalars(values))
        finally:  # a per-step gauge this record (the latest step) gave no value has no data point from here
            instruments.end_record()
        for samples in rec.samples:
            instruments.record_samples(samples)
        instruments.record_phases(durations)
        if rec.evaluation:  # no step: a hang after an evaluation before the first step is still "no first step"
            return scalars
        before = self._index
        # a further record of the latest step, a late one, a re-send, an older attempt's: no step
        if older or not self._moves_index(rec):
            instruments.count_again(rec.skipped, latest=(_attempt_of(rec), rec.step) == before)
            return scalars
        index = self._index
        restart = before is not None and index[0] > before[0]  # a newer attempt: its first step
        if restart:
            self._last_progress_ns = None
        end_ns = rec.end_ns or clock.now_ns()
        # measured, unless the caller gave it (a trainer that reports a step ahead of its logging cadence)
        last = self._last_progress_ns
        # The first step's interval is its own duration: its wait before (the start-up) is no step interval
        since = last if last is not None else rec.start_ns
        given = math.isfinite(scalars.get("log_interval", math.nan))
        interval = None if given or not since else max(end_ns - since, 0) / 1e9
        instruments.count_steps(rec.steps_done, index[1], rec.skipped, interval, end_ns / 1e9, restart)
        self._last_progress_ns = end_ns if last is None else max(end_ns, last)
        return scalars

    def _moves_index(self, rec: StepRecord) -> bool:
        """Whether `rec` is a new latest step, which moves the index (attempt, `grpo.step_index`) to it: its attempt
        is newer than the index's, or the same at a later step (an older attempt's record moves nothing)."""
        attempt, index = _attempt_of(rec), self._index
        if index is None or attempt > index[0] or (attempt == index[0] and rec.step > index[1]):
            self._index = (attempt, rec.step)
            return True
        return False

    def _check_span_limit(self, span: Span) -> None:
        dropped = getattr(span, "dropped_attributes", 0)
        if dropped and not self._warned_span_limit:
            self._warned_span_limit = True
            logger.warning(
                "otel-grpo: the tracer provider dropped %d step attributes; raise its span attribute "
                "limit (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT) so the sidecar gets every scalar", dropped
            )

    def _emit_samples(self, rec: StepRecord, parent: Context) -> None:
        """The record's kept rows: selected once over every row of every `samples()` call (or across ranks), and
        numbered on from the rows of the step's earlier records (`_numbering`)."""
        s = self._settings
        handed_ns = min((ns for ns, _, _ in rec.rows), default=rec.end_ns or rec.start_ns)
        picked, pool, rank, ranks = rec.picked, rec.pool, 0, 1  # across ranks: positions among every rank's rows
        if picked is None:
            rows = StepRows(rec.rows, s.score)
            kept = pick_rows(rows.scores, s, rec.keep_reason, self._budget, step_rng(s.seed, s.run_id, rec.step))
            reason = rec.keep_reason if kept and kept[0][1] == "all" else None
            picked = [Selected(i, selection, rows.annotated(i, self._rank, reason)) for i, selection in kept]
            pool, rank, ranks = len(rows.rows), self._rank, self._ranks
        if not picked:
            if pool:  # positions another rank emitted (rank 0, of a selection across ranks): a later record's go after
                self._numbering.start(rec.attempt, rec.step, pool, record_key(rec.evaluation, pool, (), ()))
            return
        if (s.top_k or s.bottom_k) and picked[0].selection == "random" and not self._warned_score:
            self._warned_score = True  # top/bottom come first: none means no row had a finite score
            logger.warning("otel-grpo: no sample row has a numeric %r column; only random samples are kept", s.score)
        flats = [flatten_row(p.row) for p in picked]
        first = self._numbering.start(rec.attempt, rec.step, pool, record_key(rec.evaluation, pool, picked, flats))
        if first or rank or ranks > 1:
            picked = [Selected(rank_sample_index(first + p.index, rank, ranks), p.selection, p.row)
                      for p in picked]
        self._columns.observe(set().union(*flats), rec.step)
        # The spill first: it is the copy that must be complete whatever the exporters do.
        if self.spill is not None:
            self.spill.write(rec.step, [
                {**flat, "run_id": s.run_id, "step": rec.step, "sample_index": p.index, "selection": p.selection,
                 **_attempt(rec, self._rank)}
                for p, flat in zip(picked, flats)
            ])
        end_ns = max(rec.end_ns or handed_ns, handed_ns)
        per_span = s.max_events_per_span
        for chunk, start in enumerate(range(0, len(picked), per_span)):
            part = range(start, min(start + per_span, len(picked)))
            attrs = {spans.RUN_ID_ATTR: s.run_id, spans.STEP_ATTR: rec.step, spans.CHUNK_ATTR: chunk,
                     spans.COUNT_ATTR: len(part), **_attempt(rec, self._rank)}
            with derived_ids(s.run_id, rec.step, rec.attempt, spans.SAMPLES_SPAN, rec.start_ns, chunk):
                span = self._tracer.start_span(spans.SAMPLES_SPAN, context=parent, start_time=handed_ns,
                                               attributes=attrs)
            for i in part:
                event = event_attributes(flats[i], picked[i], s.max_text_chars)
                if len(event) > EVENT_ATTRIBUTE_LIMIT and not self._warned_wide_row:
                    self._warned_wide_row = True
                    logger.warning("otel-grpo: a sample row of step %d has %d attributes, over the %d a sample event "
                                   "holds: its first %d extra columns are not exported (the spill keeps them), here "
                                   "and in any such row of this run", rec.step, len(event), EVENT_ATTRIBUTE_LIMIT,
                                   len(event) - EVENT_ATTRIBUTE_LIMIT)
                span.add_event(spans.SAMPLE_EVENT, event, handed_ns)
            span.end(end_time=end_ns)


def _attempt_of(rec: StepRecord) -> int:
    """The record's attempt for the step index: a sender's that named none is older than any."""
    return rec.attempt if rec.attempt is not None else -1


def _claimed(rec: StepRecord, rank: int) -> int | None:
    """The attempt the record claims its step for: rank 0's training record's.

    An evaluation claims none, so it merges into whatever attempt trained the step: a resumed job evaluates
    at the checkpoint's step (verl's `val_before_train`, transformers' `eval_on_start`) without training it
    again, and that step must keep the training that ran it. Nor does another rank's (`export_all_ranks`):
    each rank's process starts at its own instant, yet they are one attempt, and rank 1's step span must
    not replace the rows rank 0 sent for the step.
    """
    return None if rec.evaluation or rank != 0 else rec.attempt


def _attempt(rec: StepRecord, rank: int) -> dict[str, int]:
    """The attempt attribute of the step's spans and spilled rows: `grpo.attempt` where the record claims its
    step (`_claimed`), else `grpo.writer_attempt`, so that the sidecar drops it where a newer attempt than
    this process's took the step over, and never lets it replace what the step holds."""
    if rec.attempt is None:
        return {}
    return {spans.ATTEMPT_ATTR if _claimed(rec, rank) is not None else spans.WRITER_ATTEMPT_ATTR: rec.attempt}


def _fail(span: Span, error: Error | None, at_ns: int | None) -> None:
    """The recorded exception on `span`: an `exception` event (OTel's semantic conventions) and ERROR status."""
    if error is None:
        return
    kind, message, stacktrace = error
    span.add_event("exception", {"exception.type": kind, "exception.message": message,
                                 "exception.stacktrace": stacktrace}, at_ns)
    span.set_status(Status(StatusCode.ERROR, kind))


def _durations(rec: StepRecord) -> dict[str, list[float]]:
    """Each phase name's durations in seconds, in the order they ran (a record of ten trainer steps holds ten)."""
    durations: dict[str, list[float]] = {}
    for name, start_ns, end_ns, _ in rec.phases:
        durations.setdefault(name, []).append(_seconds(start_ns, end_ns))
    return durations


def _seconds(start_ns: int, end_ns: int) -> float:
    return max(end_ns - start_ns, 0) / 1e9  # a wall clock stepped back by NTP: no negative duration
