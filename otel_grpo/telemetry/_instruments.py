"""OTel instruments created from the catalog, and the per-name routes that feed them.

    instruments = Instruments(meter, {"run_id": "exp-42"})
    span_attrs = instruments.record_scalars({"kl": 0.1, "clip_ratio/high_mean": 0.02})
    instruments.record_samples({"sample_reward": [0.0, 1.0, 1.0]})

A name (stat key, TRL or verl name, or anything else) is resolved once into a
`Route`; after that, recording a value is one dict lookup and one SDK call.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from opentelemetry.context import get_current
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from otel_grpo.catalog import Kind, Signal, get, resolve, sanitize_key

logger = logging.getLogger("otel_grpo.telemetry")

EXTRA_PREFIX = "grpo.extra."
EXTRA_UNIT = "{value}"  # braces: both Prometheus paths drop it (never "1", see ARCHITECTURE.md)
_MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class Route:
    """Where values of one input name go."""

    stat_key: str
    """Key in the step history: `kl`, `reward_fn_mean/format`, or the sanitized unknown name."""
    kind: Kind
    record: Callable[[float, Mapping[str, Any]], None]
    attributes: Mapping[str, Any]
    """Data-point attributes: run_id (+ rank) + the signal's label, if templated."""
    takes_negative: bool = True
    """False for a histogram of a meter provider that drops negative values."""


class _ObservedGauge:
    """`set()` for SDKs without synchronous gauges: an observable gauge reading the last values."""

    def __init__(self, meter: Meter, name: str, unit: str, description: str) -> None:
        self._last: dict[frozenset, tuple[float, Mapping[str, Any]]] = {}
        meter.create_observable_gauge(name, [self._observe], unit=unit, description=description)

    def set(self, value: float, attributes: Mapping[str, Any]) -> None:
        self._last[frozenset(attributes.items())] = (value, attributes)

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(v, dict(a)) for v, a in list(self._last.values())]


def _signed_recorder(histogram: Any) -> Callable[[float, Mapping[str, Any]], None] | None:
    """A `record` that keeps negative values, for SDK histograms; None where that is not possible.

    The Python SDK's `Histogram.record` drops negative values (one warning each),
    yet rewards and advantages are signed and their catalog buckets are too. The
    SDK's aggregation handles negatives fine (OTLP allows them), so negative
    values go straight to the histogram's measurement consumer, as `record` would
    after its check. This leans on SDK internals; without them, negatives are
    counted as dropped instead (see `Instruments.record_samples`).
    """
    consumer = getattr(histogram, "_measurement_consumer", None)
    try:
        from opentelemetry.sdk.metrics._internal.measurement import Measurement
    except ImportError:  # pragma: no cover - SDK layout changed
        return None
    if consumer is None:
        return None
    record = histogram.record

    def signed(value: float, attributes: Mapping[str, Any]) -> None:
        if value >= 0:
            record(value, attributes)
        else:
            consumer.consume_measurement(Measurement(value, time.time_ns(), histogram, get_current(), attributes))

    return signed


