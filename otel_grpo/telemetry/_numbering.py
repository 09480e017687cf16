"""Sample numbers across the records of a step: each record's rows start after its step's earlier records' rows.

    numbering = StepNumbering()
    first = numbering.start(attempt=0, step=3, rows=3, key=record_key(False, 3, picked, flats))  # 0
    later = numbering.start(attempt=0, step=3, rows=3, key=other_key)                          # 3: an evaluation at 3
    again = numbering.start(attempt=0, step=3, rows=3, key=other_key)                          # 3: the same rows again

The sidecar, the spill and `otel-grpo replay` name a sample row by its run, step and `sample_index`, and store a
name once: a step's second record with rows (`logged_step` at a step `step()` sampled, an evaluation at that
step) numbered from 0 lost every row to the first record's. The backend numbers each (attempt, step) on from
where its earlier records ended; a record whose kept rows equal an earlier record's of the step (a follower
sending what a failed export may have delivered) gets the earlier numbers, so the sidecar stores it once. A new
attempt numbers anew: its claim replaces the older attempt's rows.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from ._samples import Selected

KEPT_STEPS = 32
"""The (attempt, step) pairs numbered, latest used last: a record of a step forgotten since numbers from 0."""


class StepNumbering:
    """The next free position of each recent (attempt, step), and where each distinct record of it started."""

    __slots__ = ("_steps", "_kept")

    def __init__(self, kept: int = KEPT_STEPS) -> None:
        self._steps: dict[tuple[int | None, int], tuple[list[int], dict[Hashable, int]]] = {}
        self._kept = kept

    def start(self, attempt: int | None, step: int, rows: int, key: Hashable) -> int:
        """The first of `rows` positions for a record of `step`: where the same `key` started before, else after
        every position the step's earlier records of `attempt` took."""
        at = (attempt, step)
        entry = self._steps.pop(at, None)
        if entry is None:
            entry = ([0], {})
            if len(self._steps) >= self._kept:  # the least recently used step goes
                del self._steps[next(iter(self._steps))]
        self._steps[at] = entry  # latest used last
        free, starts = entry
        first = starts.get(key)
        if first is None:
            first = starts[key] = free[0]
            free[0] += rows
        return first


def record_key(evaluation: bool, rows: int, picked: Sequence[Selected], flats: Sequence[Mapping[str, Any]]
               ) -> Hashable:
    """What a record's kept rows are: equal for the same rows sent again (one process: str hashes are salted per
    process), different for any other record of the step. NaN is spelled out: its hash is its object's."""
    return hash((evaluation, rows, tuple((p.index, p.selection) for p in picked),
                 tuple(tuple((k, "nan" if v != v else v) for k, v in flat.items()) for flat in flats)))
