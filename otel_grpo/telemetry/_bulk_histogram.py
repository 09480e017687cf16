"""Recording a whole vector of values into an SDK histogram in one pass.

    recorder = HistogramRecorder(meter.create_histogram("grpo.sample.reward", ...))
    dropped = recorder.record_many([0.0, 1.0, -0.5], {"run_id": "exp-42"})

Why: the SDK's `Histogram.record` builds a `Measurement`, cleans and hashes the
attributes and goes through three layers of consumers for every value, so
per-sample histograms over a step's completions cost emitter time in proportion
to the completions, GIL time that a Python-bound training loop waits for (the
figures: benchmarks/README.md, costs). All values of one vector share their
attributes, so the data point of each reader can be looked up once and its
bucket counts, sum, min and max updated in one loop under the aggregation's own
lock: the state that one `aggregate()` call per value would leave. It also keeps
negative values, which `Histogram.record` drops with a warning although rewards
and advantages are signed and OTLP histograms allow them.

This reaches into `opentelemetry.sdk.metrics._internal`, checked once per
instrument. Where it is not as expected (an SDK whose internals moved, a meter
provider that is not the SDK's), values go through `record` one by one, and
negative values are dropped and counted. The internals are those of SDK 1.45
(1.44 and older lack them, so the fast path would be lost): pyproject.toml pins
that minor, and tests/telemetry/test_bulk_histogram.py fails if the installed SDK
makes this fall back. Exemplars are not sampled on the fast
path: a per-sample reward carries no trace context worth linking.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from time import time_ns
from typing import Any, Mapping, Sequence

from opentelemetry.context import get_current

logger = logging.getLogger("otel_grpo.telemetry")

try:  # SDK internals; any of them missing switches to the per-value path
    from opentelemetry.sdk.metrics._internal._view_instrument_match import _hash_attributes, _ViewInstrumentMatch
    from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
    from opentelemetry.sdk.metrics._internal.measurement import Measurement
except ImportError:  # pragma: no cover - depends on the installed SDK
    _ViewInstrumentMatch = None  # type: ignore[assignment,misc]

_BUCKET_FIELDS = ("_lock", "_value", "_boundaries", "_sum", "_min", "_max", "_record_min_max", "_get_empty_bucket_counts")


def _sdk_consumer(histogram: Any) -> Any | None:
    """The SDK measurement consumer behind `histogram`, if the fast path can use it."""
    if _ViewInstrumentMatch is None:
        return None
    consumer = getattr(histogram, "_measurement_consumer", None)
    storages = getattr(consumer, "_reader_storages", None)
    if not isinstance(storages, dict):
        return None
    if not all(hasattr(s, "_get_or_init_view_instrument_match") for s in storages.values()):
        return None
    if not all(hasattr(_ViewInstrumentMatch, name) for name in ("_get_or_create_aggregation", "consume_measurement")):
        return None
    return consumer


class HistogramRecorder:
    """Adds batches of finite values to one histogram instrument."""

    __slots__ = ("_histogram", "_consumer")

    def __init__(self, histogram: Any) -> None:
        self._histogram = histogram
        self._consumer = _sdk_consumer(histogram)

    @property
    def fast(self) -> bool:
        """True where batches go straight into the SDK's aggregations (negative values kept)."""
        return self._consumer is not None

    def record_many(self, values: Sequence[float], attributes: Mapping[str, Any]) -> int:
        """Record finite `values`; returns how many negative values had to be dropped (0 on the fast path)."""
        if not values:
            return 0
        enabled = getattr(self._histogram, "_is_enabled", None)
        if self._consumer is None or (enabled is not None and not enabled()):
            return self._one_by_one(values, attributes)
        # One measurement, for the attribute cleaning `record` would do (and a fallback for other aggregations).
        first = Measurement(values[0], time_ns(), self._histogram, get_current(), attributes)
        cleaned = first.attributes or {}
        for storage in self._consumer._reader_storages.values():
            for match in storage._get_or_init_view_instrument_match(self._histogram):
                self._add_to_match(match, first, cleaned, values)
        return 0

    def _add_to_match(self, match: Any, first: Any, cleaned: Mapping[str, Any], values: Sequence[float]) -> None:
        keys = match._view._attribute_keys
        attrs = {k: v for k, v in cleaned.items() if k in keys} if keys is not None else dict(cleaned)
        key = _hash_attributes(attrs)
        # The view's lock, as `consume_measurement` takes it: a delta collection between lookup and
        # update would otherwise discard the aggregation along with these values.
        with match._lock:
            aggregation = match._get_or_create_aggregation(key, attrs)
            if type(aggregation) is _ExplicitBucketHistogramAggregation and all(
                hasattr(aggregation, name) for name in _BUCKET_FIELDS
            ):
                _add_to_buckets(aggregation, values)
            else:  # exponential buckets or a custom view: its own aggregate(), still without re-hashing
                for value in values:
                    aggregation.aggregate(
                        Measurement(value, first.time_unix_nano, first.instrument, first.context, cleaned), False
                    )

    def _one_by_one(self, values: Sequence[float], attributes: Mapping[str, Any]) -> int:
        record, dropped = self._histogram.record, 0
        for value in values:
            if value < 0:
                dropped += 1  # `record` would drop it too, with a warning per value
            else:
                record(value, attributes)
        return dropped


def _add_to_buckets(aggregation: Any, values: Sequence[float]) -> None:
    """What `_ExplicitBucketHistogramAggregation.aggregate` does per value, for all of them at once."""
    with aggregation._lock:
        if aggregation._value is None:
            aggregation._value = aggregation._get_empty_bucket_counts()
        counts, bounds, total = aggregation._value, aggregation._boundaries, aggregation._sum
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value  # in order, as per-value aggregation adds: the same float sum
        aggregation._sum = total
        if aggregation._record_min_max:
            aggregation._min = min(aggregation._min, min(values))
            aggregation._max = max(aggregation._max, max(values))
