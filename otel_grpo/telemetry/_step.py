"""`Step`: what a training loop writes into one step, and the step's deferred recording (`Step.defer`).

    with tel.step(7) as s:                 # Telemetry.step / logged_step make it
        s.record(reduced, learning_rate=lr)
        s.defer(finish_step, copied)       # finish_step(s, copied) records later, off the training thread

Everything a `Step` takes goes into its `StepRecord` as plain data; `run_deferred` runs the deferred
recordings into the record where the step is judged: in the `Backend` (the telemetry thread or process), or
on the training thread where rank 0's verdict must be known there (the sample selection across ranks).
"""

from __future__ import annotations

import logging
import math
import operator
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from otel_grpo.catalog import evaluation_key, spans

from . import _clock as clock
from ._record import StepRecord, error_of
from ._text import valid_text

logger = logging.getLogger("otel_grpo.telemetry")
_FAILED: set[str] = set()  # deferred functions whose failure was said (once per function and process)


_NOT_A_FLOAT = (TypeError, ValueError, OverflowError)
"""What `float()` raises for a value that is no number it can hold: a string, an object, an int beyond a float's
range (10**400), which must never reach the training loop."""


def _to_floats(stats: Mapping[str, Any]) -> dict[str, float]:
    """The one float conversion of the step (a 0-d tensor here is a host sync: reduce first); a value that is no
    float is dropped, as the peers' logs drop it (`catalog.peer_scalars`)."""
    try:
        return {k: float(v) for k, v in stats.items()}
    except _NOT_A_FLOAT:
        pass
    out: dict[str, float] = {}
    for key, value in stats.items():
        try:
            out[key] = float(value)
        except _NOT_A_FLOAT:
            logger.debug("otel-grpo: %r is not a number a float holds (%r); dropped", key, type(value).__name__)
    return out


def _evaluation_keys(values: dict[str, float]) -> dict[str, float]:
    """An evaluation's values under the names it records them by (`catalog.evaluation_key`; none: dropped)."""
    return {key: v for k, v in values.items() if (key := evaluation_key(k)) is not None}


_DICT = {dict}


def checked_mapping(value: Any, argument: str) -> Mapping[str, Any]:
    """`value` if it is a mapping of names to numbers, else a `ValueError` naming `argument`."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{argument}: expected a mapping of names to numbers, got {type(value).__name__}")
    for key in value:  # here, not on the telemetry thread, where one such key lost the whole step
        if not isinstance(key, str):
            raise ValueError(f"{argument}: names must be strings, got the key {key!r} ({type(key).__name__})")
    return value


def checked_seconds(value: Any, argument: str, *, positive: bool = False) -> float:
    """`value` as seconds: a finite number >= 0 (> 0 where `positive`), else a `ValueError` naming `argument`. A
    bool or a string is no duration, though `float()` takes them."""
    try:
        seconds = math.nan if isinstance(value, (bool, str, bytes)) else float(value)
    except _NOT_A_FLOAT:
        seconds = math.nan
    if not (0 < seconds < math.inf if positive else 0 <= seconds < math.inf):
        raise ValueError(f"{argument}: expected seconds, a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")
    return seconds


MAX_NS = 2**63 - 1
"""The latest time a span may carry (the year 2262): past it OTLP's encoder fails, and the whole batch with it."""


def checked_ns(value: Any, argument: str) -> int:
    """`value` as a time in ns (`time.time_ns()`): an integer in 0 .. `MAX_NS`, else a `ValueError` naming
    `argument`."""
    try:
        ns = -1 if isinstance(value, bool) else operator.index(value)  # an int or numpy's; no float, no string
    except TypeError:
        ns = -1
    if not 0 <= ns <= MAX_NS:
        raise ValueError(f"{argument}: expected a time in ns, an int in 0 .. 2**63 - 1 (time.time_ns()), "
                         f"got {value!r}")
    return ns


