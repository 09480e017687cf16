"""Exporter wrappers that keep a down or slow endpoint from flooding the training log.

The OTLP exporters log every failed batch (and every retry), and the batch
processor logs every dropped span; with the collector down that is a warning per
export interval for the whole run. The wrappers here catch everything the inner
exporter raises, report the first failure as ONE warning (and the recovery as one
info line), and `_LogGate` holds back what the SDK logs during their own export
calls, so the training log shows one line instead of thousands. Records of any
other SDK user in the process (its own exporters, its own threads) pass untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

if TYPE_CHECKING:
    from ._spill import SampleSpill

logger = logging.getLogger("otel_grpo.telemetry")

# SDK loggers on the export path: exporters, their HTTP client, the batch processor.
_NOISY_PREFIXES = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal", "opentelemetry.sdk.metrics")


class _LogGate(logging.Filter):
    """Holds back the SDK's export-path records made inside one of our export calls.

    A logger's filters see only that logger's own records, so the gate is added to
    every existing SDK logger on the export path (they are created at import time).
    It is scoped by thread, to the duration of our `export` calls: records made
    anywhere else pass.
    """

    def __init__(self) -> None:
        super().__init__("otel_grpo.gate")
        self._local = threading.local()

    @contextmanager
    def capturing(self) -> Iterator[list[logging.LogRecord]]:
        """Hold back what the SDK logs on this thread during one export call.

        The inner exporter logs its failure (and each retry) before it returns, so
        the first failure would otherwise reach the log next to our own warning.
        """
        captured: list[logging.LogRecord] = []
        outer = getattr(self._local, "captured", None)  # an export inside a recording (a synchronous processor)
        self._local.captured = captured
        try:
            yield captured
        finally:
            self._local.captured = outer

    def filter(self, record: logging.LogRecord) -> bool:
        captured = getattr(self._local, "captured", None)
        if captured is None:
            return True
        captured.append(record)
        return False

    def install(self) -> None:
        names = [n for n in logging.root.manager.loggerDict if n.startswith(_NOISY_PREFIXES)]
        for name in names:
            target = logging.getLogger(name)
            if self not in target.filters:
                # first: the SDK's own DuplicateFilter would hide a repeat (within 20 s) of what we count
                target.filters.insert(0, self)


GATE = _LogGate()  # one per process, as the loggers it is added to


@contextmanager
def spans_dropped_said_once(health: ExportHealth, target: str) -> Iterator[None]:
    """Around a backend's recording: the batch processor's "Queue full, dropping Span." (the SDK says it every
    20 s for as long as the endpoint takes no spans, a black hole or a dead collector under a fast loop) counts as
    an export failure, whose one warning is the run's; anything else the SDK logs there is passed on."""
    with GATE.capturing() as captured:
        yield
    for record in captured:
        if isinstance(record.msg, str) and record.msg.startswith("Queue full"):
            health.failed("traces", target, "the span queue is full: new spans are dropped")
        else:
            logging.getLogger(record.name).callHandlers(record)


