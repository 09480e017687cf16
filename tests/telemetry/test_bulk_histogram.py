"""Batch recording into SDK histograms gives exactly what per-value `record` gives, under every reader set-up."""

from __future__ import annotations

import random
import sys
import threading

import pytest
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

from otel_grpo.telemetry._bulk_histogram import HistogramRecorder

BOUNDS = [0.0, 0.1, 0.25, 0.5, 1.0, 2.0]
ATTRS = {"run_id": "exp-42", "rank": 0}


def _histogram(**reader_kwargs):
    reader = InMemoryMetricReader(**reader_kwargs)
    provider = MeterProvider(metric_readers=[reader])
    histogram = provider.get_meter("t").create_histogram("h", explicit_bucket_boundaries_advisory=BOUNDS)
    return reader, histogram


def _points(reader):
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [
        (dict(p.attributes), p.count, p.sum, p.min, p.max, tuple(p.bucket_counts))
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics for p in m.data.data_points
    ]


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_batches_equal_per_value_records_across_collections(temporality):
    rng = random.Random(0)
    preferred = {SdkHistogram: temporality}
    bulk_reader, bulk = _histogram(preferred_temporality=preferred)
    one_reader, one = _histogram(preferred_temporality=preferred)
    recorder = HistogramRecorder(bulk)
    assert recorder.fast  # the installed SDK's internals are as this module expects (fails on SDK 1.44 and older)
    for _ in range(3):  # a collection between batches: the cumulative point grows, the delta point restarts
        values = [rng.choice(BOUNDS) if rng.random() < 0.2 else rng.uniform(0, 3) for _ in range(256)]
        assert recorder.record_many(values, ATTRS) == 0
        for value in values:
            one.record(value, ATTRS)
        assert _points(bulk_reader) == _points(one_reader)


def test_negative_values_are_kept_on_the_fast_path():
    reader, histogram = _histogram()
    HistogramRecorder(histogram).record_many([-2.0, -0.5, 0.0, 3.0], ATTRS)
    ((attrs, count, total, low, high, buckets),) = _points(reader)
    assert (attrs, count, total, low, high) == (ATTRS, 4, 0.5, -2.0, 3.0)
    assert buckets == (3, 0, 0, 0, 0, 0, 1)  # -2, -0.5 and 0 fall in (-inf, 0]


def test_views_filtering_attributes_and_exponential_buckets_are_respected():
    views = [View(instrument_name="h", attribute_keys={"run_id"}, aggregation=ExponentialBucketHistogramAggregation())]
    reader = InMemoryMetricReader()
    histogram = MeterProvider(metric_readers=[reader], views=views).get_meter("t").create_histogram("h")
    HistogramRecorder(histogram).record_many([0.5, 1.0, 4.0], ATTRS)
    data = reader.get_metrics_data()
    (point,) = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert dict(point.attributes) == {"run_id": "exp-42"}
    assert (point.count, point.sum, point.min, point.max) == (3, 5.5, 0.5, 4.0)


def test_no_value_is_lost_to_concurrent_delta_collections():
    # A delta collection drops each aggregation it collects; switching threads very often makes a
    # collection land between a batch's lookup of its aggregation and its update.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _record_while_collecting()
    finally:
        sys.setswitchinterval(previous)


def _record_while_collecting():
    reader, histogram = _histogram(preferred_temporality={SdkHistogram: AggregationTemporality.DELTA})
    recorder = HistogramRecorder(histogram)
    collected, done = [], threading.Event()

    def collect_until_done():
        while not done.is_set():
            collected.extend(p[1] for p in _points(reader))

    collector = threading.Thread(target=collect_until_done)
    collector.start()
    for _ in range(2000):
        recorder.record_many([0.3] * 64, ATTRS)
    done.set()
    collector.join()
    collected.extend(p[1] for p in _points(reader))
    assert sum(collected) == 2000 * 64


class _ForeignHistogram:
    """A histogram of another meter provider: only the public `record` exists."""

    def __init__(self) -> None:
        self.recorded: list[float] = []

    def record(self, value, attributes=None, context=None):
        self.recorded.append(value)


def test_other_meter_providers_get_one_record_per_value_and_negatives_are_counted():
    foreign = _ForeignHistogram()
    recorder = HistogramRecorder(foreign)
    assert not recorder.fast
    assert recorder.record_many([0.5, -1.0, 2.0, -3.0], ATTRS) == 2
    assert foreign.recorded == [0.5, 2.0]
