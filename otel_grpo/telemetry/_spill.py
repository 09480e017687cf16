"""Local JSONL spill of every selected sample: the copy that survives a dead collector or sidecar.

    spill = SampleSpill(Path("runs/exp-42"))
    spill.write(7, [{"run_id": "exp-42", "step": 7, "prompt": "...", ...}])   # -> runs/exp-42/samples/step_7.jsonl
"""

from __future__ import annotations

import json
import logging
import math
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
        self._suffix = suffix
        self._failed = False
        self.written = 0

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step}{self._suffix}.jsonl"

    def write(self, step: int, records: Iterable[Mapping[str, Any]]) -> None:
        lines = [
            json.dumps({k: _json_safe(v) for k, v in r.items()}, ensure_ascii=False, default=str) for r in records
        ]
        if not lines:
            return
        try:
            self._append(self.path(step), "\n".join(lines) + "\n")
        except OSError as exc:
            if not self._failed:  # a full disk must not stop training, nor flood the log
                self._failed = True
                logger.warning("otel-grpo: sample spill to %s failed (%s); further failures not logged", self.directory, exc)
            return
        self.written += len(lines)

    def _append(self, path: Path, text: str) -> None:
        try:
            fh = path.open("a", encoding="utf-8")
        except FileNotFoundError:  # first write, or the directory was removed: a mkdir only then, not every step
            self.directory.mkdir(parents=True, exist_ok=True)
            fh = path.open("a", encoding="utf-8")
        with fh:
            fh.write(text)
