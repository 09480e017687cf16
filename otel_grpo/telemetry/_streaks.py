"""Step checks on the emitter thread: the streak of every checked scalar beyond every bound.

    counters = StepStreaks(meter, {"run_id": "r"}, gauge, process_id())
    counters.observe("kl", 1.5); counters.end_step()   # kl > 1.0: streak 1 at bound 1.0
    counters.observe("trl_kl", 1.5); counters.end_step()   # no grpo.kl: TRL's kl is judged as kl (streak 2)

Why here and not in Prometheus: a scrape sees one step of many (2 s steps, 15 s
scrapes), and a streak broken between two scrapes is invisible there. Counters
lose nothing between scrapes, so the alerts read `grpo.step.beyond` (catalog
`_step_checks.py`, docs/operations.md "Step evidence"). The counters carry the
process's `process` attribute: a resumed run counts in new series. Which value a check
judges at a step (its own key's, else a fallback's: TRL's logged kl) is the catalog's
`judged`.

A streak counts steps, each once: the backend ends a step (`end_step`) at the first record of a new latest
step of the latest attempt only. A further record of that step (a summary log, a TRL step whose samples and
scalars arrive apart, `otel-grpo follow` sending it again) judges only the checks that step has not judged yet
(`end_step(again=True)`): a counter add is never taken back, so the first value a step's check judged stands.
A late record of an earlier step, or of an older attempt, judges nothing (`discard`). A newer attempt (a resume
in this process, `Telemetry.new_attempt`) starts every streak and baseline again (`restart`), as a new process
does: its steps from the checkpoint on are the run now, and the failed attempt's steps after it are not.

Cost: a dict store per checked value, and per step one gauge store per bound plus
one counter add per (bound, streak length reached); a healthy run reaches none.
"""

from __future__ import annotations

from typing import Any, Mapping

from opentelemetry.metrics import Meter

from otel_grpo.catalog import CHECK_INPUTS, PROCESS, STREAKS, StepCheck, Streaks, bound_label, get, judged, reached


class _Check:
    """Streaks of one scalar against its bounds, with the attribute dicts built once."""

    def __init__(self, check: StepCheck, base: Mapping[str, Any], process: str) -> None:
        self.streaks = Streaks(check)
        self.gauge_attrs = [{**base, "signal": check.name, "bound": bound_label(b)} for b in check.bounds]
        # counter attributes per bound, one per streak length; this process's own series
        self.counter_attrs = [[{**attrs, PROCESS: process, "streak": str(n)} for n in STREAKS]
                              for attrs in self.gauge_attrs]


class StepStreaks:
    """Per-step streaks of the checked scalars, exported as `grpo.step.streak` and `grpo.step.beyond`."""

    def __init__(self, meter: Meter, base: Mapping[str, Any], gauge: Any, process: str) -> None:
        self._base = dict(base)
        self._process = process
        self._gauge = gauge  # a LatestValueGauge: set(value, attributes)
        beyond = get("step_beyond")
        self._counter = meter.create_counter(beyond.name, unit=beyond.unit, description=beyond.description)
        self._checks: dict[str, _Check] = {}
        self._pending: dict[str, float] = {}
        self._judged: set[str] = set()  # the checks the latest step judged: each once a step

    def observe(self, key: str, value: float) -> None:
        """A finite value of a scalar in this step (the last one wins, as for the gauge)."""
        if key in CHECK_INPUTS:
            self._pending[key] = value

    def end_step(self, again: bool = False) -> list[tuple[StepCheck, float]]:
        """Advance the streaks of the checks this step judged, each on its own key's value, else a fallback's
        (catalog `judged`); a check with neither keeps its streak. Returns the checks and values judged.
        `again`: a further record of the step ended last, which judges only the checks that step has not."""
        if not again:
            self._judged.clear()
        if not self._pending:
            return []
        steps = judged(self._pending)
        self._pending.clear()
        if again:
            steps = [(check, value) for check, value in steps if check.name not in self._judged]
        for check, value in steps:
            self._judged.add(check.name)
            state = self._checks.get(check.name)
            if state is None:
                state = self._checks[check.name] = self._start(check)
            self._advance(state, value)
        return steps

    def discard(self) -> None:
        """A record that ends no step (a late one of an earlier step, an older attempt's): its values judge
        nothing, nor carry over into the next step."""
        self._pending.clear()

    def restart(self) -> None:
        """A newer attempt's first step is next: every streak and baseline starts again, and each streak reads 0
        until its check is judged (the counters keep what the process counted: those steps were beyond)."""
        for state in self._checks.values():
            state.streaks = Streaks(state.streaks.check)
            for attrs in state.gauge_attrs:
                self._gauge.set(0.0, attrs)
        self._judged.clear()

    def _start(self, check: StepCheck) -> _Check:
        state = _Check(check, self._base, self._process)
        # Every (bound, streak) series exists at 0 from the scalar's first step on, so a streak
        # reached hours later is an increase of a known series, not a new series.
        for per_bound in state.counter_attrs:
            for attrs in per_bound:
                self._counter.add(0, attrs)
        return state

    def _advance(self, state: _Check, value: float) -> None:
        state.streaks.advance(value)
        for i, streak in enumerate(state.streaks.counts):
            self._gauge.set(float(streak), state.gauge_attrs[i])
            for _, attrs in zip(reached(streak), state.counter_attrs[i]):  # STREAKS is increasing
                self._counter.add(1, attrs)
