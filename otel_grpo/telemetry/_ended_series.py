"""OTLP metric exporters that end a gauge series the latest export no longer has.

    ended = EndedSeries()
    exporter = otlp_metric_exporter("http/protobuf", endpoint, ended)    # or "grpc"
    ended.end_earlier([("grpo.kl", "{nat}", {"run_id": "r"})])        # what a crashed attempt may have left

A per-step statistic that the latest step did not give (`_gauges.StepGauges`) has no data point in the next
export. On the pull endpoint that ends the series at Prometheus's next scrape; through a collector it did
not: the collector's Prometheus exporter serves a series' last value until no export renewed it for
`metric_expiration` (2 minutes, the shortest safe against a lost export), so Prometheus and Grafana showed an
earlier step's value as current for 2 minutes (60 steps of 2 s). OTLP says "this series has no value now"
with a data point flagged NO_RECORDED_VALUE, its equivalent of Prometheus's staleness marker; the collector's
Prometheus exporter drops the series on it at once, and Prometheus's own OTLP endpoint writes a staleness
marker. So each export here adds such a point for every gauge series an earlier export sent that this one
lacks, until an export carrying it succeeds (a failed one may not have reached the collector).

A relaunched or resumed process of the same run exports under the same target labels as the one that died,
whose per-step series the collector still serves until they expire: `end_earlier` ends those a process can
name at its start (the catalog's per-step gauges with its own point attributes) in its first export, so the
crashed attempt's last values are not served as the new attempt's current ones while it starts.

The SDK's data points carry no flags, so the points are added to the encoded request (`opentelemetry-proto`)
at the exporters' one encoding step. Each goes in a `Metric` of its own: the collector's exporter stops
reading a metric's points at the first flagged one (0.144's `accumulateGauge` returns there).
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.sdk.metrics.export import MetricExportResult

from . import _clock as clock

_NO_RECORDED_VALUE = pb.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK

_Source = tuple[bytes, bytes]
"""(resource, scope) as serialized: where a series comes from."""
_Key = tuple[_Source, str, bytes]
"""(source, metric name, point attributes serialized): what the collector tells a series by."""


class EndedSeries:
    """The gauge series a collector may still hold from earlier exports; ends those an export lacks."""

    def __init__(self) -> None:
        self._held: dict[_Key, tuple[pb.Metric, list]] = {}
        """Each series a collector may hold: its metric (no points) and point attributes, detached."""
        self._sources: dict[_Source, tuple[Resource, InstrumentationScope]] = {}
        self._sent: dict[_Key, tuple[pb.Metric, Any]] = {}
        """The series of the export under way (parts of its request), until `settle`."""
        self._earlier: list[tuple[pb.Metric, list]] = []
        """Series an earlier process of the run may have left (`end_earlier`): their metric, point attributes."""
        self._lock = threading.Lock()

    def end_earlier(self, series: Iterable[tuple[str, str, Mapping[str, Any]]]) -> None:
        """End `series` (gauge name, unit, point attributes) in the next export that lacks them, as if an
        earlier export had sent them: an earlier process of this run, under the same target labels, may have.
        The unit is part of the name a collector's Prometheus exporter gives the series."""
        earlier = [(pb.Metric(name=name, unit=unit), [_key_value(k, v) for k, v in attributes.items()])
                   for name, unit, attributes in series]
        with self._lock:
            self._earlier += earlier

    def mark(self, request: ExportMetricsServiceRequest) -> ExportMetricsServiceRequest:
        """`request` with a NO_RECORDED_VALUE point for each held gauge series it lacks. The same for every
        retry of one export: what is held changes only at `settle`."""
        sent: dict[_Key, tuple[pb.Metric, Any]] = {}
        scopes: dict[_Source, pb.ScopeMetrics] = {}
        for rm in request.resource_metrics:
            resource = rm.resource.SerializeToString(deterministic=True)
            for sm in rm.scope_metrics:
                source = (resource, sm.scope.SerializeToString(deterministic=True))
                scopes[source] = sm
                if source not in self._sources:
                    self._sources[source] = (_detached(rm.resource), _detached(sm.scope))
                for metric in sm.metrics:
                    if metric.WhichOneof("data") != "gauge":
                        continue
                    for point in metric.gauge.data_points:
                        attributes = pb.NumberDataPoint(attributes=point.attributes)
                        key = (source, metric.name, attributes.SerializeToString(deterministic=True))
                        sent[key] = (metric, point.attributes)
        with self._lock:
            if self._earlier and scopes:  # held from now on as this process's own: ended until a success says so
                source, names = next(iter(scopes)), {name for _, name, _ in sent}
                for metric, attributes in self._earlier:
                    if metric.name not in names:  # one this export has, it renews: nothing to end
                        key = (source, metric.name, pb.NumberDataPoint(attributes=attributes).SerializeToString(
                            deterministic=True))
                        self._held.setdefault(key, (metric, attributes))
                self._earlier = []
            gone = [(key, held) for key, held in self._held.items() if key not in sent]
            self._sent = sent
        now = clock.now_ns()
        for (source, _, _), (metric, attributes) in gone:
            sm = scopes.get(source)
            if sm is None:  # nothing of that resource and scope in this export: they come along
                resource, scope = self._sources[source]
                rm = request.resource_metrics.add(resource=resource)
                sm = scopes[source] = rm.scope_metrics.add(scope=scope)
            ended = sm.metrics.add(name=metric.name, unit=metric.unit, description=metric.description)
            ended.gauge.data_points.add(time_unix_nano=now, flags=_NO_RECORDED_VALUE).attributes.extend(attributes)
        return request

    def settle(self, result: MetricExportResult) -> None:
        """After an export: a success leaves held exactly what it sent; a failure also keeps what it ended."""
        with self._lock:
            held, sent, self._sent = self._held, self._sent, {}
            # detached once per series (the request goes away); known series keep their copy
            now = {key: held.get(key) or _kept(metric, attributes) for key, (metric, attributes) in sent.items()}
            self._held = now if result is MetricExportResult.SUCCESS else {**held, **now}


def _kept(metric: pb.Metric, attributes: Any) -> tuple[pb.Metric, list]:
    # copies: a part of a request keeps the whole request's memory alive
    kept = pb.Metric(name=metric.name, unit=metric.unit, description=metric.description)
    return kept, [_detached(a) for a in attributes]


def _key_value(key: str, value: Any) -> KeyValue:
    """One point attribute as the SDK encodes it (a string, an int, a float or a bool)."""
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _detached(message: Any) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def otlp_metric_exporter(protocol: str, endpoint: str | None, ended: EndedSeries) -> Any:
    """The SDK's OTLP metric exporter for `protocol` ("grpc" or "http/protobuf"), ending absent gauge series
    (`ended`'s)."""
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Http

        class HttpExporter(Http):
            # the SDK's one step from the encoded request to the wire (no batch size set: once per export)
            def _export_batch(self, export_request: ExportMetricsServiceRequest) -> MetricExportResult:
                result = super()._export_batch(ended.mark(export_request))
                ended.settle(result)
                return result

        return HttpExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

    class GrpcExporter(Grpc):
        def _translate_data(self, data: Any) -> ExportMetricsServiceRequest:  # once per try of an export
            return ended.mark(super()._translate_data(data))

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
            result = super().export(metrics_data, timeout_millis, **kwargs)
            ended.settle(result)
            return result

    return GrpcExporter(endpoint=endpoint)
