"""The trainer's progress where nobody watches a terminal (a pipe, a log file): plain lines, not a
bar that shows nothing until the run ends."""

from __future__ import annotations

import io

from rich.console import Console

from otel_grpo.trainer._runtime import Progress

VALUES = {"reward": 0.25, "kl": 0.0125, "clip_ratio_region_mean": 0.5}


def _lines(every_s: float, total: int = 5, start: int = 0) -> list[str]:
    out = io.StringIO()
    progress = Progress(total, start, True, every_s=every_s, console=Console(file=out, force_terminal=False))
    for _ in range(start, total):
        progress.update(VALUES)
    progress.close()
    return out.getvalue().splitlines()


def test_off_a_terminal_the_first_and_the_last_step_print_a_line():
    lines = _lines(every_s=float("inf"))
    assert [line.split("  ")[0] for line in lines] == ["grpo 1/5 steps", "grpo 5/5 steps"]
    assert "reward 0.250  kl 0.0125  clip 0.500" in lines[-1] and lines[-1].endswith(" s")


def test_off_a_terminal_a_line_every_interval_and_from_a_resumed_step():
    assert [line.split("  ")[0] for line in _lines(every_s=0.0)] == [f"grpo {i}/5 steps" for i in range(1, 6)]
    assert [line.split("  ")[0] for line in _lines(every_s=float("inf"), total=6, start=3)] == [
        "grpo 4/6 steps", "grpo 6/6 steps"]


def test_disabled_prints_nothing():
    out = io.StringIO()
    progress = Progress(3, 0, False, console=Console(file=out, force_terminal=False))
    progress.update(VALUES)
    progress.note("fault: stall at step 1")
    progress.close()
    assert out.getvalue() == ""
