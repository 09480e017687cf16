"""Deferred recordings for test_deferred (`Step.defer`): module-level, so that the telemetry process imports them
by name; stdlib only, so that importing them there costs nothing."""

from __future__ import annotations

import os
import threading

RAN_ON: list[tuple[int, str]] = []
"""(process id, thread name) of each call in this process."""


def finish(step, base: float, rows: list[dict]) -> None:
    RAN_ON.append((os.getpid(), threading.current_thread().name))
    step.record({"kl": base, "entropy": base * 2}, reward_std=0.5)
    step.samples(rows, group_size=2)


def broken(step, message: str) -> None:
    step.record({"kl": 9.0})  # recorded before the error: it goes out
    raise RuntimeError(message)
