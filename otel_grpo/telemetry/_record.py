"""`StepRecord`: what the training thread leaves of one step, as plain picklable data.

    rec = StepRecord(step=7, steps_done=1, start_ns=clock.now_ns())
    rec.phases.append(("rollout", start_ns, end_ns, None))
    rec.scalars.append({"kl": 0.01})
    rec.end_ns = clock.now_ns()

Times, names, floats, rows and errors only: no live span, no tracer. A sink hands the
record to the backend (`_backend.Backend`) in this process or, pickled, in a child
process; the backend makes every span of the step from it after the fact. A `Heartbeat`
(work between steps, `Telemetry.heartbeat()`) travels the same way.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ._samples import Selected
from ._text import valid_text

Error = tuple[str, str, str]
"""(exception type, message, formatted traceback) of an exception that ended a phase or a step."""

Phase = tuple[str, int, int, "Error | None"]
"""(name, start in ns, end in ns, error) of one phase, timed by `phase()` or measured elsewhere."""


def error_of(exc: BaseException) -> Error:
    """An exception as the record keeps it, its text valid (`_text`: a message may quote undecodable bytes); the
    error path only: formatting a traceback is slow."""
    return (valid_text(type(exc).__name__), valid_text(str(exc)),
            valid_text("".join(traceback.format_exception(exc))))


@dataclass(slots=True)
class StepRecord:
    """Everything one step (or one `log_metrics` call) recorded, as the training thread left it."""

    step: int
    steps_done: int
    """Increment of the `grpo.steps` counter."""
    start_ns: int
    """Wall-clock start of the step (the `grpo.step` span's start)."""
    end_ns: int | None = None
    error: Error | None = None
    """The exception that left the step's block: the step span's ERROR status and exception event."""
    scalars: list[dict[str, float]] = field(default_factory=list)
    samples: list[dict[str, list[float]]] = field(default_factory=list)
    rows: list[tuple[int, list[Mapping[str, Any]], int | None]] = field(default_factory=list)
    """(time in ns when handed over, rows, group size) per `samples()` call."""
    picked: list[Selected] | None = None
    """The rows kept across ranks (`select_across_ranks`); None: select among `rows` in the backend."""
    pool: int = 0
    """With `picked`: how many rows every rank handed, the positions `picked` numbers (the next record of the
    step numbers its rows after them)."""
    phases: list[Phase] = field(default_factory=list)
    skipped: bool = False
    keep_reason: str | None = None
    """Why every row of this step is kept (an anomalous step, `_retention`); None: the usual selection."""
    judged: bool = False
    """`keep_reason` is the verdict already (judged on the training thread); else the backend judges the step."""
    deferred: list[tuple[Callable[..., None], tuple]] = field(default_factory=list)
    """(function, arguments) of each `Step.defer` not run yet (`_step.run_deferred`)."""
    evaluation: bool = False
    """An evaluation's values (`log_metrics(..., evaluation=True)`), not a training step: it counts no step and
    leaves the step index, the step interval and the step checks' streaks where the last step put them."""
    attempt: int | None = None
    """Which attempt at the step this is (`grpo.attempt`, catalog `spans`): a later attempt's is larger."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Work between training steps (an evaluation batch) at `at_ns`: the stall alerts count from it."""

    at_ns: int
