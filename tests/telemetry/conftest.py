"""Fixtures: a Telemetry whose exports the test reads back, over each sink, and helpers to look at them.

`captured` / `make_captured` run a test once per `emit_in`: "thread" records into in-memory
readers given as providers; "process" has its child process export over OTLP/HTTP to a real
receiver, whose requests are turned back into the SDK's own span and metric classes, so that
one set of assertions checks that both sinks emit the same telemetry. A test that only holds
for one sink parametrizes `emit_in` itself.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_grpo.telemetry import Telemetry, TelemetrySettings

from ._receiver import OTLPReceiver, readable_spans, sdk_metrics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Captured:
    tel: Telemetry
    output_dir: Path
    _spans: Callable[[], list[ReadableSpan]]
    _metrics: Callable[[], dict[str, Metric]]

    def _flush(self) -> None:
        if not self.tel.closed:  # closed: everything was pushed at shutdown
            assert self.tel.flush(10)

    def metrics(self) -> dict[str, Metric]:
        """Flush, then every metric by name (one scope: ours)."""
        self._flush()
        return self._metrics()

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        self._flush()
        return [s for s in self._spans() if name is None or s.name == name]


def points(metric: Metric) -> dict[frozenset, Any]:
    """Data points keyed by their attribute set."""
    return {frozenset(p.attributes.items()): p for p in metric.data.data_points}


def _in_memory(settings: TelemetrySettings, out: Path, stack: ExitStack) -> Captured:
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    # As the provider Telemetry builds: room for every scalar of a step (SDK default: 128).
    tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2048))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tel = Telemetry(settings, meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider)

    def metrics() -> dict[str, Metric]:
        data = reader.get_metrics_data()
        return {m.name: m for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                for m in sm.metrics}

    return Captured(tel, out, exporter.get_finished_spans, metrics)


def _over_otlp(settings: TelemetrySettings, out: Path, stack: ExitStack) -> Captured:
    rx = stack.enter_context(OTLPReceiver())
    settings = settings.model_copy(update={
        "otlp_protocol": "http/protobuf", "otlp_endpoint": f"http://127.0.0.1:{rx.port}",
        "metrics_exporters": ["otlp"], "traces_exporters": ["otlp"], "git_revision": "test"})
    tel = Telemetry(settings)
    return Captured(tel, out, lambda: readable_spans(rx), lambda: sdk_metrics(rx))


_SINKS = {"thread": _in_memory, "process": _over_otlp}


@pytest.fixture(params=list(_SINKS))
def emit_in(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_captured(tmp_path: Path, emit_in: str) -> Iterator[Any]:
    made: list[Telemetry] = []
    with ExitStack() as stack:
        def make(**overrides: Any) -> Captured:
            out = tmp_path / f"run{len(made)}"
            settings = TelemetrySettings(**{"run_id": "test-run", "output_dir": out, "emit_in": emit_in,
                                            **overrides})
            cap = _SINKS[emit_in](settings, out, stack)
            made.append(cap.tel)
            return cap

        yield make
        for tel in made:
            tel.shutdown()


@pytest.fixture
def captured(make_captured: Any) -> Captured:
    return make_captured()
