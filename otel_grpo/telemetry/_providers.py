"""Meter and tracer providers built from `TelemetrySettings` (and the standard `OTEL_*` variables).

    resource = build_resource(settings, rank=0, world_size=1)
    health = ExportHealth()
    tracer_provider = build_tracer_provider(settings, resource, health)
    meter_provider, owned = build_meter_provider(settings, resource, local_rank=0, health=health)

Every exporter runs on the SDK's background threads (periodic metric reader,
batch span processor) and is wrapped so that a failing endpoint logs once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Literal
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from otel_grpo.catalog import spans

from ._ended_series import EndedSeries, otlp_metric_exporter
from ._prometheus import prometheus_reader
from ._quiet import ExportHealth, QuietMetricExporter, QuietSpanExporter
from ._samples import EVENT_ATTRIBUTE_LIMIT
from ._settings import SDK_EVENT_LIMIT, TelemetrySettings
from ._span_ids import DerivedIds


def detect_rank() -> tuple[int, int]:
    """(rank, world size): torch.distributed when initialized, else `RANK` / `WORLD_SIZE`."""
    # Only look at torch if the program imported it: importing it here costs seconds.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def git_revision() -> str | None:
    """HEAD of the working directory's git checkout, or None outside one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and rev else None


def build_resource(settings: TelemetrySettings, rank: int, world_size: int) -> Resource:
    """Resource of the run; `Resource.create` merges `OTEL_RESOURCE_ATTRIBUTES` underneath."""
    attrs: dict[str, Any] = {
        "service.name": settings.service_name,
        spans.RUN_ID_ATTR: settings.run_id,  # the sidecar's fallback for spans without one
        # Unique per run (and rank): the collector's exporter makes it the `instance` label
        # and target_info's key, so two runs never share one target_info.
        "service.instance.id": settings.run_id if world_size <= 1 else f"{settings.run_id}/rank{rank}",
        "host.name": socket.gethostname(),
        "grpo.rank": rank,
        "grpo.world_size": world_size,
    }
    if settings.model_name:
        attrs["grpo.model"] = settings.model_name
    revision = settings.git_revision or git_revision()
    if revision:
        attrs["vcs.revision"] = revision
    attrs.update(settings.resource_attributes)
    return Resource.create(attrs)


def _otlp_target(settings: TelemetrySettings, signal: Literal["traces", "metrics"]) -> str | None:
    """Endpoint for one signal: the per-signal one as is, else the base (+ `/v1/<signal>` for HTTP)."""
    specific = settings.otlp_traces_endpoint if signal == "traces" else settings.otlp_metrics_endpoint
    if specific:
        return specific
    base = settings.otlp_endpoint
    if settings.protocol_for(signal) == "http/protobuf":
        return f"{(base or 'http://localhost:4318').rstrip('/')}/v1/{signal}"
    return base  # grpc: host:port, None -> the SDK's localhost:4317


def sdk_disabled() -> bool:
    """`OTEL_SDK_DISABLED=true` (the OpenTelemetry specification's switch): the SDK's providers then hand
    out no-op meters and tracers, so nothing is recorded or exported, whatever the exporters."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def otlp_unreachable(settings: TelemetrySettings, timeout_s: float = 0.5,
                     signals: tuple[str, ...] = ("traces", "metrics")) -> str | None:
    """The first OTLP endpoint in use for `signals` that takes no TCP connection within `timeout_s`; None if
    all do. Where a proxy carries the exporter's requests (`_proxy`), the proxy is what must take it: a cluster
    may reach its collector only so (and a collector behind it that restarts looks reachable).

    Checked at shutdown: against a closed port the exporters would retry their final batch for
    the whole export timeout (10 s by default) before the process could exit.
    """
    for signal, exporters in (("traces", settings.traces_exporters), ("metrics", settings.metrics_exporters)):
        if signal not in signals or "otlp" not in exporters:
            continue
        target = otlp_target(settings, signal)
        url = urlsplit(target if "://" in target else "//" + target)
        proxy = _proxy(target, grpc=settings.protocol_for(signal) != "http/protobuf")
        dialed = url if proxy is None else urlsplit(proxy if "://" in proxy else "//" + proxy)
        try:
            port = dialed.port or (443 if dialed.scheme == "https" else 80)
            socket.create_connection((dialed.hostname or "localhost", port), timeout_s).close()
        except (OSError, ValueError):
            return target
    return None


def _proxy(target: str, grpc: bool) -> str | None:
    """The proxy the exporter's own client takes to `target`, if any. OTLP/HTTP: requests' choice from the
    environment (`HTTP(S)_PROXY`, `ALL_PROXY`, `NO_PROXY` with its CIDR entries). gRPC: its own, lowercase only
    (`grpc_proxy`, else `https_proxy`, else `http_proxy`; `no_grpc_proxy`, else `no_proxy`), whatever the
    target's scheme."""
    import requests.utils

    url = target if "://" in target else "http://" + target
    if not grpc:
        return requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
    proxy = next((os.environ[n] for n in ("grpc_proxy", "https_proxy", "http_proxy") if n in os.environ), "")
    no_proxy = os.environ.get("no_grpc_proxy", os.environ.get("no_proxy"))
    if not proxy or requests.utils.should_bypass_proxies(url, no_proxy=no_proxy):
        return None
    return proxy


