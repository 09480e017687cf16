"""OTel instruments created from the catalog, and the per-name routes that feed them.

    instruments = Instruments(meter, {"run_id": "exp-42"})
    span_attrs = instruments.record_scalars({"kl": 0.1, "clip_ratio/high_mean": 0.02})
    instruments.record_samples({"sample_reward": [0.0, 1.0, 1.0]})

A name (stat key, TRL or verl name, or anything else) is resolved once into a
`Route`; after that, recording a value is one dict lookup and one SDK call.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from otel_grpo.catalog import (EVAL_KEY, PROCESS, SIGNALS, STATE_GAUGES, STOPS_TRAINING, Kind, Signal, StepCheck, get,
                               process_id, resolve, sanitize_key)

from . import _clock as clock
from ._bulk_histogram import HistogramRecorder
from ._gauges import LatestValueGauge, StepGauges
from ._streaks import StepStreaks

logger = logging.getLogger("otel_grpo.telemetry")

EXTRA_PREFIX = "grpo.extra."
EXTRA_UNIT = "{value}"  # braces: both Prometheus paths drop it (never "1", see ARCHITECTURE.md)
_MAX_NAME = 200
# Step checks whose judged value (catalog `judged`: grpo.kl, else TRL's kl) is also observed once per
# step into a histogram: its bucket counters count the steps above each bound (dashboards).
STEP_DISTRIBUTIONS = {"kl": "step_kl"}


@dataclass(frozen=True, slots=True)
class Route:
    """Where values of one input name go."""

    stat_key: str
    """Key in the step history: `kl`, `reward_fn_mean/format`, or the sanitized unknown name."""
    kind: Kind
    record: Callable[[float, Mapping[str, Any]], None]
    attributes: Mapping[str, Any]
    """Data-point attributes: run_id (+ rank) + the signal's label, if templated."""
    histogram: HistogramRecorder | None = None
    """Batch recording, for histogram signals."""
    clear: Callable[[Mapping[str, Any]], None] | None = None
    """Gauges: drop the series' current value (a non-finite value: the signal is absent at this step)."""