class Instruments:
    """Instruments of one `Telemetry`, created lazily from the catalog on first use."""

    def __init__(self, meter: Meter, base_attributes: Mapping[str, Any]) -> None:
        self._meter = meter
        self._base = dict(base_attributes)
        self._by_name: dict[str, Any] = {}
        self._routes: dict[str, Route | None] = {}
        self._warned: set[str] = set()
        self._signed: dict[str, Callable[[float, Mapping[str, Any]], None]] = {}
        self._steps = self._instrument(get("steps"))
        self._skipped = self._instrument(get("skipped_steps"))
        self._nonfinite = self._instrument(get("nonfinite"))
        self._phase = self._instrument(get("phase_duration"))
        self._step_route = self._route_for(get("step"), {})

    # ---- instruments ---------------------------------------------------------------
    def _instrument(self, signal: Signal) -> Any:
        found = self._by_name.get(signal.name)
        if found is None:
            found = self._create(signal.name, signal.kind, signal.unit, signal.description, signal.buckets)
            self._by_name[signal.name] = found
        return found

    def _create(self, name: str, kind: Kind, unit: str, desc: str, buckets: tuple[float, ...] | None) -> Any:
        meter = self._meter
        if kind is Kind.COUNTER:
            return meter.create_counter(name, unit=unit, description=desc)
        if kind is Kind.HISTOGRAM:
            histogram = meter.create_histogram(
                name, unit=unit, description=desc, explicit_bucket_boundaries_advisory=list(buckets or ())
            )
            signed = _signed_recorder(histogram)
            if signed is not None:
                self._signed[name] = signed
            return histogram
        if hasattr(meter, "create_gauge"):
            return meter.create_gauge(name, unit=unit, description=desc)
        return _ObservedGauge(meter, name, unit, desc)

    def _route_for(self, signal: Signal, labels: Mapping[str, str]) -> Route:
        instrument = self._instrument(signal)
        kind, signed = signal.kind, self._signed.get(signal.name)
        if kind is Kind.HISTOGRAM:
            record = signed or instrument.record
        else:
            record = instrument.set if kind is Kind.GAUGE else instrument.add
        stat_key = f"{signal.key}/{labels[signal.label]}" if signal.label and signal.label in labels else signal.key
        takes_negative = kind is not Kind.HISTOGRAM or signed is not None
        return Route(stat_key, kind, record, {**self._base, **labels}, takes_negative)

    def _extra_route(self, key: str, original: str) -> Route:
        name = (EXTRA_PREFIX + key)[:_MAX_NAME]
        gauge = self._by_name.get(name)
        if gauge is None:
            desc = f"Metric {original!r} logged by the trainer; not in the otel-grpo catalog."
            gauge = self._by_name[name] = self._create(name, Kind.GAUGE, EXTRA_UNIT, desc, None)
        return Route(key, Kind.GAUGE, gauge.set, dict(self._base))

    def route(self, name: str) -> Route | None:
        """The route of an input name, resolved once: catalog (key or alias), else a sanitized extra gauge."""
        try:
            return self._routes[name]
        except KeyError:
            pass
        found = resolve(name)
        route: Route | None
        if found is not None:
            route = self._route_for(*found)
        else:
            try:
                key = sanitize_key(name)
            except ValueError:
                self._warn_once(name, "metric name %r has no usable characters; dropped", name)
                route = None
            else:
                again = resolve(key)  # "KL" or "Clip Ratio/Low Mean" are still catalog names
                route = self._route_for(*again) if again is not None else self._extra_route(key, name)
        self._routes[name] = route
        return route

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("otel-grpo: " + msg, *args)

    # ---- recording (background thread) -------------------------------------------------
    def count_nonfinite(self, stat_key: str, count: int = 1) -> None:
        self._nonfinite.add(count, {**self._base, "signal": stat_key})

    def record_scalars(self, values: Mapping[str, float]) -> dict[str, float]:
        """Record one step's scalars; returns `{stat_key: value}` of the finite ones (span attributes)."""
        finite: dict[str, float] = {}
        for name, value in values.items():
            route = self._routes.get(name) or self.route(name)
            if route is None:
                continue
            if not math.isfinite(value):
                # Never a gauge value: a NaN would hide the last good value and break alerts.
                self.count_nonfinite(route.stat_key)
                continue
            if route.kind is Kind.COUNTER and value < 0:
                self._warn_once(route.stat_key, "counter %r got a negative value; dropped", route.stat_key)
                continue
            route.record(value, route.attributes)
            finite[route.stat_key] = value
        return finite

    def record_samples(self, samples: Mapping[str, list[float]]) -> None:
        """Per-sample vectors into their histograms (non-finite values counted, not recorded)."""
        for name, values in samples.items():
            route = self._routes.get(name) or self.route(name)
            if route is None:
                continue
            if route.kind is not Kind.HISTOGRAM:
                self._warn_once(name, "samples of %r: not a histogram signal; dropped", name)
                continue
            record, attrs, bad, dropped = route.record, route.attributes, 0, 0
            signed = route.takes_negative
            for value in values:
                if not math.isfinite(value):
                    bad += 1
                elif value < 0 and not signed:
                    dropped += 1
                else:
                    record(value, attrs)
            if bad:
                self.count_nonfinite(route.stat_key, bad)
            if dropped:
                self._warn_once(name, "this meter provider's histograms take no negative values; %d of %r dropped",
                                dropped, name)

    def record_phase(self, phase: str, seconds: float) -> None:
        self._phase.record(seconds, {**self._base, "phase": phase})

    def count_steps(self, steps: int, last_step: int, skipped: bool) -> None:
        """Progress counters and the `step` gauge."""
        if steps > 0:
            self._steps.add(steps, self._base)
        if skipped:
            self._skipped.add(1, self._base)
        self._step_route.record(float(last_step), self._step_route.attributes)
