"""A batch the OTLP encoder refuses is no outage: no endpoint would ever take it. It is said once as the bug it is
and not counted as an export failure (a follower answers a failure by sending the same batch again, for ever),
and the batches after it go out. The real SDK exporter, encoder and an OTLP/HTTP receiver."""

from __future__ import annotations

import logging

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_grpo.telemetry._quiet import ExportHealth, QuietSpanExporter

from ._receiver import OTLPReceiver


def _span(tracer, name: str, start_ns: int):
    span = tracer.start_span(name, start_time=start_ns)
    span.end(end_time=max(start_ns, 0) + 1_000)
    return span


def test_a_batch_the_encoder_refuses_is_said_once_and_is_no_export_failure(caplog):
    tracer = TracerProvider().get_tracer("test")
    health = ExportHealth()
    with OTLPReceiver() as rx:
        exporter = QuietSpanExporter(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{rx.port}/v1/traces"), "rx", health)
        with caplog.at_level(logging.INFO, logger="otel_grpo.telemetry"):
            for _ in range(3):  # before 1970: a fixed64 the encoder cannot write
                assert exporter.export([_span(tracer, "bad", -5), _span(tracer, "good", 5)]) is SpanExportResult.FAILURE
            assert exporter.export([_span(tracer, "after", 1_000)]) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert [s.name for s in rx.spans()] == ["after"]
    assert (health.dropped, health.failures, health.failing) == (3, 0, False)
    said = [r for r in caplog.records if r.name == "otel_grpo.telemetry"]
    assert len(said) == 1 and said[0].levelno == logging.ERROR, [r.getMessage() for r in said]
    assert said[0].getMessage().startswith("otel-grpo: 2 spans of traces for rx could not be encoded (Failed to "
                                           "encode span batch: ")
    assert "please report it" in said[0].getMessage()


def test_over_grpc_an_encoder_refusal_is_no_export_failure_either(caplog):
    """The gRPC exporter encodes inside `export` and lets protobuf's ValueError out (its network failures are
    handled within): the same refusal, not an outage. No endpoint is needed: nothing is sent."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    tracer = TracerProvider().get_tracer("test")
    health = ExportHealth()
    exporter = QuietSpanExporter(GrpcSpanExporter(endpoint="127.0.0.1:9", insecure=True, timeout=1), "grpc", health)
    with caplog.at_level(logging.INFO, logger="otel_grpo.telemetry"):
        assert exporter.export([_span(tracer, "bad", -5)]) is SpanExportResult.FAILURE
    exporter.shutdown()
    assert (health.dropped, health.failures) == (1, 0)
    (said,) = [r.getMessage() for r in caplog.records if r.name == "otel_grpo.telemetry"]
    assert said.startswith("otel-grpo: 1 spans of traces for grpc could not be encoded (ValueError(")
