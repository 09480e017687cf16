"""verl 0.9.1's metrics file, and any `{"step": N, ...}` JSONL (the generation dumps are `_rollouts`).

Formats, from verl's source:
- `verl/utils/tracking.py` `FileLogger.log`: one `orjson` line per `Tracking.log` call,
  `{"step": N, "data": {name: value, ...}}`, to `VERL_FILE_LOGGER_PATH` or
  `<VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl`, opened with "wb" (a restarted
  job truncates it). orjson writes NaN and Inf as `null`.
- `timing_s/<name>`: `marked_timer` durations in seconds, in the order they were timed.
"""

from __future__ import annotations

import math
import os
from typing import Any

from otel_grpo.catalog import PEERS, is_evaluation, peer_scalars
from otel_grpo.catalog.spans import check_step
from otel_grpo.telemetry import _clock as clock

from ._records import PARSE_ERRORS, BadInput, Record, json_line, numbers
from ._tail import LineTail, Position

TRL = "trl"
VERL = "verl"
"""verl's peer in the catalog (`catalog.PEERS`): its metric names; its metrics and rollouts pair by step."""
TIMING_PREFIX = "timing_s/"
VALIDATION_PREFIXES = ("val-core/", "val-aux/")
"""verl's validation metrics (`_val_metrics_update`): a line of only these is a validation (`val_before_train`,
logged before the first step), not a training step."""
STEP_TIMER = "step"


MAX_PHASES_S = 30 * 86400.0
"""The most a step's phases may last together. They are laid end to end before the step's end (the follower
reads when the step ended, not when each phase began): a timer reading of 1e10 s, or inf, is no phase, and laid
out it would start before 1970, which no exporter can encode."""


def split_timing(data: dict[str, float]) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """`timing_s/<phase>` entries become phases (`grpo.phase.duration`, a child span); the rest stay scalars.

    `timing_s/step` is the whole step (the `grpo.step_time` gauge), and nested names
    (`timing_s/agent_loop/tool_calls/max`) are statistics over requests, not phases:
    both stay scalars. So does a reading that is no duration (negative, not finite, or past
    `MAX_PHASES_S` with the step's phases before it): shown as the file says, not dropped.
    """
    scalars: dict[str, float] = {}
    phases: list[tuple[str, float]] = []
    total = 0.0
    for name, value in data.items():
        phase = name[len(TIMING_PREFIX):] if name.startswith(TIMING_PREFIX) else None
        if phase and phase != STEP_TIMER and "/" not in phase and 0 <= value <= MAX_PHASES_S - total:
            phases.append((phase, value))
            total += value
        else:
            scalars[name] = value
    return scalars, phases


