"""Fixtures: a Telemetry wired to in-memory readers, and helpers to look at what it emitted."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_grpo.telemetry import Telemetry, TelemetrySettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Captured:
    tel: Telemetry
    reader: InMemoryMetricReader
    spans_exporter: InMemorySpanExporter
    output_dir: Path

    def metrics(self) -> dict[str, Metric]:
        """Flush, then every metric by name (one scope: ours)."""
        assert self.tel.flush(10)
        data = self.reader.get_metrics_data()
        return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        assert self.tel.flush(10)
        return [s for s in self.spans_exporter.get_finished_spans() if name is None or s.name == name]


def points(metric: Metric) -> dict[frozenset, Any]:
    """Data points keyed by their attribute set."""
    return {frozenset(p.attributes.items()): p for p in metric.data.data_points}


@pytest.fixture
def make_captured(tmp_path: Path) -> Iterator[Any]:
    made: list[Telemetry] = []

    def make(**overrides: Any) -> Captured:
        reader = InMemoryMetricReader()
        exporter = InMemorySpanExporter()
        # As the provider Telemetry builds: room for every scalar of a step (SDK default: 128).
        tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2048))
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        out = tmp_path / f"run{len(made)}"
        settings = TelemetrySettings(**{"run_id": "test-run", "output_dir": out, **overrides})
        tel = Telemetry(settings, meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider)
        made.append(tel)
        return Captured(tel, reader, exporter, out)

    yield make
    for tel in made:
        tel.shutdown()


@pytest.fixture
def captured(make_captured: Any) -> Captured:
    return make_captured()
