"""`EndedSeries`: the export after a gauge series' last one says "no recorded value" for it, once it got through.

On the requests the SDK's OTLP encoder makes (opentelemetry-proto); the collector's reading of the marker:
tests/stack/test_collector_absent.py.
"""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import DataPointFlags
from opentelemetry.sdk.metrics.export import MetricExportResult

from otel_grpo.telemetry._ended_series import EndedSeries

NO_VALUE = DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
OK, FAILED = MetricExportResult.SUCCESS, MetricExportResult.FAILURE


def request(gauges: dict[str, dict[str, float]], counter: float | None = None) -> ExportMetricsServiceRequest:
    """One resource and scope; `gauges`: name -> {reward_fn label (or "" for none): value}."""
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.add(key="service.instance.id", value=AnyValue(string_value="run-1"))
    sm = rm.scope_metrics.add()
    sm.scope.name = "otel_grpo"
    for name, points in gauges.items():
        metric = sm.metrics.add(name=name, unit="{ratio}")
        for label, value in points.items():
            point = metric.gauge.data_points.add(as_double=value, time_unix_nano=1)
            point.attributes.add(key="run_id", value=AnyValue(string_value="run-1"))
            if label:
                point.attributes.add(key="reward_fn", value=AnyValue(string_value=label))
    if counter is not None:
        sm.metrics.add(name="grpo.steps").sum.data_points.add(as_double=counter)
    return req


def ended(req: ExportMetricsServiceRequest) -> list[tuple[str, str, dict]]:
    """(resource instance, metric, point attributes) of each point flagged "no recorded value"."""
    out = []
    for rm in req.resource_metrics:
        instance = {a.key: a.value.string_value for a in rm.resource.attributes}["service.instance.id"]
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                flagged = [p for p in m.gauge.data_points if p.flags & NO_VALUE]
                assert not flagged or len(m.gauge.data_points) == 1, "a marker shares its Metric"
                out += [(instance, m.name, {a.key: a.value.string_value for a in p.attributes}) for p in flagged]
    return out


def export(series: EndedSeries, req: ExportMetricsServiceRequest, result=OK) -> list:
    marked = series.mark(req)
    series.settle(result)
    return ended(marked)


def test_a_series_an_export_lacks_is_ended_once():
    series = EndedSeries()
    assert export(series, request({"grpo.kl": {"": 0.1}, "grpo.reward_fn.mean": {"fmt": 0.5, "acc": 1.0}}, 1)) == []
    assert export(series, request({"grpo.kl": {"": 0.2}, "grpo.reward_fn.mean": {"acc": 0.5}}, 2)) == [
        ("run-1", "grpo.reward_fn.mean", {"run_id": "run-1", "reward_fn": "fmt"})]
    assert export(series, request({"grpo.kl": {"": 0.3}, "grpo.reward_fn.mean": {"acc": 0.5}}, 3)) == []
    # every gauge gone (a step that reported none), counters still there: each gauge series ended
    assert sorted(m for _, m, _ in export(series, request({}, 4))) == ["grpo.kl", "grpo.reward_fn.mean"]
    assert export(series, request({"grpo.kl": {"": 0.4}})) == []


def test_a_failed_export_ends_the_series_again_at_the_next_one():
    """The collector may never have seen the marker of an export that failed."""
    series = EndedSeries()
    export(series, request({"grpo.kl": {"": 0.1}, "grpo.reward.mean": {"": 0.5}}))
    assert [m for _, m, _ in export(series, request({"grpo.kl": {"": 0.2}}), FAILED)] == ["grpo.reward.mean"]
    assert [m for _, m, _ in export(series, request({"grpo.kl": {"": 0.3}}))] == ["grpo.reward.mean"]
    assert export(series, request({"grpo.kl": {"": 0.4}})) == []


def test_an_export_without_the_resource_brings_it_along_with_the_marker():
    series = EndedSeries()
    export(series, request({"grpo.kl": {"": 0.1}}))
    empty = ExportMetricsServiceRequest()
    assert export(series, empty) == [("run-1", "grpo.kl", {"run_id": "run-1"})]
    assert empty.resource_metrics[0].scope_metrics[0].scope.name == "otel_grpo"


def test_the_retries_of_one_export_carry_the_same_markers():
    series = EndedSeries()
    export(series, request({"grpo.kl": {"": 0.1}, "grpo.reward.mean": {"": 0.5}}))
    tries = [ended(series.mark(request({"grpo.kl": {"": 0.2}}))) for _ in range(3)]  # gRPC re-encodes each try
    series.settle(OK)
    assert tries == [[("run-1", "grpo.reward.mean", {"run_id": "run-1"})]] * 3
    assert export(series, request({"grpo.kl": {"": 0.3}})) == []


def test_what_an_earlier_process_may_have_left_is_ended_in_the_first_export():
    """A relaunch under the same target labels: the crashed attempt's per-step series are ended at the new
    process's first export (unless it renews them), and again after a failed one; once only."""
    series = EndedSeries()
    run = {"run_id": "run-1"}
    series.end_earlier([("grpo.kl", "{nat}", run), ("grpo.reward.mean", "{reward}", run), ("grpo.entropy", "{nat}", run)])
    first = series.mark(request({"grpo.entropy": {"": 0.5}}))  # this one it has: renewed, not ended
    series.settle(FAILED)
    assert sorted(m for _, m, _ in ended(first)) == ["grpo.kl", "grpo.reward.mean"]
    assert ended(first)[0][2] == {"run_id": "run-1"}
    units = {m.name: m.unit for rm in first.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert units["grpo.kl"] == "{nat}"  # part of the series' name on the collector's Prometheus endpoint
    assert sorted(m for _, m, _ in export(series, request({"grpo.entropy": {"": 0.6}}))) == ["grpo.kl",
                                                                                           "grpo.reward.mean"]
    assert export(series, request({"grpo.entropy": {"": 0.7}})) == []
    assert export(series, request({"grpo.kl": {"": 0.1}, "grpo.entropy": {"": 0.7}})) == []