def _phase_name(name: Any) -> str:
    """A phase's name: a non-empty string (`grpo.phase.<name>` and the duration histogram's `phase` label), its
    text valid (`_text`)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: a phase needs a non-empty string name, got {name!r}")
    return valid_text(name)


class Step:
    """One training step: phases, stats and sample rows. Use through `Telemetry.step`."""

    __slots__ = ("_record", "_run_id")

    def __init__(self, record: StepRecord, run_id: str) -> None:
        self._record = record
        self._run_id = run_id

    @property
    def step(self) -> int:
        return self._record.step

    @property
    def attributes(self) -> dict[str, Any]:
        """`{"grpo.run_id": ..., "grpo.step": ...}`: put them on spans of your own to tie them to this step
        (the step's spans are made after it, off this thread, so they are never the current span)."""
        return {spans.RUN_ID_ATTR: self._run_id, spans.STEP_ATTR: self._record.step}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase: child span `grpo.phase.<name>` of the step and a `grpo.phase.duration` observation.

        An exception leaving the block marks the phase span as an error (status and `exception` event).
        """
        name = _phase_name(name)
        start = clock.now_ns()
        error = None
        try:
            yield
        except BaseException as exc:
            error = error_of(exc)
            raise
        finally:
            self._record.phases.append((name, start, clock.now_ns(), error))

    def record(self, stats: Mapping[str, Any], **scalars: Any) -> None:
        """Scalars of the step (stat keys, TRL or verl names); per-sample vectors from `ReducedStats.samples`.

        Host-side scalars go in as keywords, `s.record(reduced, learning_rate=lr)`, so
        that `reduced` keeps its `.samples` (a `{**reduced, ...}` copy would drop them).
        May be called several times per step.

        In an evaluation's record (`evaluation=True`) a statistic of training steps is the evaluation's
        (`catalog.evaluation_key`: `reward` goes out as `eval_reward` does, `grpo.eval{metric="reward"}`), never
        a training series; the trainer's state (`epoch`) stays itself. Its per-sample vectors are not recorded:
        `grpo.sample.*` are the training completions' distributions (its rows, `samples()`, are kept as a step's).
        """
        record = self._record
        values = _to_floats(checked_mapping(stats, "stats"))
        more = _to_floats(scalars) if scalars else None
        if record.evaluation:  # once per call: a training step's names go in as they are
            values = _evaluation_keys(values)
            more = None if more is None else _evaluation_keys(more)
        record.scalars.append(values)
        if more is not None:
            record.scalars.append(more)
        samples = getattr(stats, "samples", None)
        if samples and not record.evaluation:
            # Copies: the caller may reuse its lists once this returns.
            record.samples.append({k: list(v) for k, v in samples.items()})

    def samples(
        self, rows: Sequence[Mapping[str, Any]] | Mapping[str, Any], *, group_size: int | None = None
    ) -> None:
        """Candidate sample rows; the step's top/bottom/random selection runs once over every call's rows
        (and, with `sample_reduce="global"`, every rank's).

        `group_size`: rows g*G .. g*G+G-1 of this call share a prompt; kept rows then carry
        `completion_index`, `group_size` and `reward_rank` (1: best in its group). Every kept
        row carries `source_rank`. Rows are read later: pass dicts you do not mutate afterwards.
        """
        if rows is None:
            return
        if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                       or group_size < 1):
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        if isinstance(rows, (str, bytes)) or not isinstance(rows, (Mapping, Iterable)):
            raise ValueError(f"rows: expected a dict or a sequence of dicts, got {type(rows).__name__}")
        listed = [rows] if isinstance(rows, Mapping) else list(rows)
        # checked here (a bad row found later, off this thread, would cost the whole step), in C for the usual
        # all-dict rows: a Python-level test per row costs the training thread ~10% of a step's telemetry
        if not set(map(type, listed)) <= _DICT:
            bad = next((i for i, row in enumerate(listed) if not isinstance(row, Mapping)), None)
            if bad is not None:
                raise ValueError(f"rows[{bad}]: expected a dict, got {type(listed[bad]).__name__}")
        self._record.rows.append((clock.now_ns(), listed, group_size))

    def record_phase(self, name: str, seconds: float, *, end_ns: int | None = None) -> None:
        """A phase measured elsewhere (a framework's own timer): the same span and histogram as `phase`.

        The span ends at `end_ns` (default: now) and starts `seconds` earlier, not before 1970: a start the
        exporter cannot encode would lose every span of its batch, this step's and others'.
        """
        name = _phase_name(name)
        seconds = checked_seconds(seconds, "seconds")
        end = clock.now_ns() if end_ns is None else checked_ns(end_ns, "end_ns")
        start = end - round(seconds * 1e9)
        if start < 0:
            raise ValueError(f"seconds: a phase of {seconds!r} s ending at {end} ns would start before 1970")
        self._record.phases.append((name, start, end, None))

    def skip(self) -> None:
        """Mark the step's update as skipped (counted by `grpo.skipped_steps`)."""
        self._record.skipped = True

    def defer(self, fn: Callable[..., None], *args: Any) -> None:
        """Record later: `fn(step, *args)` records into this step as code inside the block would, off the
        training thread, before the step is emitted (in the telemetry process, pickled with the step, or on
        the telemetry thread); for work whose result only telemetry reads, such as finishing stats from the
        step's host copy (`instrument` does). `fn`: a module-level function of a module the telemetry process
        can import (one in the training script itself runs on the training thread there, said once); `args`:
        picklable, not changed after this call. Where the step's verdict must be known on the training thread
        (the sample selection across ranks), it runs there at the block's end. An exception in it is logged
        once per function; the step goes out with what was recorded."""
        if not callable(fn):
            raise ValueError(f"fn: expected a function to call later, got {type(fn).__name__}")
        name = getattr(fn, "__qualname__", "")
        if "<lambda>" in name or "<locals>" in name:  # the telemetry process finds a function by its name
            raise ValueError(f"fn: a module-level function, not {name} (the telemetry process imports it by name)")
        self._record.deferred.append((fn, args))


def run_deferred(record: StepRecord, run_id: str) -> None:
    """Run the deferred recordings of `record` into it, in their order, once (`Step.defer`)."""
    calls, record.deferred = record.deferred, []
    if not calls:
        return
    step, before = Step(record, run_id), len(record.rows)
    for fn, args in calls:
        try:
            fn(step, *args)
        except Exception:  # telemetry never stops training: the step goes out with the rest
            name = getattr(fn, "__qualname__", repr(fn))
            if name not in _FAILED:
                _FAILED.add(name)
                logger.warning("otel-grpo: recording step %d's deferred %s failed; later failures of it are not "
                               "logged", record.step, name, exc_info=True)
    if record.end_ns is not None:  # rows recorded here were handed over when the step ended
        record.rows[before:] = [(min(ns, record.end_ns), rows, group) for ns, rows, group in record.rows[before:]]