class JsonlStream:
    """A JSONL file of `{"step": N, ...}` lines; `parse` turns one decoded object into a Record.

    `source` ("trl", "verl", "maxent" or None): whose names the lines use, mapped as
    `Telemetry.log_metrics(..., source=)` maps them (`catalog.peer_scalars`: with "trl", a training
    line's numbers also as logged, `grpo.trl.logged`, and a line of `eval_` keys is an evaluation);
    a peer's scalars pair with the same peer's samples source (`VerlRollouts`) by step.
    """

    holds = "scalars"

    def __init__(self, name: str, path: str | os.PathLike[str], source: str | None = None) -> None:
        if source is not None and source not in PEERS:
            raise ValueError(f"source: {source!r} is not one of {PEERS} (or None)")
        self.name = name
        self.source = source
        self.bad = BadInput(name)
        self.tail = LineTail(path, bad=self.bad)
        self.ended = False
        self.behind = False
        self._cursor: dict[str, Any] = {}
        self.attempt = 0
        """The job's attempt whose lines are read now (`grpo.attempt`): when this file's current content began
        to be read, in ns. A file truncated or replaced (a relaunched job: verl's file logger opens with "wb")
        starts a newer one, so its steps replace the crashed attempt's in the sidecar."""
        self._resets = 0

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        """Resume at `saved` (also after a failed flush: what was read since is read again)."""
        self.tail.close()
        self.attempt = int((saved or {}).get("attempt") or clock.now_ns())
        if saved:
            check = saved.get("check")
            position = Position(int(saved["inode"]), int(saved["offset"]), None if check is None else int(check),
                                int(saved.get("check_len", 0)), bool(saved.get("at_end", False)))
            self.tail = LineTail(self.tail.path, position, bad=self.bad)
        else:
            self.tail = LineTail(self.tail.path, bad=self.bad)
            if not from_start:
                self.tail.mark_end()
        self._resets = self.tail.resets
        self._cursor = self._position()

    def _position(self) -> dict[str, Any]:
        if self.tail.resets != self._resets:  # read again from 0: what the file holds now is a new attempt's
            self._resets, self.attempt = self.tail.resets, clock.now_ns()
        position = self.tail.position
        return {"inode": position.inode, "offset": position.offset, "check": position.check,
                "check_len": position.check_len, "at_end": position.at_end, "attempt": self.attempt}

    def cursor(self) -> dict[str, Any]:
        return dict(self._cursor)

    def mark_done(self, record: Record) -> None:
        self._cursor = record.cursor

    def poll(self, max_records: int) -> list[Record]:
        out: list[Record] = []
        for line, end in self.tail.read():
            cursor = self._position()
            if not line.strip():
                continue
            try:
                doc = json_line(line)
                record = self.parse(check_step(doc["step"]), doc)
            except PARSE_ERRORS as exc:
                self.bad.skip(f"{self.tail.path}:{end - len(line) - 1}", f"{type(exc).__name__}: {str(exc)[:200]}")
                continue
            record.cursor, record.attempt = cursor, self.attempt
            out.append(record)
            if len(out) >= max_records:
                break
        self.behind = len(out) >= max_records
        return out

    def parse(self, step: int, doc: dict[str, Any]) -> Record:
        """Any `{"step": N, name: number, ...}` line: the numbers are the step's scalars; with TRL's names, a line
        of `eval_` keys is an evaluation (as TRL's log history holds one)."""
        scalars = numbers({k: v for k, v in doc.items() if k != "step"})
        return Record(step, self.keyed(scalars), evaluation=self.source == TRL and is_evaluation(scalars))

    def keyed(self, scalars: dict[str, float]) -> dict[str, float]:
        """`scalars` under the catalog's stat keys (unknown names as they are) through its one mapping of a peer's
        dict (`catalog.peer_scalars`): with TRL's names, a training log's numbers also as logged (`grpo.trl.logged`)."""
        return peer_scalars(scalars, self.source)


class VerlMetrics(JsonlStream):
    """verl's file logger output; `total_steps` (the job's `trainer.total_training_steps`) marks the end."""

    def __init__(self, path: str | os.PathLike[str], total_steps: int | None = None) -> None:
        super().__init__("verl-metrics", path, source=VERL)
        self.total_steps = total_steps

    def parse(self, step: int, doc: dict[str, Any]) -> Record:
        data = doc["data"]
        if not isinstance(data, dict):
            raise TypeError(f"data is {type(data).__name__}, not an object")
        scalars, phases = split_timing(numbers(data))
        if self.total_steps is not None and step >= self.total_steps:
            self.ended = True  # verl's fit() returns after logging this step
        evaluation = bool(data) and all(name.startswith(VALIDATION_PREFIXES) for name in data)
        return Record(step, with_throughput(self.keyed(scalars)), phases, evaluation=evaluation)


def with_throughput(scalars: dict[str, float]) -> dict[str, float]:
    """`tokens_per_second` (all GPUs; `GRPOThroughputDrop`) from verl's tokens and step time, which verl
    logs as `perf/total_num_tokens` and `perf/time_per_step` (its `perf/throughput` is per GPU)."""
    tokens, seconds = scalars.get("step_tokens"), scalars.get("step_time")
    if "tokens_per_second" not in scalars and tokens is not None and seconds is not None:
        if math.isfinite(tokens) and math.isfinite(seconds) and seconds > 0:
            scalars["tokens_per_second"] = tokens / seconds
    return scalars
