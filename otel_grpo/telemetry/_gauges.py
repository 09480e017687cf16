"""Gauges read by the SDK at collection time, and which of their values are current: those of the latest step.

    steps = StepGauges()
    kl = LatestValueGauge(meter, "grpo.kl", "{nat}", "", steps)        # a per-step statistic
    index = LatestValueGauge(meter, "grpo.step_index", "{step}", "", steps, per_step=False)  # state
    steps.begin_record(False, step=1); kl.set(0.1, attrs); steps.end_record()
    steps.begin_record(False, step=2); steps.end_record()              # no kl at step 2: no data point

The gauge set of a step is exactly that step's values: a per-step statistic the latest step did not
give a finite value (invalid there, not logged at that step, TRL's None) has no data point, in OTLP
and on the pull endpoint, instead of an earlier step's value served as current. State gauges
(`per_step=False`, catalog `STATE_GAUGES`: the step index, the run-end markers, the streaks) keep
their last value. A late record (of an earlier step than the latest) or an older attempt's changes no gauge:
the step's span and the sidecar's step row take its values, the gauges stay the latest step's.
"""

from __future__ import annotations

from threading import get_ident
from typing import Any, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation


class StepGauges:
    """Which per-step gauge values are current: those recorded by the latest step.

    Values are stamped with the record (one step's, or one `log_metrics` call's) they came in; the
    record of a later step than any before it makes every older value stale, whatever it reports (a
    failed step that records no statistic leaves none current). Training steps and evaluations are two
    sets, and a value's set is its gauge's (`LatestValueGauge(..., evaluation=True)`: `grpo.eval`), not its
    record's: an evaluation's values are current until the next evaluation, a training step's until the next
    training step, neither ends the other. A record ends the older values of its own set, and of the evaluation
    set where it gave evaluation values (verl logs a validation on its training step's line: that is the run's
    latest evaluation until the next one, not until the next training step). A newer attempt's first record (a
    relaunch, `new_attempt()`) ends both sets, so a failed attempt's evaluation is not served beside the new
    attempt's steps. Several records of one step all stay current (a summary log at the last logged step, a TRL
    step whose samples and scalars arrive apart). A late record (of an earlier step than the latest of a set)
    sets nothing of that set (`late`): a value the latest step lacks has no data point, whatever an earlier step
    said of it, or gauges of two steps would be served side by side (a late step's terminated length beside the
    latest step's clipped ratio of 1). An older attempt's record sets nothing (`older`: the run is the newer
    attempt, whatever the crashed one's files still hold for a follower to send).
    """

    __slots__ = ("stamp", "evaluation", "older", "late", "gave", "recording", "position", "_current", "_latest",
                 "_attempt")

    def __init__(self) -> None:
        self.stamp = 0
        """The record being recorded."""
        self.evaluation = False
        """The record being recorded is an evaluation's."""
        self.older = False
        """The record being recorded is an older attempt's than the newest recorded: it sets no gauge."""
        self.late = [False, False]
        """Per set (training, evaluation): the record being recorded is of an earlier step than the set's latest."""
        self.gave = [False, False]
        """Per set: the record being recorded gave the set a value (or cleared one)."""
        self.recording: int | None = None
        """The thread recording a record, between `begin_record` and `end_record`: the flags above are its."""
        self.position = (0, 0)
        """The (attempt, step) of the record being recorded."""
        self._current = [0, 0]  # per set: values stamped before this are stale
        # per set: the latest (attempt, step) recorded
        self._latest: list[tuple[int, int] | None] = [None, None]
        self._attempt: int | None = None  # the newest attempt recorded

    def begin_record(self, evaluation: bool, step: int, attempt: int | None = None) -> bool:
        """A record of `step` begins (`attempt` None: the newest attempt's); returns whether it is an older attempt's
        than the newest recorded, evaluations included (`older`)."""
        self.evaluation = evaluation
        if attempt is None:
            attempt = self._attempt if self._attempt is not None else 0
        position = self.position = (attempt, step)
        self.recording = get_ident()
        self.older = self._attempt is not None and attempt < self._attempt
        self.late = [latest is not None and position < latest for latest in self._latest]
        self.gave = [False, False]
        return self.older

    def end_record(self) -> None:
        """The record's values are in: a later step than the latest of a set it ended (its own; the evaluation set
        where it gave one a value), or a newer attempt's, makes the set's older values stale; a newer attempt's,
        every set's."""
        own, position = int(self.evaluation), self.position
        for kind in (0, 1) if not self.older else ():
            if kind != own and not (kind and self.gave[kind]):
                continue
            latest = self._latest[kind]
            if latest is None or position > latest:
                self._latest[kind], self._current[kind] = position, self.stamp
        if self._attempt is None or position[0] > self._attempt:
            if self._attempt is not None:
                self._current = [self.stamp, self.stamp]
            self._attempt = position[0]
        self.evaluation = self.older = False
        self.late = [False, False]
        self.recording = None
        self.stamp += 1

    def current(self, stamp: int, evaluation: bool) -> bool:
        return stamp >= self._current[evaluation]


