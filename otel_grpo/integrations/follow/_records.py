"""What every source hands the follower: one `Record` per step it read, and the counting of bad input."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

logger = logging.getLogger("otel_grpo.follow")


@dataclass(slots=True)
class Record:
    """One step read from a source: scalars under the framework's own names, measured phases, sample rows."""

    step: int
    scalars: dict[str, float] = field(default_factory=dict)
    phases: list[tuple[str, float]] = field(default_factory=list)
    """(phase name, seconds) in the order the framework timed them."""
    rows: list[dict[str, Any]] | None = None
    cursor: Any = None
    """The source's resume point once this record (and every one before it) is emitted."""
    read_at: float = field(default_factory=time.monotonic)
    evaluation: bool = False
    """An evaluation's values (verl's validation, a TRL `eval_` log), not a training step's (`Telemetry.log_metrics`)."""
    attempt: int | None = None
    """Which attempt of the job wrote it (`grpo.attempt`: a relaunched job's steps replace the crashed one's in
    the sidecar); None: the follower's own (`State.attempt`)."""


class BadInput:
    """Counts bad input of one source and reports each item once, in one log line with file and offset."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.count = 0
        self._open: set[str] = set()

    def skip(self, where: str, why: str) -> None:
        """Malformed content at `where` (`file:offset`), skipped."""
        self.count += 1
        logger.warning("otel-grpo follow: %s: %s: malformed, skipped (%s)", self.source, where, why)

    def values(self, where: str, count: int, why: str) -> None:
        """`count` bad values in one item at `where` (a file), each kept as something safe: one report."""
        self.count += count
        logger.warning("otel-grpo follow: %s: %s: %d values %s", self.source, where, count, why)

    def unreadable(self, path: object, why: str) -> None:
        """A path that cannot be read now (not a regular file, permission denied): reported once until it
        is readable again (`readable`), and retried on every poll."""
        key = str(path)
        if key not in self._open:
            self._open.add(key)
            self.count += 1
            logger.warning("otel-grpo follow: %s: %s: unreadable, skipped until it is readable (%s)",
                           self.source, key, why)

    def readable(self, path: object) -> None:
        self._open.discard(str(path))


# What decoding and reading a hostile line can raise: bad JSON or types, an integer too large for a float
# or over Python's digit limit (ValueError), nesting deeper than the decoder's recursion limit.
PARSE_ERRORS = (ValueError, KeyError, TypeError, OverflowError, RecursionError)


def json_line(line: bytes) -> Any:
    """One line's JSON, its bytes read as UTF-8 and any that are not as U+FFFD: a completion cut mid-character (a
    tokenizer's bad decode written as raw bytes) is still a sample, its text shown as a trainer's would be."""
    return json.loads(line.decode("utf-8", "replace"))


def numbers(data: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a logged dict; `null` is NaN; bools count as 0/1; strings and lists are left out.

    verl's file logger (orjson) and TRL's log history write NaN and Inf as `null`: as NaN
    they reach `grpo.nonfinite` (`GRPONonFiniteValues`) and the step is still emitted.
    `ValueError` naming the key for an integer too large for a float (the line is malformed).
    """
    out: dict[str, float] = {}
    for key, value in data.items():
        if value is None:
            out[key] = math.nan
        elif isinstance(value, (int, float)):
            try:
                out[key] = float(value)
            except OverflowError:
                raise ValueError(f"{key!r}: an integer of {len(str(abs(value)))} digits does not fit a float") from None
    return out


INT64 = range(-(2**63), 2**63)


def carried(value: Any) -> tuple[Any, bool]:
    """`value` as an OpenTelemetry attribute carries it, and whether it was too large for a float.

    JSON integers have no bound: an int64 stays as it is, a larger one becomes a float, and one
    beyond a float's range becomes +-inf (non-finite: the sidecar stores it as none) rather than
    an `OverflowError` that would take every other value of its record with it.
    """
    if not isinstance(value, int) or isinstance(value, bool) or value in INT64:
        return value, False
    try:
        return float(value), False
    except OverflowError:
        return (math.inf if value > 0 else -math.inf), True


def finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