def otlp_target(settings: TelemetrySettings, signal: Literal["traces", "metrics"]) -> str:
    """Where a signal's OTLP exporter sends, as its warnings and `ExportHealth` name it."""
    return _otlp_target(settings, signal) or "localhost:4317"


def traces_target(settings: TelemetrySettings) -> str:
    """Where the spans go, as a warning names it: the OTLP endpoint, else the other exporters."""
    if "otlp" in settings.traces_exporters:
        return otlp_target(settings, "traces")
    return ", ".join(settings.traces_exporters)


def _otlp_span_exporter(settings: TelemetrySettings, health: ExportHealth) -> QuietSpanExporter:
    endpoint = _otlp_target(settings, "traces")
    if settings.protocol_for("traces") == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    return QuietSpanExporter(OTLPSpanExporter(endpoint=endpoint), endpoint or "localhost:4317", health)


def _otlp_metric_exporter(settings: TelemetrySettings, health: ExportHealth, ended: EndedSeries) -> QuietMetricExporter:
    exporter = otlp_metric_exporter(settings.protocol_for("metrics"), _otlp_target(settings, "metrics"), ended)
    return QuietMetricExporter(exporter, otlp_target(settings, "metrics"), health)


@dataclass
class Owned:
    """What a builder made and must close again: the provider, plus servers it started."""

    closers: list[Callable[[], None]] = field(default_factory=list)
    push_readers: list[MetricReader] = field(default_factory=list)
    """Readers that export on their own schedule; `flush()` must collect only these: a collect
    on the Prometheus reader queues a second copy of every series for the next scrape."""
    prometheus_port: int | None = None
    """Port the Prometheus endpoint listens on (resolved when 0 was asked for)."""
    linger: Callable[[float], bool] | None = None
    """The endpoint's `ServedReader.linger`: after `finish()`, serve until one more scrape (bounded)."""
    ended: list[EndedSeries] = field(default_factory=list)
    """The OTLP exporters' gauge series to end (`EndedSeries.end_earlier`)."""


def build_meter_provider(
    settings: TelemetrySettings, resource: Resource, local_rank: int, health: ExportHealth
) -> tuple[MeterProvider, Owned]:
    """A meter provider with one reader per configured metrics exporter; not made global."""
    owned = Owned()
    readers: list[MetricReader] = []
    interval = settings.metric_export_interval_ms
    for name in settings.metrics_exporters:
        if name in ("otlp", "console"):
            if name == "otlp":
                owned.ended.append(EndedSeries())
                exporter = _otlp_metric_exporter(settings, health, owned.ended[-1])
            else:
                exporter = QuietMetricExporter(ConsoleMetricExporter(), "console", health)
            reader = PeriodicExportingMetricReader(exporter, interval)
            readers.append(reader)
            owned.push_readers.append(reader)
        elif name == "prometheus":
            served = prometheus_reader(settings, local_rank)
            if served is not None:
                readers.append(served.reader)
                owned.prometheus_port = served.port
                owned.linger = served.linger
                owned.closers.append(served.close)
    # Exemplars would attach trace ids to each measurement: a cost nobody reads here.
    provider = MeterProvider(
        metric_readers=readers, resource=resource, exemplar_filter=AlwaysOffExemplarFilter(), shutdown_on_exit=False
    )
    return provider, owned


def build_tracer_provider(settings: TelemetrySettings, resource: Resource, health: ExportHealth) -> TracerProvider:
    """A tracer provider with a batch processor per configured traces exporter; not made global."""
    limits = SpanLimits(
        max_span_attributes=settings.max_span_attributes,  # a step span carries every scalar
        max_events=SDK_EVENT_LIMIT,
        max_event_attributes=EVENT_ATTRIBUTE_LIMIT,  # a sample row is one event: room for its columns
    )
    # Ids from what each span is: a step emitted again after its telemetry process died is stored once
    provider = TracerProvider(resource=resource, span_limits=limits, shutdown_on_exit=False, id_generator=DerivedIds())
    for name in settings.traces_exporters:
        if name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_span_exporter(settings, health)))
        elif name == "console":
            exporter = QuietSpanExporter(ConsoleSpanExporter(), "console", health)
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
