"""Run plumbing kept out of the loop: device placement, checkpoints, metrics.jsonl, Ctrl-C, progress bar."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from .._stop_request import StopRequest
from ._loading import ConfigError

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"


def trains_on_cpu(device: str, mixed_precision: str) -> bool:
    """Whether this process trains on the CPU (`device` auto: where torch sees no CUDA GPU).

    A placement this machine cannot give is a ConfigError, before any work: accelerate would
    otherwise train on the CPU although cuda was asked for (a CPU build of torch, no driver),
    ignore fp16 there, or put two of torchrun's processes on one GPU (NCCL's "Duplicate GPU").
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and gpus == 0:
        raise ConfigError(f"device is cuda, but torch {torch.__version__} sees no CUDA GPU (a CPU build of torch, "
                          "no driver, or CUDA_VISIBLE_DEVICES empty): use device=auto or device=cpu")
    on_cpu = device == "cpu" or gpus == 0
    if on_cpu and mixed_precision == "fp16":
        raise ConfigError("mixed_precision fp16 needs a CUDA GPU: use bf16 (or no) on the CPU")
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # set by torchrun and accelerate launch
    if not on_cpu and per_node > gpus:
        raise ConfigError(f"device: {per_node} processes on this node share {gpus} CUDA GPU(s): start at most "
                          f"{gpus} per node (torchrun --nproc-per-node {gpus}) or use device=cpu")
    return on_cpu


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically (tmp file + rename): a crash mid-save keeps the previous checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


_CHECKPOINT_KEYS = ("next_step", "run_id", "num_tokens", "policy_version", "model", "reference", "optimizer")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint `save_checkpoint` wrote, else a one-line ConfigError naming the file and what is wrong."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001  a truncated or foreign file: pickle, zip and torch's own errors
        raise ConfigError(f"resume: {path} is not a checkpoint torch can read ({type(e).__name__}: "
                          f"{first_line(e)})") from None
    missing = [key for key in _CHECKPOINT_KEYS if not isinstance(state, dict) or key not in state]
    if missing:
        raise ConfigError(f"resume: {path} is not a checkpoint of this trainer (it lacks {', '.join(missing)})")
    return state


def first_line(error: BaseException) -> str:
    """An exception's message as one line: torch's state-dict errors put a heading above their first problem."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        lines = lines[1:]
    line = lines[0] if lines else type(error).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def append_metrics(path: Path, step: int, values: Mapping[str, float]) -> None:
    """One JSON line per step; non-finite values are written as null."""
    row: dict[str, Any] = {"step": step}
    row.update((k, v if math.isfinite(v) else None) for k, v in values.items() if k != "step")
    with path.open("a") as fh:
        fh.write(json.dumps(row, allow_nan=False) + "\n")


class StopFlag(StopRequest):
    """Set by the first Ctrl-C (SIGINT/SIGTERM): the loop finishes the step, flushes and exits.
    A second Ctrl-C raises KeyboardInterrupt as usual. SIGTERM is a preemption (a scheduler
    stops the job to resume it), not a finished run."""

    @property
    def preempted(self) -> bool:
        return self.signum == signal.SIGTERM

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.is_set():
            raise KeyboardInterrupt
        self.request(signum)

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early when stopped; seconds <= 0 sleeps until stopped."""
        self.wait(None if seconds <= 0 else seconds)


class Progress:
    """Progress with live reward, KL and clip ratio on stderr; a no-op when disabled.

    On a terminal, a rich progress bar. Elsewhere (a pipe, a log file, `make demo | tee`), where
    the bar would show nothing until the end, one plain line after the first step, then after the
    first step at least `every_s` seconds after the last line, and at the last step:

        grpo 37/120 steps  reward 0.412  kl 0.0312  clip 0.001  41 s
    """

    def __init__(self, total: int, start: int, enabled: bool, *, every_s: float = 10.0, console: Any = None) -> None:
        self._bar = self._console = None
        if not enabled:
            return
        from rich.console import Console

        self._console = console or Console(stderr=True)
        self._total, self._done, self._every_s = total, start, every_s
        self._started = self._last_line = monotonic()
        self._lines = 0
        if not self._console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn("[bold]grpo"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[live]}"), console=self._console, transient=False,
        )
        self._task = self._bar.add_task("train", total=total, completed=start, live="")
        self._bar.start()

    def update(self, values: Mapping[str, float]) -> None:
        if self._console is None:
            return
        self._done += 1
        live = "reward {:.3f}  kl {:.4f}  clip {:.3f}".format(
            values.get("reward", math.nan), values.get("kl", math.nan), values.get("clip_ratio_region_mean", math.nan)
        )
        if self._bar is not None:
            self._bar.update(self._task, advance=1, live=live)
            return
        now = monotonic()
        if self._lines == 0 or now - self._last_line >= self._every_s or self._done >= self._total:
            self._lines += 1
            self._last_line = now
            self._console.print(f"grpo {self._done}/{self._total} steps  {live}  {now - self._started:.0f} s",
                                highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def monotonic() -> float:
    return time.perf_counter()
