"""verl 0.9.1's files: the `file` logger's metrics JSONL and `trainer.rollout_data_dir` generation dumps.

Formats, from verl's source:
- `verl/utils/tracking.py` `FileLogger.log`: one `orjson` line per `Tracking.log` call,
  `{"step": N, "data": {name: value, ...}}`, to `VERL_FILE_LOGGER_PATH` or
  `<VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl`, opened with "wb" (a restarted
  job truncates it).
- `verl/trainer/ppo/ray_trainer.py` `_write_generations`: `<rollout_data_dir>/<step>.jsonl`,
  written in one go by a background thread, one JSON line per sample with `input`,
  `output`, `gts`, `score`, `step` and each entry of the reward's extra info.
- `timing_s/<name>`: `marked_timer` durations in seconds, in the order they were timed.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from ._records import BadInput, Record, finite_or_none, numbers
from ._tail import LineTail, Position

TIMING_PREFIX = "timing_s/"
STEP_TIMER = "step"
_ROLLOUT_FILE = re.compile(r"^(\d+)\.jsonl$")
_ROLLOUT_COLUMNS = {"input": "prompt", "output": "completion", "score": "reward", "gts": "ground_truth"}


def split_timing(data: dict[str, float]) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """`timing_s/<phase>` entries become phases (`grpo.phase.duration`, a child span); the rest stay scalars.

    `timing_s/step` is the whole step (the `grpo.step_time` gauge), and nested names
    (`timing_s/agent_loop/tool_calls/max`) are statistics over requests, not phases:
    both stay scalars.
    """
    scalars: dict[str, float] = {}
    phases: list[tuple[str, float]] = []
    for name, value in data.items():
        phase = name[len(TIMING_PREFIX):] if name.startswith(TIMING_PREFIX) else None
        if phase and phase != STEP_TIMER and "/" not in phase and value >= 0:
            phases.append((phase, value))
        else:
            scalars[name] = value
    return scalars, phases


class JsonlStream:
    """A JSONL file of `{"step": N, ...}` lines; `parse` turns one decoded object into a Record."""

    def __init__(self, name: str, path: str | os.PathLike[str]) -> None:
        self.name = name
        self.tail = LineTail(path)
        self.bad = BadInput(name)
        self.ended = False
        self._cursor: dict[str, Any] = {"inode": 0, "offset": 0}

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        if saved:
            self.tail = LineTail(self.tail.path, Position(int(saved["inode"]), int(saved["offset"])))
        elif not from_start:
            self.tail.seek_end()
        position = self.tail.position
        self._cursor = {"inode": position.inode, "offset": position.offset}

    def cursor(self) -> dict[str, Any]:
        return dict(self._cursor)

    def mark_done(self, record: Record) -> None:
        self._cursor = record.cursor

    def poll(self, max_records: int) -> list[Record]:
        out: list[Record] = []
        for line, end in self.tail.read():
            cursor = {"inode": self.tail.position.inode, "offset": end}
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                step = doc["step"]
                if not isinstance(step, int) or isinstance(step, bool):
                    raise ValueError(f"step is {step!r}")
                record = self.parse(step, doc)
            except (ValueError, KeyError, TypeError) as exc:
                self.bad.skip(f"{self.tail.path}:{end - len(line) - 1}", f"{type(exc).__name__}: {exc}")
                continue
            record.cursor = cursor
            out.append(record)
            if len(out) >= max_records:
                break
        return out

    def parse(self, step: int, doc: dict[str, Any]) -> Record:
        """Any `{"step": N, name: number, ...}` line: the numbers are the step's scalars."""
        return Record(step, numbers({k: v for k, v in doc.items() if k != "step"}))


class VerlMetrics(JsonlStream):
    """verl's file logger output; `total_steps` (the job's `trainer.total_training_steps`) marks the end."""

    def __init__(self, path: str | os.PathLike[str], total_steps: int | None = None) -> None:
        super().__init__("verl-metrics", path)
        self.total_steps = total_steps

    def parse(self, step: int, doc: dict[str, Any]) -> Record:
        data = doc["data"]
        if not isinstance(data, dict):
            raise TypeError(f"data is {type(data).__name__}, not an object")
        scalars, phases = split_timing(numbers(data))
        if self.total_steps is not None and step >= self.total_steps:
            self.ended = True  # verl's fit() returns after logging this step
        return Record(step, scalars, phases)


