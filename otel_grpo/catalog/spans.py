"""The span contract: the names of the spans, events and attributes the telemetry writes and the
sidecar reads (and `otel-grpo replay` writes again from the spill). Defined once, here.

- `grpo.step`: attributes `grpo.run_id`, `grpo.step`, `grpo.metric.<stat_key>` (the step's scalars);
- `grpo.phase.<name>`: child of the step span, attribute `grpo.phase`; duration = end - start;
- `grpo.samples`: attributes `grpo.run_id`, `grpo.step`, `grpo.samples.chunk`, `grpo.samples.count`;
  one `grpo.sample` event per sample.
Each of the three also carries the attempt of the process that wrote it, an int that grows with each
attempt (a `Telemetry`'s start in ns; `follow`: when it began reading the job's current files), under one of
two names. `grpo.attempt`: the record claims its step for that attempt (rank 0's training records). A step
sent again by a relaunched or resumed job has a larger one: the sidecar then replaces the step's samples,
scalars and phases together, and the older attempts' later steps go (the relaunch resumed before them); a
smaller one is stale and dropped; the same one (a re-sent export, a replay) is stored once.
`grpo.writer_attempt`: the record claims nothing (an evaluation, another rank's records): it merges into the
step, and is dropped where a newer attempt than its writer's took the step over (`writers_from`). A span
with neither is merged as before.
The resource may carry `grpo.run_id` too (the reader's fallback).
A step number is an integer in 0 .. 2**63 - 1 (`check_step`): OTel attributes and the sidecar's
step column are int64. A run id names a run everywhere (`check_run_id`): its run directory, the
sidecar's `/api/runs/{run_id}` and `run_id` selections.
"""

import operator
from functools import lru_cache
from typing import Any

STEP_SPAN = "grpo.step"
PHASE_PREFIX = "grpo.phase."
SAMPLES_SPAN = "grpo.samples"
SAMPLE_EVENT = "grpo.sample"

RUN_ID_ATTR = "grpo.run_id"
STEP_ATTR = "grpo.step"
PHASE_ATTR = "grpo.phase"
ATTEMPT_ATTR = "grpo.attempt"
WRITER_ATTEMPT_ATTR = "grpo.writer_attempt"
METRIC_PREFIX = "grpo.metric."
CHUNK_ATTR = "grpo.samples.chunk"
COUNT_ATTR = "grpo.samples.count"

MAX_STEP = 2**63 - 1

RUN_ID_MAX_LENGTH = 128
ALL_RUNS = ".*"
"""The sidecar's `run_id` selection of every run (`/api/steps`, `/api/alerts`), Grafana's "All" (the dashboards'
run variable's allValue): no run's own id."""
RUN_SUBRESOURCES = frozenset({"steps", "metrics", "samples", "samples.csv", "samples.jsonl", "sample-steps", "alerts"})
"""The sidecar's `/api/runs/{run_id}/<name>` routes: a run id ending in `/<name>` would read as one of them."""


def writers_from(before: int | None, newer: int) -> int | None:
    """The first writer attempt (`WRITER_ATTEMPT_ATTR`) that counts as attempt `newer`'s, where `before` is the
    newest attempt that claimed steps before `newer` did; None where none did (every writer counts as `newer`'s).

    A writer's attempt is its process's start (`telemetry._attempt`). The launcher starts one job's ranks
    together, yet not at one instant, so another rank's attempt is not exactly its rank 0's; a relaunch starts
    after the attempt before it crashed. Halfway between the two claims tells the jobs apart, in the sidecar and in `otel-grpo replay` alike.
    """
    return None if before is None else before + (newer - before + 1) // 2


def check_step(step: Any) -> int:
    """`step` as an int in 0 .. MAX_STEP (any integer type: int, numpy's), else `ValueError` naming it."""
    try:
        number = None if isinstance(step, bool) else operator.index(step)
    except TypeError:
        number = None
    if number is None or not 0 <= number <= MAX_STEP:
        raise ValueError(f"step is {str(step)[:40]!r}, not an integer in 0 .. 2**63 - 1")
    return number


def check_run_id(run_id: Any) -> str:
    """`run_id` if it can name a run everywhere, else `ValueError` naming it: a non-empty string of at most
    128 characters without control characters, whose `/`-separated parts are none empty, `.` or `..`
    (it names a directory below the runs' one), whose last part after a `/` is no sidecar route
    (`a/steps` would read as run `a`'s steps), and not `.*` (the selection of every run)."""
    if not isinstance(run_id, str) or not 0 < len(run_id) <= RUN_ID_MAX_LENGTH:
        raise ValueError(f"run_id is {str(run_id)[:40]!r}: a run id is a string of 1 to {RUN_ID_MAX_LENGTH} characters")
    problem = _run_id_problem(run_id)
    if problem:
        raise ValueError(f"run_id {run_id[:60]!r} {problem}")
    return run_id


@lru_cache(maxsize=1024)  # the sidecar checks every span's: the same few runs
def _run_id_problem(run_id: str) -> str:
    parts = run_id.split("/")
    if any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        return "holds a control character"
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' part between '/'s (it names the run's directory)"
    if len(parts) > 1 and parts[-1] in RUN_SUBRESOURCES:
        return f"ends in '/{parts[-1]}', which the sidecar's /api/runs/{{run_id}}/{parts[-1]} would take"
    if run_id == ALL_RUNS:
        return "is the sidecar's selection of every run"
    return ""
