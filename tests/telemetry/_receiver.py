"""A real OTLP/HTTP receiver for tests: stdlib HTTP server on a free port, decoding with opentelemetry-proto."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import DataPointFlags

_NO_RECORDED_VALUE = DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK


class OTLPReceiver:
    """Collects decoded `ExportTraceServiceRequest` / `ExportMetricsServiceRequest` bodies."""

    def __init__(self, port: int = 0) -> None:
        """`port`: 0 for a free one; a receiver's own again, to restart it where a run exports."""
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.content_types: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.content_types.add(self.headers.get("Content-Type", ""))
                if self.path == "/v1/traces":
                    receiver.traces.append(ExportTraceServiceRequest.FromString(body))
                elif self.path == "/v1/metrics":
                    receiver.metrics.append(ExportMetricsServiceRequest.FromString(body))
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list:
        return [s for req in self.traces for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def metric_points(self, name: str) -> list:
        """Data points with a value of a metric over every request (gauge, sum or histogram): not the points
        flagged "no recorded value", which end a series (a statistic a step lacks; what a crashed attempt of the
        run may have left, at a process's start)."""
        found = []
        for req in self.metrics:
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name == name:
                            kind = m.WhichOneof("data")
                            found.extend((m, p) for p in getattr(m, kind).data_points
                                         if not p.flags & _NO_RECORDED_VALUE)
        return found


def attrs(kvs) -> dict:
    """OTLP KeyValue list -> plain dict."""
    out = {}
    for kv in kvs:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


# ---- OTLP back into the SDK's own data classes: one set of assertions over both sinks -----------------
def _value(v):
    """An OTLP AnyValue as the SDK holds it (arrays as tuples)."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def _attributes(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


def readable_spans(receiver: OTLPReceiver) -> list:
    """Every span the receiver got, as `ReadableSpan`s (what an in-memory exporter holds)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import SpanContext, Status, StatusCode

    def context(trace_id: bytes, span_id: bytes):
        return SpanContext(int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), is_remote=False)

    return [ReadableSpan(
        s.name, context=context(s.trace_id, s.span_id),
        parent=context(s.trace_id, s.parent_span_id) if s.parent_span_id else None,
        attributes=_attributes(s.attributes), start_time=s.start_time_unix_nano, end_time=s.end_time_unix_nano,
        events=[Event(e.name, _attributes(e.attributes), e.time_unix_nano) for e in s.events],
        status=Status(StatusCode(s.status.code), s.status.message or None),
    ) for s in receiver.spans()]


def sdk_metrics(receiver: OTLPReceiver) -> dict:
    """The metrics of the latest export, by name, as the SDK's `Metric`s (what an in-memory reader collects)."""
    from opentelemetry.sdk.metrics.export import (AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
                                                  Metric, NumberDataPoint, Sum)

    def number(p):
        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
        return NumberDataPoint(_attributes(p.attributes), p.start_time_unix_nano, p.time_unix_nano, value)

    def histogram(p):
        return HistogramDataPoint(_attributes(p.attributes), p.start_time_unix_nano, p.time_unix_nano, p.count,
                                  p.sum, list(p.bucket_counts), list(p.explicit_bounds), p.min, p.max)

    latest = [req for req in receiver.metrics if req.resource_metrics]
    out = {}
    for rm in latest[-1].resource_metrics if latest else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind == "gauge":
                    # a point flagged "no recorded value" ends its series (as the collector reads it): no value
                    valued = [number(p) for p in m.gauge.data_points if not p.flags & _NO_RECORDED_VALUE]
                    if not valued:
                        continue
                    data = Gauge(valued)
                elif kind == "sum":
                    data = Sum([number(p) for p in m.sum.data_points],
                               AggregationTemporality(m.sum.aggregation_temporality), m.sum.is_monotonic)
                else:
                    data = Histogram([histogram(p) for p in m.histogram.data_points],
                                     AggregationTemporality(m.histogram.aggregation_temporality))
                out[m.name] = Metric(m.name, m.description, m.unit, data)
    return out
