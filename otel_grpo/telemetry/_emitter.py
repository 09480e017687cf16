"""The background thread that turns a finished step into metrics, span attributes, sample events and spill lines.

The training thread only converts values to floats and hands a `StepRecord`
over (one queue put per step). Recording into the SDK costs several microseconds
per call (per-sample vectors go in one batch per histogram, see
`_bulk_histogram`), building sample events and spilling them more, so it happens
here, while the training thread is back on the GPU. Nothing in here raises: a failing
step is logged once and the thread goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from otel_grpo.catalog import spans

from ._instruments import Instruments
from ._retention import RowBudget
from ._samples import ColumnTracker, Selected, StepRows, event_attributes, flatten_row, pick_rows, step_rng
from ._settings import TelemetrySettings
from ._spill import SampleSpill

logger = logging.getLogger("otel_grpo.telemetry")

BACKLOG_WARNING = 256  # steps queued: the emitter falls behind the training loop
_STOP = object()


@dataclass(slots=True)
class StepRecord:
    """Everything one step (or one `log_metrics` call) recorded, as the training thread left it."""

    step: int
    span: Span | None
    steps_done: int
    """Increment of the `grpo.steps` counter."""
    scalars: list[dict[str, float]] = field(default_factory=list)
    samples: list[dict[str, list[float]]] = field(default_factory=list)
    rows: list[tuple[int, list[Mapping[str, Any]], int | None]] = field(default_factory=list)
    """(time in ns when handed over, rows, group size) per `samples()` call."""
    picked: list[Selected] | None = None
    """The rows kept across ranks (`select_across_ranks`); None: select among `rows` here."""
    phases: list[tuple[str, float]] = field(default_factory=list)
    """(name, seconds) of every phase, timed or measured: the duration histogram."""
    measured: list[tuple[str, float, int]] = field(default_factory=list)
    """(name, seconds, end in ns) of phases measured elsewhere: their spans are made here."""
    start_ns: int | None = None
    """Set when the step span is left to the emitter (`span` is None): its start time."""
    end_ns: int | None = None
    skipped: bool = False
    keep_reason: str | None = None
    """Why every row of this step is kept (an anomalous step, `_retention`); None: the usual selection."""
    error: tuple[str, str] | None = None
    """(exception type, message) that ended the step, when the emitter makes its span (emit_in="process")."""


@dataclass(frozen=True, slots=True)
class _Scalars:
    values: dict[str, float]


def start_step_span(tracer: Tracer, run_id: str, step: int, start_ns: int | None = None) -> Span:
    """The `grpo.step` span of one step (ended by the emitter once its attributes are set)."""
    return tracer.start_span(spans.STEP_SPAN, attributes={spans.RUN_ID_ATTR: run_id, spans.STEP_ATTR: step},
                             start_time=start_ns)


def start_phase_span(tracer: Tracer, run_id: str, step: int, name: str, context: Context | None = None,
                     start_ns: int | None = None) -> Span:
    """The `grpo.phase.<name>` span of one phase of a step (a child of the step span given in `context`)."""
    # run_id and step too: phase spans may reach the sidecar in an earlier batch than their step span
    attrs = {spans.PHASE_ATTR: name, spans.RUN_ID_ATTR: run_id, spans.STEP_ATTR: step}
    return tracer.start_span(spans.PHASE_PREFIX + name, context=context, attributes=attrs, start_time=start_ns)


class Emitter:
    """One daemon thread per `Telemetry`, fed through an unbounded queue."""

    def __init__(
        self, settings: TelemetrySettings, instruments: Instruments, tracer: Tracer, spill: SampleSpill | None,
        rank: int = 0,
    ) -> None:
        self._rank = rank
        self._settings = settings
        self._instruments = instruments
        self._tracer = tracer
        self._spill = spill
        self._budget = RowBudget(settings)  # anomalous steps kept whole: this emitter selects (one process)
        self._columns = ColumnTracker()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._failed_kinds: set[str] = set()
        self._warned_span_limit = False
        self._warned_backlog = False
        self._warned_score = False
        self._thread = threading.Thread(target=self._run, name="otel-grpo-emit", daemon=True)
        self._thread.start()

    def submit(self, record: StepRecord) -> None:
        self._queue.put(record)
        if not self._warned_backlog and self._queue.qsize() > BACKLOG_WARNING:
            # Steps far shorter than the emit work (~ms per 1000 histogram values): memory grows.
            self._warned_backlog = True
            logger.warning("otel-grpo: %d steps wait to be emitted; the emitter thread falls behind", BACKLOG_WARNING)

    def submit_scalars(self, values: dict[str, float]) -> None:
        """Gauge values outside any step (no span, no step count): the end-of-run marker."""
        self._queue.put(_Scalars(values))

    def drain(self, timeout_s: float | None) -> bool:
        """Wait until everything submitted so far is processed; False on timeout."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout_s)

    def close(self, timeout_s: float) -> bool:
        """Process what is queued, then stop; False if that took longer than `timeout_s`."""
        self._queue.put(_STOP)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            if isinstance(job, threading.Event):
                job.set()
                continue
            if isinstance(job, _Scalars):
                self._instruments.record_scalars(job.values)
                continue
            try:
                self._process(job)
            except Exception as exc:  # keep the thread (and the next steps) alive
                kind = type(exc).__name__
                if kind not in self._failed_kinds:
                    self._failed_kinds.add(kind)
                    logger.exception("otel-grpo: emitting step %s failed; later %s errors not logged", job.step, kind)

    def _process(self, rec: StepRecord) -> None:
        if rec.span is None and rec.start_ns is not None:
            rec.span = start_step_span(self._tracer, self._settings.run_id, rec.step, rec.start_ns)
            if rec.error is not None:
                kind, message = rec.error
                rec.span.add_event("exception", {"exception.type": kind, "exception.message": message})
                rec.span.set_status(Status(StatusCode.ERROR, kind))
        span = rec.span
        try:
            self._measured_phases(rec)
            finite = self._record_metrics(rec)
            if span is not None:
                span.set_attributes({spans.METRIC_PREFIX + k: v for k, v in finite.items()})
                self._check_span_limit(span)
                self._spill_step(rec, span, finite)
            if rec.rows or rec.picked:
                self._emit_samples(rec)
        finally:
            if span is not None:  # even after an error: an unended span is never exported
                span.end(end_time=rec.end_ns)

    def _spill_step(self, rec: StepRecord, span: Span, finite: dict[str, float]) -> None:
        """The step span's content, spilled: `otel-grpo replay` rebuilds the sidecar's step row from it."""
        if self._spill is None:
            return
        phases: dict[str, float] = {}
        for name, seconds in rec.phases:
            phases[name] = phases.get(name, 0.0) + seconds
        end_ns = rec.end_ns if rec.end_ns is not None else time.time_ns()
        self._spill.write_step(self._settings.run_id, rec.step, getattr(span, "start_time", None), end_ns, finite, phases)

    def _measured_phases(self, rec: StepRecord) -> None:
        """Child spans of the phases a framework timed itself, `seconds` long, ending at their end time."""
        if not rec.measured:
            return
        parent = trace.set_span_in_context(rec.span) if rec.span is not None else None
        for name, seconds, end_ns in rec.measured:
            span = start_phase_span(self._tracer, self._settings.run_id, rec.step, name, parent,
                                    end_ns - int(seconds * 1e9))
            span.end(end_time=end_ns)

    def _record_metrics(self, rec: StepRecord) -> dict[str, float]:
        instruments = self._instruments
        finite: dict[str, float] = {}
        for values in rec.scalars:
            finite.update(instruments.record_scalars(values))
        for samples in rec.samples:
            instruments.record_samples(samples)
        for phase, seconds in rec.phases:
            instruments.record_phase(phase, seconds)
        instruments.count_steps(rec.steps_done, rec.step, rec.skipped)
        return finite

    def _check_span_limit(self, span: Span) -> None:
        dropped = getattr(span, "dropped_attributes", 0)
        if dropped and not self._warned_span_limit:
            self._warned_span_limit = True
            logger.warning(
                "otel-grpo: the tracer provider dropped %d step attributes; raise its span attribute "
                "limit (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT) so the sidecar gets every scalar", dropped
            )

    def _emit_samples(self, rec: StepRecord) -> None:
        """The step's kept rows: selected once over every row of every `samples()` call (or across ranks)."""
        s = self._settings
        handed_ns = min((ns for ns, _, _ in rec.rows), default=rec.end_ns or 0)
        picked = rec.picked
        if picked is None:
            rows = StepRows(rec.rows, s.score)
            kept = pick_rows(rows.scores, s, rec.keep_reason, self._budget, step_rng(s.seed, s.run_id, rec.step))
            reason = rec.keep_reason if kept and kept[0][1] == "all" else None
            picked = [Selected(i, selection, rows.annotated(i, self._rank, reason)) for i, selection in kept]
        if not picked:
            return
        if (s.top_k or s.bottom_k) and picked[0].selection == "random" and not self._warned_score:
            self._warned_score = True  # top/bottom come first: none means no row had a finite score
            logger.warning("otel-grpo: no sample row has a numeric %r column; only random samples are kept", s.score)
        flats = [flatten_row(p.row) for p in picked]
        self._columns.observe(set().union(*flats), rec.step)
        # The spill first: it is the copy that must be complete whatever the exporters do.
        if self._spill is not None:
            self._spill.write(rec.step, (
                {**flat, "run_id": s.run_id, "step": rec.step, "sample_index": p.index, "selection": p.selection}
                for p, flat in zip(picked, flats)
            ))
        parent = trace.set_span_in_context(rec.span) if rec.span is not None else None
        end_ns = max(rec.end_ns or handed_ns, handed_ns)
        per_span = s.max_events_per_span
        for chunk, start in enumerate(range(0, len(picked), per_span)):
            part = range(start, min(start + per_span, len(picked)))
            attrs = {spans.RUN_ID_ATTR: s.run_id, spans.STEP_ATTR: rec.step, spans.CHUNK_ATTR: chunk,
                     spans.COUNT_ATTR: len(part)}
            span = self._tracer.start_span(spans.SAMPLES_SPAN, context=parent, start_time=handed_ns, attributes=attrs)
            for i in part:
                span.add_event(spans.SAMPLE_EVENT, event_attributes(flats[i], picked[i], s.max_text_chars), handed_ns)
            span.end(end_time=end_ns)