def _as_record(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord("otel_grpo.telemetry", logging.ERROR, __file__, 0, repr(exc), None, None)


_ENCODER_ERRORS = (ValueError, TypeError, OverflowError)
"""What protobuf raises for a value it cannot encode; the gRPC exporters let it out of `export` (their network
failures are grpc.RpcError, handled inside), the HTTP ones log it (`_unencodable`)."""


def _unencodable(captured: list[logging.LogRecord], raised: BaseException | None) -> str | None:
    """The words for a batch that failed in its encoder, before any endpoint saw it: the HTTP exporters' log
    ("Failed to encode span batch: Value out of range: ...") or what a gRPC exporter raised; None for any other
    failure."""
    if isinstance(raised, _ENCODER_ERRORS):
        return repr(raised)[:200]
    for record in captured:
        if isinstance(record.msg, str) and record.msg.startswith("Failed to encode") and "batch" in record.msg:
            return record.getMessage()[:200]
    return None


def _detail(captured: list[logging.LogRecord]) -> str:
    """The SDK's own words on the failure, for our one warning: the first (the cause) and the last."""
    messages = [r.getMessage()[:200] for r in captured if r.levelno >= logging.WARNING]
    if not messages:
        return "the endpoint did not accept the batch"
    return messages[0] if len(messages) == 1 else f"{messages[0]} ... {messages[-1]}"


class ExportHealth:
    """Export failures of one `Telemetry`: ONE warning at the first, one info line per recovery.

    Shared by all of its exporters, so a collector that is down (traces and metrics
    both failing) still gives a single warning for the whole run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing: set[str] = set()
        self.delivered: dict[tuple[str, str], float] = {}
        """(signal, target) of each exporter whose endpoint has taken an export (something downstream knows the
        run), and when it last took one (`time.monotonic`): a console exporter's success is no collector's."""
        self.failures = 0
        self.dropped = 0
        """Batches the SDK's encoder refused (`unencodable`): lost to every endpoint, not an outage."""
        self.spill: SampleSpill | None = None
        """The local copy of the same steps (set by the backend), which the warning names; None: not spilled."""

    @property
    def failing(self) -> bool:
        return bool(self._failing)

    def failed(self, signal: str, target: str, detail: str) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
            self._failing.add(signal)
        if first:
            logger.warning(
                "otel-grpo: exporting %s to %s failed (%s); training continues, further failures "
                "are counted, not logged; %s",
                signal, target, detail, self._kept(),
            )

    def unencodable(self, signal: str, target: str, detail: str, what: str) -> None:
        """A batch the encoder refused: no endpoint will ever take it, so it is no outage (which a follower
        answers by sending the same batch again, for ever) and not counted as a failure. Said once, as the bug it
        is: the value that cannot be encoded should have been refused where it was recorded."""
        with self._lock:
            self.dropped += 1
            first = self.dropped == 1
        if first:
            logger.error("otel-grpo: %s of %s for %s could not be encoded (%s) and are dropped; a value recorded "
                         "should have been refused: please report it; %s", what, signal, target, detail,
                         self._kept())

    def _kept(self) -> str:
        """Where the steps that are not exported remain, as the warning says it."""
        spill = self.spill
        if spill is None:
            return "samples are not spilled (spill_samples is off)"
        if spill.error is not None:
            return (f"the local spill to {spill.directory.parent} failed too ({spill.error}): what neither keeps is "
                    "lost, and the run's end counts it")
        return f"samples stay in the local spill ({spill.directory.parent})"

    def succeeded(self, signal: str, target: str) -> None:
        with self._lock:
            recovered = signal in self._failing
            self._failing.discard(signal)
            self.delivered[signal, target] = time.monotonic()
        if recovered:
            logger.info("otel-grpo: exporting %s to %s works again (%d failed exports so far)",
                        signal, target, self.failures)


class QuietSpanExporter(SpanExporter):
    """Wraps a span exporter: never raises, reports failures once."""

    def __init__(self, inner: SpanExporter, target: str, health: ExportHealth) -> None:
        self._inner = inner
        self._target = target
        self.health = health
        GATE.install()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raised = None
        with GATE.capturing() as captured:
            try:
                result = self._inner.export(spans)
            except Exception as exc:  # an exporter bug must not kill the batch thread
                raised, result, captured[:] = exc, SpanExportResult.FAILURE, [_as_record(exc)]
        if result is SpanExportResult.SUCCESS:
            self.health.succeeded("traces", self._target)
        elif (why := _unencodable(captured, raised)) is not None:
            self.health.unencodable("traces", self._target, why, f"{len(spans)} spans")
        else:
            self.health.failed("traces", self._target, _detail(captured))
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception as exc:
            logger.debug("span exporter shutdown failed: %r", exc)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis)
        except Exception:
            return False


class QuietMetricExporter(MetricExporter):
    """Wraps a push metric exporter: never raises, reports failures once."""

    def __init__(self, inner: MetricExporter, target: str, health: ExportHealth) -> None:
        # Temporality and aggregation preferences are the inner exporter's.
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._target = target
        self.health = health
        GATE.install()

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        raised = None
        with GATE.capturing() as captured:
            try:
                result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:
                raised, result, captured[:] = exc, MetricExportResult.FAILURE, [_as_record(exc)]
        if result is MetricExportResult.SUCCESS:
            self.health.succeeded("metrics", self._target)
        elif (why := _unencodable(captured, raised)) is not None:
            self.health.unencodable("metrics", self._target, why, "one collection's points")
        else:
            self.health.failed("metrics", self._target, _detail(captured))
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        try:
            return self._inner.force_flush(timeout_millis=timeout_millis)
        except Exception:
            return False

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        try:
            self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:
            logger.debug("metric exporter shutdown failed: %r", exc)