class LatestValueGauge:
    """A gauge whose last value per attribute set is read by the SDK at collection time.

    Why not the SDK's synchronous gauge: each `set()` builds a `Measurement`, cleans and
    hashes the attributes and goes through three layers of consumers, and a step sets
    dozens of gauges: emitter time, GIL time a Python-bound training loop waits for (the
    figures: benchmarks/README.md, costs). Here a step costs one dict store per value, and
    the SDK builds the data points once per collection (a scrape or an export interval)
    through the public observable-gauge API. Exported: the last value of each series that
    is current by `steps` (every series of a state gauge); `clear` drops a series' value now.
    """

    def __init__(self, meter: Meter, name: str, unit: str, description: str, steps: StepGauges | None = None, *,
                 per_step: bool = True, evaluation: bool = False) -> None:
        """`steps`: the records the values come in (None: set outside any record). `per_step`: a statistic of the
        step, current by `steps`; else the process's state (catalog `STATE_GAUGES`), kept until set again.
        `evaluation`: an evaluation's gauge (`grpo.eval`), whose values are current by the evaluation set."""
        self._steps = steps
        self._per_step = steps is not None and per_step
        self._set = int(evaluation)
        # series -> (value, attributes, the stamp of the record that set it)
        self._last: dict[frozenset, tuple[float, Mapping[str, Any], int]] = {}
        # attribute dicts seen -> their series key: routes pass the same dict every step
        self._keys: dict[int, tuple[Mapping[str, Any], frozenset]] = {}
        meter.create_observable_gauge(name, [self._observe], unit=unit, description=description)

    def set(self, value: float, attributes: Mapping[str, Any]) -> None:
        series = self._series(attributes)
        steps = self._steps
        if steps is None:
            self._last[series] = (value, attributes, 0)
        elif self._takes(steps):
            self._last[series] = (value, attributes, steps.stamp)

    def clear(self, attributes: Mapping[str, Any]) -> None:
        """The series has no value at this step (a non-finite one was reported): no data point."""
        series = self._series(attributes)
        steps = self._steps
        if steps is None or self._takes(steps):
            self._last.pop(series, None)

    def _takes(self, steps: StepGauges) -> bool:
        """Whether the record being recorded sets this gauge: a record of the latest step or a newer attempt's does;
        a late one or an older attempt's never (the gauges are the latest step's: a re-sent log's `step` does not
        move the step index back, an earlier step's value does not fill what the latest lacks)."""
        kind = self._set
        if not (steps.older or steps.late[kind]):
            if self._per_step:
                steps.gave[kind] = True
            return True
        # not the record's value but the run's end markers, set from the thread that closes the run while the
        # telemetry thread records a late step
        return steps.recording != get_ident()

    def _series(self, attributes: Mapping[str, Any]) -> frozenset:
        known = self._keys.get(id(attributes))
        if known is None or known[0] is not attributes:
            known = self._keys[id(attributes)] = (attributes, frozenset(attributes.items()))
        return known[1]

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        steps, kind = self._steps, self._set
        if steps is None or not self._per_step:
            return [Observation(v, dict(a)) for v, a, _ in list(self._last.values())]
        current = steps.current
        return [Observation(v, dict(a)) for v, a, stamp in list(self._last.values()) if current(stamp, kind)]