def rollout_row(entry: dict[str, Any]) -> dict[str, Any]:
    """One dumped sample as a sample row: input/output/score/gts renamed, numeric extra info as rewards."""
    row: dict[str, Any] = {}
    rewards: dict[str, float] = {}
    for key, value in entry.items():
        if key == "step":
            continue
        if key in _ROLLOUT_COLUMNS:
            row[_ROLLOUT_COLUMNS[key]] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and finite_or_none(value) is not None:
            rewards[key] = float(value)  # reward_extra_info: the reward function's components
        else:
            row[key] = value
    if rewards:
        row["rewards"] = rewards
    return row


class VerlRollouts:
    """`<dir>/<step>.jsonl` generation dumps. A file is read once it ends in a newline and either a
    later step's file exists or its size has not changed for `settle_s` (verl writes it in one go);
    `settle_s=0` reads the newest file at once (the run is over: `--finished`)."""

    name = "verl-rollouts"
    KEEP = 256  # files remembered individually; older steps count as done by number

    def __init__(self, directory: str | os.PathLike[str], settle_s: float = 2.0) -> None:
        self.dir = Path(directory)
        self.settle_s = settle_s
        self.bad = BadInput(self.name)
        self.ended = False
        self._done: dict[str, list[int]] = {}  # file name -> [inode, size] when emitted
        self._floor = -1  # steps <= floor are done
        self._sizes: dict[str, tuple[int, float]] = {}
        self._handed: dict[str, list[int]] = {}  # read and given to the follower, not yet emitted

    def restore(self, saved: dict[str, Any] | None, from_start: bool) -> None:
        if saved:
            self._done = {k: list(v) for k, v in saved.get("done", {}).items()}
            self._floor = int(saved.get("floor", -1))
        elif not from_start:
            steps = [s for s, _ in self._files()]
            self._floor = max(steps, default=-1)

    def _files(self) -> list[tuple[int, Path]]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        found = [(int(m.group(1)), self.dir / n) for n in names if (m := _ROLLOUT_FILE.match(n))]
        return sorted(found)

    def cursor(self) -> dict[str, Any]:
        return {"done": dict(self._done), "floor": self._floor}

    def mark_done(self, record: Record) -> None:
        name, inode, size = record.cursor
        self._done[name] = [inode, size]
        self._handed.pop(name, None)
        if len(self._done) > self.KEEP:
            by_step = sorted(self._done, key=lambda n: int(n.split(".")[0]))
            for old in by_step[: len(self._done) - self.KEEP]:
                self._floor = max(self._floor, int(old.split(".")[0]))
                del self._done[old]

    def _settled(self, name: str, size: int) -> bool:
        if self.settle_s <= 0:
            return True
        now = time.monotonic()
        seen = self._sizes.get(name)
        if seen is None or seen[0] != size:
            self._sizes[name] = (size, now)
            return False
        return now - seen[1] >= self.settle_s

    def poll(self, max_records: int) -> list[Record]:
        files = self._files()
        last_step = files[-1][0] if files else None
        out: list[Record] = []
        for step, path in files:
            if len(out) >= max_records:
                break
            name = path.name
            if step <= self._floor and name not in self._done:
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            key = [stat.st_ino, stat.st_size]
            if self._done.get(name) == key or self._handed.get(name) == key:
                continue
            if step == last_step and not self._settled(name, stat.st_size):
                continue  # the newest file may still be written; a later step's file means it is complete
            record = self._read(step, path, stat)
            if record is not None:
                self._sizes.pop(name, None)
                self._handed[name] = key
                out.append(record)
        return out

    def _read(self, step: int, path: Path, stat: os.stat_result) -> Record | None:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            return None  # still being written
        rows = []
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise TypeError(f"a {type(entry).__name__}, not an object")
            except (ValueError, TypeError) as exc:
                self.bad.skip(f"{path}:{number}", str(exc))
                continue
            rows.append(rollout_row(entry))
        return Record(step, rows=rows, cursor=(path.name, stat.st_ino, stat.st_size))