class Instruments:
    """Instruments of one `Telemetry`, created lazily from the catalog on first use."""

    def __init__(self, meter: Meter, base_attributes: Mapping[str, Any], promise_s: float = 0.0) -> None:
        """`promise_s`: the push readers' export interval (0 where only a scrape collects): how long each
        collection vouches for this process (`grpo.process.alive_until`)."""
        self._meter = meter
        self._base = dict(base_attributes)
        # The alerts' event counters count in this process's own series: a resumed run's first
        # events are new series, whatever the old process had counted (catalog `_step_checks`).
        process = process_id()
        self._events = {**self._base, PROCESS: process}
        self._by_name: dict[str, Any] = {}
        self._routes: dict[str, Route | None] = {}
        self._warned: set[str] = set()
        self._extra_owners: dict[str, str] = {}  # an extra gauge's name -> the input name that made it
        self._histograms: dict[str, HistogramRecorder] = {}
        self._gauge_steps = StepGauges()  # per-step gauges: only the latest step's values are current
        self._steps = self._instrument(get("steps"))
        self._skipped = self._instrument(get("skipped_steps"))
        self._nonfinite = self._instrument(get("nonfinite"))
        # The counters that page exist at 0 from the start (skipped steps, the non-finite counts of the signals that
        # stop training), as the step evidence's from a scalar's first step: a Prometheus that first sees the run
        # mid-flight (a restart that lost its storage) then sees an event as an increase of a known series. A
        # series first seen above 0 cannot tell an event now from one hours ago, and counts only once Prometheus
        # has watched the run for `counter_window`.
        self._skipped.add(0, self._events)
        for key in STOPS_TRAINING:
            self.count_nonfinite(get(key).key, 0)
        self._phase = self._recorder(get("phase_duration"))
        self._phase_attrs: dict[str, dict[str, Any]] = {}
        self._step_route = self._route_for(get("step"), {})
        self._interval_route = self._route_for(get("log_interval"), {})
        self._per_step = {key: self._route_for(get(target), {}) for key, target in STEP_DISTRIBUTIONS.items()}
        self._streaks = StepStreaks(meter, self._base, self._instrument(get("step_streak")), process)
        # Exported from the start, before any step: a run that hangs or dies before its first step pages
        started = self._route_for(get("process_start"), {})
        started.record(float(process), started.attributes)
        self._activity_route = self._route_for(get("activity"), {})
        self._step_end_route = self._route_for(get("step_end"), {})
        # A process's start says "running": a resumed run's (or a reused run id's) earlier end no longer counts.
        for key in ("run_finished", "run_preempted"):
            route = self._route_for(get(key), {})
            route.record(0.0, route.attributes)
        alive = get("alive")
        self._promise_s = promise_s
        meter.create_observable_gauge(alive.name, [self._vouch], unit=alive.unit, description=alive.description)
        # This process's clock at each collection: Prometheus learns its offset from it (its own scrape time minus
        # this), and so judges the times above on its own clock, however far off this host's clock is.
        clock = get("clock")
        meter.create_observable_gauge(clock.name, [self._clock], unit=clock.unit, description=clock.description)

    # ---- instruments ---------------------------------------------------------------
    def step_gauge_series(self) -> list[tuple[str, str, Mapping[str, Any]]]:
        """(name, unit, point attributes) of every per-step gauge series this process can name before it has
        recorded anything: the catalog's untemplated ones (a templated one's labels, a reward function's
        name, and extras are known only once logged)."""
        return [(s.name, s.unit, self._base) for s in SIGNALS
                if s.kind is Kind.GAUGE and s.label is None and s.key not in STATE_GAUGES]

    def _instrument(self, signal: Signal) -> Any:
        found = self._by_name.get(signal.name)
        if found is None:
            found = self._create(signal.name, signal.kind, signal.unit, signal.description, signal.buckets,
                                 per_step=signal.key not in STATE_GAUGES, evaluation=signal.key == EVAL_KEY)
            self._by_name[signal.name] = found
        return found

    def _recorder(self, signal: Signal) -> HistogramRecorder:
        """A histogram signal's instrument, to record values in batches."""
        self._instrument(signal)
        return self._histograms[signal.name]

    def _create(self, name: str, kind: Kind, unit: str, desc: str, buckets: tuple[float, ...] | None,
                per_step: bool = True, evaluation: bool = False) -> Any:
        meter = self._meter
        if kind is Kind.COUNTER:
            return meter.create_counter(name, unit=unit, description=desc)
        if kind is Kind.HISTOGRAM:
            histogram = meter.create_histogram(
                name, unit=unit, description=desc, explicit_bucket_boundaries_advisory=list(buckets or ())
            )
            self._histograms[name] = HistogramRecorder(histogram)
            return histogram
        return LatestValueGauge(meter, name, unit, desc, self._gauge_steps, per_step=per_step, evaluation=evaluation)

    def _route_for(self, signal: Signal, labels: Mapping[str, str]) -> Route:
        instrument = self._instrument(signal)
        kind, histogram = signal.kind, self._histograms.get(signal.name)
        if histogram is not None:
            record = lambda value, attributes: histogram.record_many((value,), attributes)  # noqa: E731
        else:
            record = instrument.set if kind is Kind.GAUGE else instrument.add
        stat_key = f"{signal.key}/{labels[signal.label]}" if signal.label and signal.label in labels else signal.key
        clear = instrument.clear if kind is Kind.GAUGE else None
        return Route(stat_key, kind, record, {**self._base, **labels}, histogram, clear)

    def _extra_route(self, key: str, original: str) -> Route:
        """The gauge `grpo.extra.<key>` for `original`, or where another input name sanitizes to the same one (`a/b`
        and `a_b`; two names alike in their first 200 characters), a gauge of its own, marked with its name's hash:
        one series would show whichever was recorded last, and a step row would keep one of the two values. The
        plain name is the input's that is its own key (`a_b`), whichever came first: a name logged as given keeps
        its series in every process of the run; `a/b` moves to its marked one when `a_b` comes (said once)."""
        name = (EXTRA_PREFIX + key)[:_MAX_NAME]
        owner = self._extra_owners.setdefault(name, original)
        if owner != original:
            if original == key and sanitize_key(owner) != owner:  # its own key: it takes the plain name back
                self._extra_owners[name] = original
                self._routes[owner] = self._marked_route(sanitize_key(owner), owner, name, original)
            else:
                return self._marked_route(key, original, name, owner)
        return self._gauge_route(key, original, name)

    def _marked_route(self, key: str, original: str, shared: str, owner: str) -> Route:
        mark = "_" + hashlib.blake2s(original.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
        name = shared[:_MAX_NAME - len(mark)] + mark
        self._extra_owners.setdefault(name, original)
        self._warn_once("extra:" + original, "metric names %r and %r both export as %s; %r exports as %s",
                        owner, original, shared, original, name)
        return self._gauge_route(key + mark, original, name)

    def _gauge_route(self, key: str, original: str, name: str) -> Route:
        gauge = self._by_name.get(name)
        if gauge is None:
            desc = f"Metric {original!r} logged by the trainer; not in the otel-grpo catalog."
            gauge = self._by_name[name] = self._create(name, Kind.GAUGE, EXTRA_UNIT, desc, None)
        return Route(key, Kind.GAUGE, gauge.set, dict(self._base), clear=gauge.clear)

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
    def begin_record(self, evaluation: bool, step: int, attempt: int | None = None) -> bool:
        """The per-step gauge values recorded from here to `end_record` are those of one record of `step` (a step's
        or an evaluation's; `attempt` None: the newest attempt's). Returns whether the record is of an older
        attempt than the newest recorded (an evaluation's too: a relaunch's `val_before_train`): it sets nothing."""
        return self._gauge_steps.begin_record(evaluation, step, attempt)

    def end_record(self) -> None:
        """The record is in: if it is of the latest step (or a newer attempt's), per-step gauges it gave no value
        are stale."""
        self._gauge_steps.end_record()

    def count_nonfinite(self, stat_key: str, count: int = 1) -> None:
        self._nonfinite.add(count, {**self._events, "signal": stat_key})

    def record_scalars(self, values: Mapping[str, float]) -> dict[str, float]:
        """Record one step's scalars; returns `{stat_key: value}` of those it took, non-finite ones included (span
        attributes: the sidecar stores a non-finite value as null, in place of any earlier one of the step)."""
        taken: dict[str, float] = {}
        if not self._routes.keys() >= values.keys():  # new names first: one may move an earlier one's extra gauge
            for name in values:  # in the dict's order, as before
                if name not in self._routes:
                    self.route(name)
        for name, value in values.items():
            route = self._routes.get(name) or self.route(name)
            if route is None:
                continue
            if not math.isfinite(value):
                # Never a gauge value (a NaN breaks alerts), and the last good one is not current
                # either (a TRL reward function that returned None for a whole step): no data point,
                # even where an earlier record of this step set one.
                self.count_nonfinite(route.stat_key)
                if route.clear is not None:
                    route.clear(route.attributes)
                taken[route.stat_key] = value
                continue
            if route.kind is Kind.COUNTER and value < 0:
                self._warn_once(route.stat_key, "counter %r got a negative value; dropped", route.stat_key)
                continue
            route.record(value, route.attributes)
            taken[route.stat_key] = value
            self._streaks.observe(route.stat_key, value)
        return taken

    def record_samples(self, samples: Mapping[str, list[float]]) -> None:
        """Per-sample vectors into their histograms (non-finite values counted, not recorded)."""
        for name, values in samples.items():
            route = self._routes.get(name) or self.route(name)
            if route is None:
                continue
            if route.histogram is None:
                self._warn_once(name, "samples of %r: not a histogram signal; dropped", name)
                continue
            finite = [v for v in values if math.isfinite(v)]
            bad = len(values) - len(finite)
            dropped = route.histogram.record_many(finite, route.attributes)
            if bad:
                self.count_nonfinite(route.stat_key, bad)
            if dropped:
                self._warn_once(name, "this meter provider's histograms take no negative values; %d of %r dropped",
                                dropped, name)

    def record_phases(self, durations: Mapping[str, list[float]]) -> None:
        """Phase durations in seconds by phase name: one batch per phase (a record of ten trainer steps holds
        ten of each)."""
        for phase, seconds in durations.items():
            attrs = self._phase_attrs.get(phase)
            if attrs is None:
                attrs = self._phase_attrs[phase] = {**self._base, "phase": phase}
            self._phase.record_many(seconds, attrs)  # durations are never negative: nothing dropped

    def _vouch(self, _options: CallbackOptions) -> Iterable[Observation]:
        """Read at each collection: this process is alive now, and until its next export."""
        return [Observation(clock.now_s() + self._promise_s, dict(self._base))]

    def _clock(self, _options: CallbackOptions) -> Iterable[Observation]:
        """Read at each collection: the time on this process's clock."""
        return [Observation(clock.now_s(), dict(self._base))]

    def closing(self) -> None:
        """The process is going away: its last collections vouch for no further export."""
        self._promise_s = 0.0

    def record_activity(self, unix_s: float) -> None:
        """The time of the process's latest work between steps (a heartbeat)."""
        self._activity_route.record(unix_s, self._activity_route.attributes)

    def count_steps(self, steps: int, last_step: int, skipped: bool, interval_s: float | None,
                    end_s: float, restart: bool = False) -> None:
        """Progress counters, the `step`, `step_end` and `log_interval` gauges and the step checks' streaks (once
        per new latest step of the latest attempt; `interval_s`: the wall time since the previous progress, None:
        the step recorded its own; `end_s`: the step's end, Unix seconds; `restart`: the step is a newer
        attempt's first, whose streaks start again)."""
        if restart:
            self._streaks.restart()
        self._judged(self._streaks.end_step())
        self._step_end_route.record(end_s, self._step_end_route.attributes)
        if steps > 0:
            self._steps.add(steps, self._base)
        if skipped:
            self._skipped.add(1, self._events)
        self._step_route.record(float(last_step), self._step_route.attributes)
        if interval_s is not None:
            self._interval_route.record(interval_s, self._interval_route.attributes)

    def count_again(self, skipped: bool, latest: bool) -> None:
        """A training record that is no new step: a further record of the latest step (`latest`: it judges the
        checks that step has not judged yet), else a late one of an earlier step or of an older attempt (it judges
        none). No step, interval or end time; a skipped update is still one."""
        if latest:
            self._judged(self._streaks.end_step(again=True))
        else:
            self._streaks.discard()
        if skipped:
            self._skipped.add(1, self._events)

    def _judged(self, checks: list[tuple[StepCheck, float]]) -> None:
        """The per-step histograms of the checks a step judged (`STEP_DISTRIBUTIONS`): one observation a step."""
        for check, value in checks:
            per_step = self._per_step.get(check.name)
            if per_step is not None:
                per_step.record(value, per_step.attributes)
