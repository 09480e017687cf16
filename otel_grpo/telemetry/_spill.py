"""Local JSONL spill of every selected sample and every step's scalars: the copy that survives a
dead collector or sidecar, and that `otel-grpo replay` sends again.

    spill = SampleSpill(Path("runs/exp-42"))
    spill.write(7, [{"run_id": "exp-42", "step": 7, "prompt": "...", ...}])   # -> runs/exp-42/samples/step_7.jsonl
    spill.write_step("exp-42", 7, start_ns, end_ns, {"kl": 0.01}, {"rollout": 1.5})  # -> runs/exp-42/steps.jsonl

Every write appends whole lines or nothing: a write that fails (a full disk) is cut back to
where it began, so a reader never meets half a line.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

logger = logging.getLogger("otel_grpo.telemetry")


def _json_safe(value: Any) -> Any:
    # JSON has no NaN / Infinity; strict readers (jq, browsers) reject Python's spelling.
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class SampleSpill:
    """Appends sample records to `<output_dir>/samples/step_<step>.jsonl`; never raises.

    `suffix` keeps ranks apart when every rank exports (`step_3_rank1.jsonl`).
    """

    def __init__(self, output_dir: Path, suffix: str = "") -> None:
        self.directory = Path(output_dir) / "samples"
        self.steps_path = Path(output_dir) / f"steps{suffix}.jsonl"
        """One line per emitted step span: what the sidecar's step row is made of."""
        self._suffix = suffix
        self._failed = False
        self.written = 0

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step}{self._suffix}.jsonl"

    def write_step(self, run_id: str, step: int, start_ns: int | None, end_ns: int | None,
                   metrics: Mapping[str, float], phases: Mapping[str, float]) -> None:
        """The step's finite scalars and its phase durations (seconds, summed per phase name)."""
        line = json.dumps({"run_id": run_id, "step": step, "start_ns": start_ns, "end_ns": end_ns,
                           "metrics": {k: _json_safe(v) for k, v in metrics.items()}, "phases": dict(phases)},
                          ensure_ascii=False, default=str)
        try:
            self._append(self.steps_path, line + "\n")
        except OSError as exc:
            self._warn(exc)

    def write(self, step: int, records: Iterable[Mapping[str, Any]]) -> None:
        lines = [
            json.dumps({k: _json_safe(v) for k, v in r.items()}, ensure_ascii=False, default=str) for r in records
        ]
        if not lines:
            return
        try:
            self._append(self.path(step), "\n".join(lines) + "\n")
        except OSError as exc:
            self._warn(exc)
            return
        self.written += len(lines)

    def _warn(self, exc: OSError) -> None:
        if not self._failed:  # a full disk must not stop training, nor flood the log
            self._failed = True
            logger.warning("otel-grpo: spill to %s failed (%s); further failures not logged", self.directory.parent, exc)

    @staticmethod
    def _append(path: Path, text: str) -> None:
        data = text.encode("utf-8")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:  # first write, or the directory was removed: a mkdir only then, not every step
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        try:
            start = os.fstat(fd).st_size
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view):]
            except OSError:
                # A full disk took part of the lines: cut the file back to its last whole line.
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)


@dataclass(slots=True)
class SpillLines:
    """What `read_spill` found: every rank's step lines and every sample line, in file order."""

    steps: list[dict]
    samples: list[dict]
    unreadable: dict[Path, int]
    """Files holding lines that are no JSON object (cut short by a crash from before whole-line writes, or
    edited by hand), with how many: skipped, and for the caller to report."""


def read_spill(output_dir: Path) -> SpillLines:
    """`steps*.jsonl` and `samples/step_*.jsonl` under `output_dir`."""
    out = SpillLines([], [], {})
    for rows, paths in ((out.steps, Path(output_dir).glob("steps*.jsonl")),
                        (out.samples, (Path(output_dir) / "samples").glob("step_*.jsonl"))):
        for path in sorted(paths):
            bad = _read_lines(path, rows)
            if bad:
                out.unreadable[path] = bad
    return out


def _read_lines(path: Path, rows: list[dict]) -> int:
    """Append `path`'s JSON-object lines to `rows`; returns how many other (non-blank) lines it holds."""
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                bad += bool(line.strip())
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
    return bad
