"""Fixtures: trainer configs from the tiny preset and a Telemetry wired to in-memory readers."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_grpo.telemetry import Telemetry, TelemetrySettings
from otel_grpo.trainer import GRPOTrainer, TrainResult, load_config

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    result: TrainResult
    reader: InMemoryMetricReader
    spans_exporter: InMemorySpanExporter

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.spans_exporter.get_finished_spans() if name is None or s.name == name]

    def counter(self, name: str) -> float:
        metric = self.metrics().get(name)
        return 0.0 if metric is None else sum(p.value for p in metric.data.data_points)


def train_captured(output_dir: Path, *overrides: str, preset: str = "tiny", **telemetry: Any) -> Run:
    """Train with telemetry on in-memory readers; returns after telemetry shut down (all spans ended).
    `telemetry`: further TelemetrySettings."""
    cfg = load_config(preset=preset, overrides=[f"output_dir={output_dir}", "progress=false", "run_id=test-run",
                                                *overrides])
    reader, exporter = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=2048))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = TelemetrySettings(run_id="test-run", output_dir=output_dir, seed=0, **telemetry)
    tel = Telemetry(settings, meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider)
    return Run(GRPOTrainer(cfg, telemetry=tel).train(), reader, exporter)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m otel_grpo.cli ARGS` as a real process, telemetry exporters off unless `env` says."""
    full_env = {**os.environ, "OTEL_GRPO_METRICS_EXPORTERS": "none", "OTEL_GRPO_TRACES_EXPORTERS": "none",
                **(env or {})}
    return subprocess.run([sys.executable, "-m", "otel_grpo.cli", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def train_run(tmp_path: Path) -> Any:
    return lambda *overrides, preset="tiny", **telemetry: train_captured(tmp_path / "run", *overrides, preset=preset,
                                                                         **telemetry)
