"""`otel-grpo replay` of a spill folder into a sidecar, as a user runs it (a subprocess of the real CLI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def replay_spill(url: str, spill: Path, exit_code: int = 0, *options: str) -> subprocess.CompletedProcess:
    """Replay `spill` into the sidecar at `url` (with `options`); asserts the CLI exits with `exit_code`."""
    result = subprocess.run([sys.executable, "-m", "otel_grpo.cli", "replay", str(spill), "--endpoint", url, *options],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == exit_code, result.stderr
    return result
