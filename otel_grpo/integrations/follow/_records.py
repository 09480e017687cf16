"""What every source hands the follower: one `Record` per step it read, and the counting of bad input."""

from __future__ import annotations

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


class BadInput:
    """Counts malformed input of one source and reports each item in one log line."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.count = 0

    def skip(self, where: str, why: str) -> None:
        self.count += 1
        logger.warning("otel-grpo follow: %s: %s: malformed, skipped (%s)", self.source, where, why)


def numbers(data: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a logged dict (bools count as 0/1; strings, lists and None are left out)."""
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, (int, float)):
            out[key] = float(value)
    return out


def finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
