"""The compose path: OTLP over gRPC to a real grpcio server implementing the collector services."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_grpo.telemetry import Telemetry

from ._receiver import attrs


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list = []

    def Export(self, request, context):  # noqa: N802 (generated name)
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self.requests: list = []

    def Export(self, request, context):  # noqa: N802
        self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture
def grpc_collector():
    traces, metrics = _Traces(), _Metrics()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(metrics, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, traces, metrics
    server.stop(None)


def test_grpc_endpoint_from_the_standard_variables(grpc_collector, monkeypatch, tmp_path):
    port, traces, metrics = grpc_collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    tel = Telemetry.from_env(run_id="grpc-1", output_dir=str(tmp_path))
    with tel.step(0) as s:
        s.record({"kl": 0.5})
        s.samples([{"prompt": "p", "completion": "c", "reward": 1.0}])
    tel.shutdown()
    spans = [sp for r in traces.requests for rs in r.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    (step,) = [sp for sp in spans if sp.name == "grpo.step"]
    assert attrs(step.attributes)["grpo.metric.kl"] == 0.5
    assert [sp.name for sp in spans if sp.name == "grpo.samples"] == ["grpo.samples"]
    names = {m.name for r in metrics.requests for rm in r.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"grpo.kl", "grpo.steps", "grpo.step_index"} <= names
