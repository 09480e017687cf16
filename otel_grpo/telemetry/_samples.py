"""Sample records: which rows of a step are kept, and how a row becomes OTel attributes.

    kept = pick_rows(scores, settings, keep_reason="kl 3.2 above 1", budget=RowBudget(settings), rng=rng)
    kept = select_indices(scores_of(rows, "reward"), top_k=4, bottom_k=4, random_k=4, rng=random.Random(0))
    number = rank_sample_index(i, rank=1, ranks=2)     # row i of rank 1's own, beside rank 0's: 2 * i + 1
    flat = flatten_row(rows[i])                        # rewards={"format": 1} -> reward.format
    attrs = event_attributes(flat, Selected(i, "top", rows[i]), max_chars=4096)  # in event order
    attrs = cut_texts(flat, max_chars=4096)            # the texts cut (and `truncated`), no bookkeeping
    attrs, dropped = as_kept(in_event_order(attrs))    # what the SDK keeps of an event's attributes
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import random
from collections import abc
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ._text import valid_text

logger = logging.getLogger("otel_grpo.telemetry")

TRUNCATION_MARKER = "…[truncated]"
_PRIMITIVES = (bool, int, float, str)
_INT64 = range(-(2**63), 2**63)  # OTLP's int_value: the encoder drops a wider int, with a traceback per event


def _int64(value: int) -> int | float:
    """An int as an attribute carries it: itself within int64, else the nearest float (+-inf past a float's range),
    so a 2**70 id is a number in the event and the spill alike, not a key dropped from every event."""
    if value in _INT64:
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
EVENT_ATTRIBUTE_LIMIT = 512
"""Attributes one sample event holds (its row's columns and bookkeeping): the tracer provider's `max_event_attributes`,
raised from the SDK's 128. Beyond it the SDK drops the oldest (`as_kept`): an event's attributes are added in
`in_event_order`, so what goes is a wide row's first extra columns, never its prompt, completion or reward;
`otel-grpo replay` drops the same."""
_ADDED_LAST = ("truncated", "prompt_original_length", "completion_original_length", "completion_length", "advantage",
               "reward", "completion", "prompt", "sample_index", "selection")
"""The attributes an event gets after a row's extra columns, in this order: the sidecar's own columns (its core
ones, read off the event) and what says how the texts were cut."""


@dataclass(frozen=True, slots=True)
class Selected:
    """One kept row: its `sample_index` and why it was kept."""

    index: int
    """The position among the rows the selection ran over, every rank's (`select_across_ranks`) or this rank's
    own; the backend numbers it on after the step's earlier records (`_numbering`) and, where each rank selects
    its own, by `rank_sample_index`: unique among the step's rows of every rank and record."""
    selection: str
    """"top", "bottom", "random", or "all" (every row of an anomalous step, see `_retention`)."""
    row: Mapping[str, Any]


def _score(row: Mapping[str, Any], column: str) -> float | None:
    value = row.get(column)
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # an int beyond a float's range has no score either
        return None
    return score if math.isfinite(score) else None


def step_rng(seed: int | None, run_id: str, step: int) -> random.Random:
    """The random picks of one step: a function of the run, the step and `seed`, so that a step sent
    again (a follower re-reading after a failed export) keeps the rows it kept (the sidecar stores them once)."""
    return random.Random(f"{seed}:{run_id}:{step}")


def scores_of(rows: Sequence[Mapping[str, Any]], score: str) -> list[float | None]:
    """The finite `score` of each row, None where it has none."""
    return [_score(row, score) for row in rows]


def select_indices(
    scores: Sequence[float | None], *, top_k: int, bottom_k: int, random_k: int, rng: random.Random
) -> list[tuple[int, str]]:
    """(index, "top" / "bottom" / "random") of the kept positions of `scores` (None: no score).

    One pass with two bounded heaps, O(log k) per row. On ties top-k keeps earlier
    rows and bottom-k later ones, so the two never share a row while there are at
    least top_k + bottom_k scored rows (e.g. all rewards equal). Rows without a finite
    score can only be drawn at random. Output order: top (best first), bottom (worst
    first), random (by position).
    """
    top: list[tuple[float, int]] = []  # min-heap on (score, -index): root = weakest kept
    bottom: list[tuple[float, int]] = []  # min-heap on (-score, index): root = best kept
    for index, value in enumerate(scores):
        if value is None:
            continue
        if top_k:
            item = (value, -index)
            if len(top) < top_k:
                heapq.heappush(top, item)
            elif item > top[0]:
                heapq.heapreplace(top, item)
        if bottom_k:
            item = (-value, index)
            if len(bottom) < bottom_k:
                heapq.heappush(bottom, item)
            elif item > bottom[0]:
                heapq.heapreplace(bottom, item)
    top_idx = [-i for _, i in sorted(top, reverse=True)]
    # With fewer rows than top_k + bottom_k the heaps overlap; a row is listed once, as "top".
    taken = set(top_idx)
    bottom_idx = [i for _, i in sorted(bottom, reverse=True) if i not in taken]
    taken.update(bottom_idx)
    rest = [i for i in range(len(scores)) if i not in taken]
    random_idx = sorted(rng.sample(rest, min(random_k, len(rest))))
    return [(i, "top") for i in top_idx] + [(i, "bottom") for i in bottom_idx] + [(i, "random") for i in random_idx]


def rank_sample_index(index: int, rank: int, ranks: int) -> int:
    """The `sample_index` of row `index` of `rank`'s own rows where `ranks` ranks select and export theirs side by
    side (`export_all_ranks`; 1 where one rank exports): index * ranks + rank.

    The sidecar, the spill and the web page's sample links name a row by its run, step and sample index, so two
    ranks' rows of one step must never share one (the second would be dropped as the first sent again); a row sent
    again keeps its number, and `sample_index % ranks` is its rank (`source_rank`). `index` counts the rank's rows
    of the step's earlier records too (`_numbering`).
    """
    return index * ranks + rank


def pick_rows(scores: Sequence[float | None], settings, keep_reason: str | None, budget, rng: random.Random
              ) -> list[tuple[int, str]]:
    """The step's kept positions: every row ("all") when the step is anomalous (`keep_reason`) and
    the run's row budget admits them, else top/bottom/random (`select_indices`)."""
    if keep_reason and budget.admit(len(scores)):
        return [(i, "all") for i in range(len(scores))]
    return select_indices(scores, top_k=settings.top_k, bottom_k=settings.bottom_k, random_k=settings.random_k,
                          rng=rng)


class StepRows:
    """Every row a step handed to `samples()`, in call order, with the scores that rank them.

    `calls`: (time handed over in ns, rows, group_size) per `samples()` call.
    """

    __slots__ = ("rows", "scores", "_origin")

    def __init__(self, calls: Sequence[tuple[int, Sequence[Mapping[str, Any]], int | None]], score: str) -> None:
        self.rows: list[Mapping[str, Any]] = []
        self.scores: list[float | None] = []
        self._origin: list[tuple[int, int, int | None]] = []  # (call start, call length, group size) per row
        for _, rows, group_size in calls:
            start = len(self.rows)
            self.rows += rows
            self.scores += scores_of(rows, score)
            self._origin += [(start, len(rows), group_size)] * len(rows)

    def annotated(self, index: int, source_rank: int, kept_because: str | None = None) -> dict[str, Any]:
        """Row `index` with its group context: `source_rank`, and with a group size
        `completion_index`, `group_size` and `reward_rank` (1: the group's best score; ties share it);
        `kept_because` when the whole step is kept. Rows g*G .. g*G+G-1 of one call share a prompt.
        The row's own columns win."""
        start, length, group_size = self._origin[index]
        context: dict[str, Any] = {"source_rank": source_rank}
        if kept_because:
            context["kept_because"] = kept_because
        if group_size:
            at = index - start
            first = start + at - at % group_size
            context["completion_index"] = at % group_size
            context["group_size"] = group_size
            mine = self.scores[index]
            if mine is not None:
                group = self.scores[first : min(first + group_size, start + length)]
                context["reward_rank"] = 1 + sum(1 for other in group if other is not None and other > mine)
        return {**context, **self.rows[index]}


def _attribute_value(value: Any) -> Any:
    """An OTel-valid attribute value (str, bool, int, float or a homogeneous tuple), its text valid (`_text`);
    None to drop."""
    if isinstance(value, str):
        return valid_text(value)
    if type(value) is int:
        return _int64(value)
    if value is None or isinstance(value, _PRIMITIVES):
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:  # torch / numpy scalars
        return _attribute_value(item())
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        kinds = {type(v) for v in value}
        if kinds == {str}:
            return tuple(map(valid_text, value))
        if kinds == {int} and not all(v in _INT64 for v in value):  # one type in a tuple: all floats
            return tuple(float(_int64(v)) for v in value)
        if len(kinds) == 1 and kinds <= set(_PRIMITIVES):
            return tuple(value)
        if kinds and kinds <= {int, float}:
            return tuple(float(v) for v in value)
        return valid_text(json.dumps(value, default=str, ensure_ascii=False))
    return valid_text(str(value))


def flatten_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Columns of one row as flat OTel-valid values.

    A `rewards` dict becomes `reward.<fn>` columns (the catalog's reward_fn label);
    any other dict column `x` becomes `x.<key>`. None values are dropped. Names and text are valid
    Unicode (`_text`): the one place a row's text is made so, for its sample event and its spill line alike.
    """
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = valid_text(key if type(key) is str else str(key))
        if isinstance(value, _PRIMITIVES):  # most columns: no Mapping check (an ABC check costs ~10x)
            flat[name] = valid_text(value) if isinstance(value, str) else _int64(value) if type(value) is int else value
            continue
        if isinstance(value, abc.Mapping):
            prefix = "reward" if key == "rewards" else name
            for sub, inner in value.items():
                converted = _attribute_value(inner)
                if converted is not None:
                    flat[valid_text(f"{prefix}.{sub}")] = converted
            continue
        converted = _attribute_value(value)
        if converted is not None:
            flat[name] = converted
    return flat


def event_attributes(flat: Mapping[str, Any], picked: Selected, max_chars: int) -> dict[str, Any]:
    """Attributes of one `grpo.sample` event: the flat row, text cut at `max_chars`, and bookkeeping, in event order."""
    return in_event_order({**cut_texts(flat, max_chars), "sample_index": picked.index, "selection": picked.selection})


def in_event_order(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """`attrs` in the order an event gets them: a row's extra columns as the row has them, then `_ADDED_LAST`."""
    return {**{k: v for k, v in attrs.items() if k not in _ADDED_LAST},
            **{k: attrs[k] for k in _ADDED_LAST if k in attrs}}


def as_kept(attrs: dict[str, Any], limit: int = EVENT_ATTRIBUTE_LIMIT) -> tuple[dict[str, Any], int]:
    """`attrs` as the SDK keeps them on an event of at most `limit` attributes (its `BoundedAttributes`: when full,
    each one added drops the oldest), so the last `limit` in the order they were added; and how many it dropped
    (the event's `dropped_attributes_count`)."""
    dropped = len(attrs) - limit
    if dropped <= 0:
        return attrs, 0
    return {key: attrs[key] for key in list(attrs)[dropped:]}, dropped


def cut_texts(flat: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """The row's columns with each text longer than `max_chars` cut there and marked, its
    `<column>_original_length` beside it, and `truncated`: whether any was cut.

    The spill keeps texts whole; `otel-grpo replay` cuts them here as the export did, so that a
    replayed row is the row the live export stored."""
    attrs: dict[str, Any] = {}
    truncated = False
    for key, value in flat.items():
        if isinstance(value, str) and len(value) > max_chars:
            attrs[key] = value[:max_chars] + TRUNCATION_MARKER
            attrs[f"{key}_original_length"] = len(value)
            truncated = True
        else:
            attrs[key] = value
    attrs["truncated"] = truncated
    return attrs


_STEP_CONTEXT = frozenset({"kept_because"})


class ColumnTracker:
    """Notices columns that appear after the first sampled step, and says so once per column."""

    def __init__(self) -> None:
        self._seen: set[str] | None = None

    def observe(self, columns: set[str], step: int) -> None:
        columns = columns - _STEP_CONTEXT  # set on some steps by design: no news
        if self._seen is None:
            self._seen = set(columns)
            return
        new = columns - self._seen
        if new:
            self._seen |= new
            logger.warning("otel-grpo: sample rows gained column(s) %s at step %d; they are kept", sorted(new), step)
